"""Creates ringzip backends for torch.distributed and finds them again per group."""
from __future__ import annotations

import logging
import os
import sys
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import PrefixStore

from . import _C, _network, _topology
from .options import Options

log = logging.getLogger("ringzip")

def apply_options(backend: "_C.RingzipBackend", opts: Options) -> None:
    """Applies every field or none: the C++ side checks them all before it changes anything, and
    holds what it applied (options_of reads it back)."""
    backend.configure(opts._as_c())  # noqa: SLF001
    topo = backend.topology()
    log.info("ringzip rank %d of a group: %s, %s, transport %s", backend.rank(), topo["layout"],
             "node-aware" if topo["node_aware"] else f"flat ({topo['flat_reason']})", topo["transport"])
    if opts.hierarchy == "node" and not topo["node_aware"]:
        warnings.warn(f"ringzip: hierarchy='node': {topo['flat_reason']} ({topo['layout']}), so the group's "
                      f"all-reduce and reduce-scatter run flat", stacklevel=3)


# Backends known to ignore a pg_options object that is not theirs. torch has no per-backend
# options: it hands the one pg_options object to the creator of every backend in a string such
# as "cpu:ringzip,cuda:nccl", and NCCL's creator rejects anything but ProcessGroupNCCL.Options.
_IGNORE_FOREIGN_OPTIONS = frozenset({"ringzip", "gloo", "mpi", "ucc", "xccl", "fake"})

MIXED_OPTIONS_RECIPE = (
    "create the group without pg_options and call ringzip.set_options(...) right after "
    "init_process_group / new_group (or set RINGZIP_* environment variables before it)"
)


def _group_backends() -> "dict[str, str] | None":
    """Device -> backend of the group torch is creating right now, read from torch's
    ``_new_process_group_helper`` frame (its ``backend_config``, torch 2.0 through 2.14);
    None when it cannot be found, and then nothing depends on it."""
    f = sys._getframe(1)  # noqa: SLF001
    for _ in range(12):
        if f is None:
            return None
        if f.f_code.co_name == "_new_process_group_helper":
            try:
                mapping = f.f_locals["backend_config"].get_device_backend_map()
                return {str(d): str(b).lower() for d, b in mapping.items()}
            except Exception:  # noqa: BLE001  (a future torch may name things differently)
                return None
        f = f.f_back
    return None


def _resolve_pg_options(pg_options) -> "Options | None":
    """The ringzip.Options this backend uses out of what torch passed as pg_options.

    In a mixed backend string torch gives every backend the same object: options of another
    backend (e.g. ProcessGroupNCCL.Options) are left to it, and ringzip.Options next to a backend
    that would reject them raise here, before that backend fails with a message about its own
    options class."""
    if pg_options is None:
        return None
    backends = _group_backends()
    others = sorted({b for b in (backends or {}).values() if b != "ringzip"})
    if isinstance(pg_options, Options):
        picky = [b for b in others if b not in _IGNORE_FOREIGN_OPTIONS]
        if picky:
            spec = ",".join(f"{d}:{b}" for d, b in backends.items())
            raise ValueError(
                f"ringzip: pg_options=ringzip.Options(...) cannot be used with the backend string "
                f"{spec!r}: torch passes the same pg_options to every backend of the group, and "
                f"{', '.join(picky)} accepts only its own options class. Instead, {MIXED_OPTIONS_RECIPE}."
            )
        return pg_options
    if others:
        return None  # another backend's options (e.g. ProcessGroupNCCL.Options): theirs, not ours
    raise TypeError(
        f"ringzip: pg_options must be ringzip.Options, got {type(pg_options).__name__}"
    )


def create_backend(dist_opts, pg_options):
    """The creator torch calls (extended API): ringzip's c10d Backend for one group."""
    opts = Options.from_env(_resolve_pg_options(pg_options))
    timeout = opts.timeout if opts.timeout is not None else dist_opts.timeout
    return _build(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, timeout, str(dist_opts.group_id), opts)


def _split(store, rank: int, size: int, timeout: timedelta, group_name: str, parent: "_C.Options"):
    """The child of RingzipBackend::split (dist.split_group, DeviceMesh on a device-bound group):
    built as a new group is, with the parent's options."""
    opts = Options._from_c(parent)  # noqa: SLF001
    return _build(store, rank, size, opts.timeout if opts.timeout is not None else timeout, group_name, opts)


