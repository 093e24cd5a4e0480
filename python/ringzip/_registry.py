"""Creates ringzip backends for torch.distributed and remembers them per group."""
from __future__ import annotations

import weakref
from datetime import timedelta

import torch.distributed as dist
from torch.distributed import PrefixStore

from . import _C
from .options import Options

# Backend objects by group name, so ringzip.set_options / stats can find a group's backend.
_backends: "weakref.WeakValueDictionary[str, _C.RingzipBackend]" = weakref.WeakValueDictionary()


def create_backend(dist_opts, pg_options):
    """The creator torch calls (extended API): returns ringzip's c10d Backend for one group."""
    if pg_options is not None and not isinstance(pg_options, Options):
        raise TypeError(f"ringzip: pg_options must be ringzip.Options, got {type(pg_options).__name__}")
    opts = Options.from_env(pg_options)
    timeout = opts.timeout if opts.timeout is not None else dist_opts.timeout
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    # The transport gets its own corner of the group's store, so it never meets other backends' keys.
    store = PrefixStore("ringzip/transport/", dist_opts.store)
    gloo = dist.ProcessGroupGloo(store, dist_opts.group_rank, dist_opts.group_size, timeout)
    backend = _C.RingzipBackend(gloo, timeout, opts.algorithm, str(dist_opts.group_id))
    _backends[str(dist_opts.group_id)] = backend
    return backend


def register() -> None:
    if "RINGZIP" in dist.Backend._plugins:  # noqa: SLF001
        return
    dist.Backend.register_backend("ringzip", create_backend, extended_api=True, devices=["cpu", "cuda"])


def backend_of(group=None) -> "_C.RingzipBackend":
    """The ringzip backend of ``group`` (``None``: the default group)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()  # noqa: SLF001
    for device in ("cpu", "cuda"):
        try:
            b = pg._get_backend(torch_device(device))  # noqa: SLF001
        except RuntimeError:
            continue
        if isinstance(b, _C.RingzipBackend):
            return b
    raise ValueError(f"ringzip: group {pg.group_name!r} has no ringzip backend")


def torch_device(name: str):
    import torch

    return torch.device(name)
