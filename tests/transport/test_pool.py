"""The TCP transports' pool of connections to each peer (transport/tcp/, transport/gloo/): a
collective's large message travels striped over it and lands whole, in place -- the same bits as
over one connection,
for every cut (sizes that do not divide); its size is rank 0's; and groups made and destroyed
again and again leave no threads or sockets behind."""
from __future__ import annotations

import os
import warnings

import pytest
import torch
import torch.distributed as dist

from tests import mp

# float32 elements: under the striping threshold, at it, and sizes whose bytes split unevenly
SIZES = [1 << 16, 1 << 18, (1 << 20) + 7, (3 << 20) + 5]
WAYS = [("none", "ring"), ("none", "direct"), ("none", "star"), ("q8", "sra"), ("q4", "ring"), ("topk:0.01", "sparse")]


TRANSPORTS = ["tcp", "gloo"]


def _striped(ctx, transport):
    import ringzip

    dist.init_process_group("ringzip", init_method=ctx.init_method, rank=ctx.rank, world_size=ctx.world_size)
    out, carried_by = {}, set()
    for connections in (1, 8):
        g = dist.new_group(backend="ringzip", pg_options=ringzip.Options(transport=transport, connections=connections,
                                                                         min_numel=0, seed=3))
        carried_by.add(ringzip.backend_of(g).transport)
        for codec, algorithm in WAYS:
            ringzip.set_options(g, codec=codec, algorithm=algorithm)
            for n in SIZES:
                gen = torch.Generator().manual_seed(1000 * ctx.rank + n)
                x = torch.randint(-3, 4, (n,), generator=gen).float() if codec == "none" else torch.randn(n, generator=gen)
                dist.all_reduce(x, group=g)
                out[(connections, codec, algorithm, n)] = x
        dist.destroy_process_group(g)
    dist.destroy_process_group()
    expected = {n: sum(torch.randint(-3, 4, (n,), generator=torch.Generator().manual_seed(1000 * r + n)).float()
                       for r in range(ctx.world_size)) for n in SIZES}
    exact_ok = all(torch.equal(out[(c, "none", a, n)], expected[n]) for c in (1, 8) for _, a in WAYS[:3] for n in SIZES)
    same_bits = all(torch.equal(out[(1, codec, a, n)], out[(8, codec, a, n)]) for codec, a in WAYS for n in SIZES)
    return exact_ok, same_bits, sorted(carried_by)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_striped_messages_land_whole(transport):
    for exact_ok, same_bits, carried_by in mp.run(_striped, 3, args=(transport,), timeout=240):
        assert exact_ok, "exact sums wrong"
        assert same_bits, "the pool changed a result's bits"
        assert carried_by == [transport], f"the backend says its messages travel over {carried_by}"


def _rank0_count(ctx, transport):
    import ringzip

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist.init_process_group("ringzip", init_method=ctx.init_method, rank=ctx.rank, world_size=ctx.world_size,
                                pg_options=ringzip.Options(transport=transport, algorithm="ring",
                                                           connections=3 + ctx.rank))  # each rank another count
    x = torch.ones(1 << 20)
    dist.all_reduce(x)  # striped by rank 0's count on both ranks, or this would fail
    ok = torch.equal(x, torch.full_like(x, ctx.world_size))
    dist.destroy_process_group()
    return ok, [str(w.message) for w in caught if "connections" in str(w.message)]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_group_uses_rank_0s_connections(transport):
    (ok0, warned0), (ok1, warned1) = mp.run(_rank0_count, 2, args=(transport,), timeout=120)
    assert ok0 and ok1
    assert warned0 == [] and len(warned1) == 1 and "the group uses 3" in warned1[0], warned1


def _threads_and_fds():
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))


def _many_groups(ctx, count, transport):
    import ringzip

    dist.init_process_group("gloo", init_method=ctx.init_method, rank=ctx.rank, world_size=ctx.world_size)
    seen = []
    for i in range(count):
        g = dist.new_group(backend="ringzip", pg_options=ringzip.Options(transport=transport, algorithm="ring",
                                                                         connections=8))
        x = torch.ones(1 << 20)
        dist.all_reduce(x, group=g)  # 4 MiB: striped, so every connection of the pool opens
        assert x[0].item() == ctx.world_size
        dist.destroy_process_group(g)
        if i in (count // 5, count - 1):
            seen.append(_threads_and_fds())
    dist.destroy_process_group()
    return seen


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_groups_made_and_destroyed_leave_nothing_behind(transport):
    count = int(os.environ.get("RINGZIP_TEST_GROUPS", "60"))
    for (t0, f0), (t1, f1) in mp.run(_many_groups, 2, args=(count, transport), timeout=300):
        assert t1 <= t0 + 2 and f1 <= f0 + 2, ((t0, f0), (t1, f1))
