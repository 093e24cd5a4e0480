"""Connections a closed group leaves to the next (transport/tcp/kept.h): a group destroyed
cleanly keeps its idle TCP connections, and the next group between the same processes takes
them over -- the same sockets, whatever the new rank order -- with the next group's results
exact. A member that aborted, a member absent from the next group and a peer that left before
the others closed cost the next group nothing but new connections: it builds, computes right,
and nothing hangs."""
from __future__ import annotations

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from tests import mp

N = 3
CONNECTIONS = 2


def _sockets():
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            out.add(target)
    return out


def _group(ctx, name, rank, size, **options):
    """A standalone ringzip group over tcp of `size` members, this process as `rank`."""
    import ringzip

    store = dist.PrefixStore(name, dist.FileStore(os.path.join(ctx.tmpdir, "store"), -1))
    opts = ringzip.Options(transport="tcp", connections=CONNECTIONS, timeout=timedelta(seconds=30), **options)
    return ringzip.new_process_group(store, rank, size, opts)


def _sum_check(pg, rank, size, numel=1 << 18):
    x = torch.arange(numel, dtype=torch.float32) + 1000 * rank
    pg.allreduce([x]).wait()
    want = torch.arange(numel, dtype=torch.float32) * size + 1000 * sum(range(size))
    return bool(torch.equal(x, want))


def _taken_over(ctx):
    from ringzip import _C

    out = {}
    a = _group(ctx, "a/", ctx.rank, N)
    out["a"] = _sum_check(a, ctx.rank, N, numel=1 << 20)
    a.shutdown()
    out["kept"] = _C.tcp_kept_connections()
    left = _sockets()
    # The next group numbers the members the other way round: who connects and who accepts swaps.
    b = _group(ctx, "b/", N - 1 - ctx.rank, N)
    out["kept_after"] = _C.tcp_kept_connections()
    out["carried"] = len(left & _sockets())
    out["b"] = _sum_check(b, N - 1 - ctx.rank, N, numel=1 << 20)
    b.shutdown()
    return out


def test_a_new_group_takes_over_the_connections_a_closed_one_kept():
    for r, out in enumerate(mp.run(_taken_over, N, timeout=120)):
        assert out["a"] and out["b"], (r, out)
        assert out["kept"] == (N - 1) * CONNECTIONS, (r, out)
        assert out["kept_after"] == 0, (r, out)
        assert out["carried"] >= (N - 1) * CONNECTIONS, (r, out)


def _after_trouble(ctx):
    from ringzip import _C

    out = {}
    # Rank 1 aborts its group (as after a failure): its connections close, the others' too.
    a = _group(ctx, "a/", ctx.rank, N)
    out["a"] = _sum_check(a, ctx.rank, N)
    if ctx.rank == 1:
        a.abort()
    else:
        time.sleep(0.5)
        a.shutdown()
    b = _group(ctx, "b/", ctx.rank, N)
    out["b"] = _sum_check(b, ctx.rank, N)
    b.shutdown()
    # Rank 2 sits the next group out: ranks 0 and 1 take theirs over, rank 2 keeps its own.
    if ctx.rank < 2:
        c = _group(ctx, "c/", ctx.rank, 2)
        out["c"] = _sum_check(c, ctx.rank, 2)
        c.shutdown()
    # One member closes its group a second after the others (within the wait for its release).
    d = _group(ctx, "d/", ctx.rank, N)
    out["d"] = _sum_check(d, ctx.rank, N)
    if ctx.rank == 0:
        time.sleep(1.0)
    d.shutdown()
    e = _group(ctx, "e/", ctx.rank, N)
    out["e"] = _sum_check(e, ctx.rank, N)
    e.shutdown()
    out["kept"] = _C.tcp_kept_connections()
    return out


def test_groups_build_after_an_abort_an_absent_member_and_a_late_close():
    for r, out in enumerate(mp.run(_after_trouble, N, timeout=180)):
        assert all(out[k] for k in "abde") and out.get("c", True), (r, out)
        assert out["kept"] <= 4 * (N - 1) * CONNECTIONS, (r, out)


def _peer_gone(ctx):
    from ringzip import _C

    a = _group(ctx, "a/", ctx.rank, N)
    ok = _sum_check(a, ctx.rank, N)
    a.shutdown()
    if ctx.rank == 2:
        return {"a": ok}  # its process ends: its kept connections close with it
    mp.progress("next group without rank 2")
    time.sleep(1.0)
    b = _group(ctx, "b/", ctx.rank, 2)
    out = {"a": ok, "b": _sum_check(b, ctx.rank, 2)}
    b.shutdown()
    time.sleep(0.5)
    c = _group(ctx, "c/", ctx.rank, 2)  # what rank 2 left is found closed and forgotten
    out["c"] = _sum_check(c, ctx.rank, 2)
    c.shutdown()
    out["kept"] = _C.tcp_kept_connections()
    return out


def test_a_peer_that_left_costs_the_next_group_nothing():
    res = mp.run(_peer_gone, N, timeout=120)
    for r in (0, 1):
        assert res[r]["a"] and res[r]["b"] and res[r]["c"], (r, res[r])
        assert res[r]["kept"] == CONNECTIONS, (r, res[r])
