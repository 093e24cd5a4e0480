"""Which ranks of a group share a node: every rank publishes a node key through the group's
store and numbers the distinct keys by their lowest rank (csrc/collective/hierarchy/layout.h).

The key is the host's name, its boot id and the network namespace of the process: processes in
different network namespaces count as different nodes even on one host -- they cannot reach each
other through the host's loopback, and that is how the benchmarks emulate several machines on
one (``ringzip-bench --nodes``). ``RINGZIP_NODE_ID`` overrides the key (any string; equal
strings: one node)."""
from __future__ import annotations

import os
import socket
import warnings


def node_key() -> str:
    explicit = os.environ.get("RINGZIP_NODE_ID")
    if explicit:
        return "id:" + explicit
    parts = [socket.gethostname()]
    for path in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/net"):
        try:
            parts.append(os.readlink(path) if path.endswith("/net") else open(path).read().strip())
        except OSError:
            parts.append("")
    return "|".join(parts)


def node_of_ranks(store, rank: int, size: int) -> list[int]:
    """The node number of every rank (collective over the group: every rank must call it)."""
    key = node_key()
    store.set(f"node/{rank}", key)
    keys = [key if r == rank else store.get(f"node/{r}").decode() for r in range(size)]
    first: dict[str, int] = {}
    node_of = [first.setdefault(k, len(first)) for k in keys]
    _check_torchrun(node_of, rank, size)
    return node_of


def _check_torchrun(node_of: list[int], rank: int, size: int) -> None:
    """torchrun knows how many ranks it started on this node: a different count means the node
    keys do not tell the machines apart (e.g. identical containers) -- say so."""
    local_world = os.environ.get("LOCAL_WORLD_SIZE")
    if local_world is None or os.environ.get("WORLD_SIZE") != str(size):
        return
    found = node_of.count(node_of[rank])
    if found != int(local_world):
        warnings.warn(
            f"ringzip: torchrun started LOCAL_WORLD_SIZE={local_world} ranks on this node but {found} ranks "
            f"report this node's key (host name, boot id, network namespace); set RINGZIP_NODE_ID to a per-"
            f"machine value (e.g. the node rank) so node-aware collectives group the ranks correctly",
            stacklevel=3,
        )
