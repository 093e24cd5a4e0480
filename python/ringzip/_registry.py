"""Creates ringzip backends for torch.distributed and finds them again per group."""
from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import PrefixStore

from . import _C
from .options import Options, compressed_algorithm, dense_algorithm

# Current Options per backend (keyed by the C++ object: torch may hand out a fresh Python
# wrapper for the same backend, e.g. torch 2.11). The C++ side holds the applied values.
_options: "dict[int, Options]" = {}


def apply_options(backend: "_C.RingzipBackend", opts: Options) -> None:
    """Applies every field or none: the C++ side checks them all before it changes anything."""
    backend.configure(
        algorithm=dense_algorithm(opts.algorithm),
        check=opts.check,
        codec=opts.codec,
        bucket_size=opts.bucket_size,
        stochastic=opts.rounding == "stochastic",
        min_numel=opts.min_numel,
        error_feedback=opts.error_feedback,
        seed=opts.seed,
        compressed_algorithm=compressed_algorithm(opts.algorithm),
        topk_block=opts.topk_block,
    )
    _options[backend.identity] = opts


def create_backend(dist_opts, pg_options):
    """The creator torch calls (extended API): ringzip's c10d Backend for one group."""
    if pg_options is not None and not isinstance(pg_options, Options):
        raise TypeError(f"ringzip: pg_options must be ringzip.Options, got {type(pg_options).__name__}")
    opts = Options.from_env(pg_options)
    timeout = opts.timeout if opts.timeout is not None else dist_opts.timeout
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    # The transport gets its own corner of the group's store, so it never meets other backends' keys.
    store = PrefixStore("ringzip/transport/", dist_opts.store)
    gloo = dist.ProcessGroupGloo(store, dist_opts.group_rank, dist_opts.group_size, timeout)
    backend = _C.RingzipBackend(gloo, timeout, str(dist_opts.group_id))
    apply_options(backend, opts)
    backend.enable_mismatch_watch(PrefixStore("ringzip/watch/", dist_opts.store))
    _maybe_enable_cuda(backend, dist_opts.store, opts)
    return backend


def _maybe_enable_cuda(backend, store, opts: Options) -> None:
    """CUDA tensors go over NCCL with the CUDA kernels when this build has them (communicators
    are created lazily, on the first CUDA collective); Options(transport="gloo") keeps them on
    the host-staged Gloo path."""
    cuda = getattr(_C, "cuda", None)
    if cuda is None or opts.transport == "gloo":
        return
    if not torch.cuda.is_available():
        return
    cuda.enable(backend, PrefixStore("ringzip/nccl/", store))


def register() -> None:
    if "RINGZIP" in dist.Backend._plugins:  # noqa: SLF001
        return
    dist.Backend.register_backend("ringzip", create_backend, extended_api=True, devices=["cpu", "cuda"])


def backend_of(group=None) -> "_C.RingzipBackend":
    """The ringzip backend of ``group`` (``None``: the default group)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()  # noqa: SLF001
    for device in ("cpu", "cuda"):
        try:
            b = pg._get_backend(torch.device(device))  # noqa: SLF001
        except RuntimeError:
            continue
        if isinstance(b, _C.RingzipBackend):
            return b
    raise ValueError(f"ringzip: group {pg.group_name!r} has no ringzip backend")


def options_of(group=None) -> Options:
    return _options[backend_of(group).identity]
