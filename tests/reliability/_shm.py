"""What the shared-memory reliability tests share: the segments a process has in /dev/shm or
maps, groups on a fresh TCP store (a new port per group, as a restarted job gets), and the
check that an error names the call that failed and the peer it failed on.

Segment names come from csrc/transport/shm/segment.cc: /dev/shm/ringzip-<pid>-<pid namespace
inode, hex>-<random>. A rank unlinks its segment once every peer mapped it, so after setup a
live segment shows only in /proc/<pid>/maps (marked "(deleted)") and is reachable through
/proc/<pid>/map_files/<range> (root)."""
from __future__ import annotations

import os
import re
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from ringzip.bench.common import SHM_PREFIX as PREFIX
from ringzip.bench.common import shm_segments as segments

CODECS = ["none", "fp16", "bf16", "q8", "q4", "q2", "q1", "topk:0.01", "randomk:0.01"]


def pid_namespace() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


def mapped_segments(pid: int) -> list[tuple[str, str]]:
    """(address range, segment name) of every ringzip segment process `pid` maps."""
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5].startswith("/dev/shm/" + PREFIX):
                out.append((parts[0], parts[5][len("/dev/shm/"):]))
    return out


def wait_for(path: str, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise TimeoutError(f"{path} did not appear within {deadline_s} s")
        time.sleep(0.005)


def touch(path: str, text: str = "") -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def tcp_group(tmp: str, name: str, rank: int, world: int, timeout_s: float = 30.0, **kw):
    """init_process_group('ringzip') on a TCP store that rank 0 hosts on a port the kernel picks;
    the others read the port from a file in tmp."""
    import ringzip  # noqa: F401  (registers the backend)

    port_file = os.path.join(tmp, f"port.{name}")
    if rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, world, True, timedelta(seconds=timeout_s), wait_for_workers=False)
        touch(port_file, str(store.port))
    else:
        wait_for(port_file, timeout_s)
        with open(port_file) as f:
            port = int(f.read())
        store = dist.TCPStore("127.0.0.1", port, world, False, timedelta(seconds=timeout_s))
    dist.init_process_group("ringzip", store=store, rank=rank, world_size=world, **kw)
    return store


def exact_allreduce(n: int = 1000, group=None) -> None:
    """An int32 all-reduce (never compressed, whatever the codec) whose value is checked."""
    t = torch.full((n,), dist.get_rank(group) + 1, dtype=torch.int32)
    dist.all_reduce(t, group=group)
    w = dist.get_world_size(group)
    assert torch.equal(t, torch.full((n,), w * (w + 1) // 2, dtype=torch.int32)), t[:4]


def error_text(e: BaseException) -> str:
    return str(e).split("\nException raised from")[0]


def check_names(msg: str, op: str, group: str, seq: int, rank: int, world: int) -> None:
    """The message names the op, the group, the call's sequence number, this rank, and a peer."""
    for s in (op, f"group '{group}'", f"seq {seq}", f"rank {rank} of {world}"):
        assert s in msg, f"{s!r} not in {msg!r}"
    peers = {int(p) for p in re.findall(r"rank (\d+)", msg)} - {rank}
    assert peers and peers <= set(range(world)), f"no peer rank named in {msg!r}"