def _build(group_store, rank: int, size: int, timeout, group_name: str, opts: Options, agree: bool = True):
    """agree: queue the cost model's first agreement now where it needs nothing measured
    (RingzipBackend::agree_early); False: the caller does, after seeding the group's figures."""
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    connections = _agreed_connections(group_store, rank, size, opts.connections)
    # The transport gets its own corner of the group's store, so it never meets other backends' keys.
    # Between machines ringzip's own TCP (transport/tcp/); Gloo's only where asked for.
    if opts.transport != "gloo":
        backend = _C.RingzipBackend(PrefixStore("ringzip/tcp/", group_store), rank, size, timeout, group_name,
                                    _network.listen_address(), connections, opts.link_gbit)
    else:
        store = PrefixStore("ringzip/transport/", group_store)
        gloo = [dist.ProcessGroupGloo(store, rank, size, timeout)]
        gloo += [_pool_gloo(PrefixStore(f"ringzip/transport/{i}/", group_store), rank, size, timeout)
                 for i in range(1, connections)]
        backend = _C.RingzipBackend(gloo, timeout, group_name)
    node_of = _topology.node_of_ranks(PrefixStore("ringzip/topology/", group_store), rank, size)
    # Shared memory among the ranks of this node (CPU tensors): its rendezvous finds every rank of
    # the node already here (they published their node keys), so a minute is plenty.
    shm_store = None
    if opts.transport in ("auto", "shm") and node_of.count(node_of[rank]) > 1:
        shm_store = PrefixStore(f"ringzip/shm/{node_of[rank]}/", group_store)
    why = backend.set_topology(node_of, shm_store, min(timeout, timedelta(seconds=60)))
    if why and opts.transport == "shm":
        raise RuntimeError(f"ringzip: Options(transport='shm'): shared memory between the ranks of this "
                           f"node is unusable ({why}); transport='auto' falls back to TCP over loopback")
    if why:
        warnings.warn(f"ringzip: shared memory between the ranks of this node is unusable ({why}); they "
                      f"exchange messages through TCP over loopback instead", stacklevel=3)
    apply_options(backend, opts)
    backend.enable_mismatch_watch(PrefixStore("ringzip/watch/", group_store))
    _maybe_enable_cuda(backend, group_store, opts)
    if agree:
        backend.agree_early()
    return backend


def _agreed_connections(store, rank: int, size: int, wanted: int) -> int:
    """Options.connections as rank 0 has it: both ends of a message must cut it into as many
    stripes (a rank that differs warns and follows; 0, the default, lets each pair of ranks
    choose by its round trip). 1 where there is no peer."""
    if size == 1:
        return 1
    if rank == 0:
        store.set("ringzip/connections", str(wanted))
    agreed = int(store.get("ringzip/connections"))
    if agreed != wanted:
        warnings.warn(f"ringzip: Options(connections={wanted}) on rank {rank}, but rank 0 of the group has "
                      f"{agreed}; the group uses {agreed}", stacklevel=4)
    return agreed


def _pool_gloo(store, rank: int, size: int, timeout: timedelta):
    """One of the transport's extra connections to each peer: a ProcessGroupGloo on the interface
    torch's own would take (GLOO_SOCKET_IFNAME, else the host name's address), with one worker
    thread (it carries only send and recv). Connected at creation: Gloo's lazily connected
    pairs hung a direct exchange of striped messages among 3 ranks."""
    ifname = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0].strip()
    gloo = dist.ProcessGroupGloo
    device = gloo.create_device(interface=ifname) if ifname else gloo.create_default_device()
    opts = gloo._Options()  # noqa: SLF001
    opts._devices = [device]  # noqa: SLF001
    opts._timeout = timeout  # noqa: SLF001
    opts._threads = 1  # noqa: SLF001
    return gloo(store, rank, size, opts)


def _maybe_enable_cuda(backend, store, opts: Options) -> None:
    """CUDA tensors go over NCCL with the CUDA kernels when this build has them (communicators
    are created lazily, on the first CUDA collective); Options(transport="gloo") keeps them on
    the host-staged Gloo path."""
    cuda = getattr(_C, "cuda", None)
    if cuda is None or opts.transport in ("gloo", "tcp"):
        return
    if not torch.cuda.is_available():
        return
    cuda.enable(backend, PrefixStore("ringzip/nccl/", store))


def register() -> None:
    if "RINGZIP" in dist.Backend._plugins:  # noqa: SLF001
        return
    _C.set_split_builder(_split)
    dist.Backend.register_backend("ringzip", create_backend, extended_api=True, devices=["cpu", "cuda"])


def backend_of(group=None) -> "_C.RingzipBackend":
    """The ringzip backend of ``group`` (``None``: the default group; a process group whose
    members come and go, ringzip.torchft's: its current group's)."""
    from ._membership import Reconfigurable

    if isinstance(group, Reconfigurable):
        return group._ringzip_backend()  # noqa: SLF001
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
    from ._membership import Reconfigurable

    if isinstance(group, Reconfigurable):
        return group._ringzip_options()  # noqa: SLF001 -- before its first group too
    return Options._from_c(backend_of(group).group_options())  # noqa: SLF001
