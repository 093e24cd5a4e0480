"""ringzip's TCP transport (transport/tcp/) as user point-to-point sees it: sends are eager (a
message may arrive before its receive, tags taken in any order), receives from any source name
their sender, a message that arrived whole before its sender left is still delivered, and a
receive of another size fails naming both sizes."""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from tests import mp


def _p2p(ctx):
    import ringzip

    dist.init_process_group("ringzip", init_method=ctx.init_method, rank=ctx.rank, world_size=ctx.world_size,
                            pg_options=ringzip.Options(transport="tcp"))
    assert ringzip.stats()["topology"]["transport"] == "tcp"
    out = {}
    if ctx.rank == 1:  # tags 1 then 2; rank 0 takes 2 first (over Gloo this would wait forever)
        dist.send(torch.full((1000,), 1.0), 0, tag=1)
        dist.send(torch.full((3,), 2.0), 0, tag=2)
    elif ctx.rank == 0:
        b, a = torch.empty(3), torch.empty(1000)
        dist.recv(b, 1, tag=2)
        dist.recv(a, 1, tag=1)
        out["tags"] = bool(torch.all(a == 1.0) and torch.all(b == 2.0))
    dist.barrier()
    if ctx.rank == 0:  # from any source: every sender once, named
        got = {}
        for _ in range(ctx.world_size - 1):
            t = torch.empty(4)
            src = dist.recv(t)
            got[src] = t[0].item()
        out["any"] = got
    else:
        dist.send(torch.full((4,), float(ctx.rank)), 0)
    dist.barrier()
    if ctx.rank == 2:  # sends and leaves: the message is rank 0's all the same
        dist.send(torch.full((5,), 7.0), 0, tag=3)
        dist.destroy_process_group()
        return out
    if ctx.rank == 0:
        time.sleep(1.0)  # rank 2 is gone by now
        t = torch.empty(5)
        dist.recv(t, 2, tag=3)
        out["after_leave"] = t.tolist()
        try:
            dist.recv(torch.empty(11), 1, tag=4)  # rank 1 sends 10 floats
        except Exception as e:  # noqa: BLE001
            out["size_error"] = str(e).split("\nException raised from")[0]
    elif ctx.rank == 1:
        dist.send(torch.ones(10), 0, tag=4)
        time.sleep(2.0)  # until rank 0 read it
    return out


def test_point_to_point_over_tcp():
    res = mp.run(_p2p, 3, timeout=120)
    r0 = res[0]
    assert r0["tags"], r0
    assert r0["any"] == {1: 1.0, 2: 2.0}, r0
    assert r0["after_leave"] == [7.0] * 5, r0
    assert "rank 1 sends 40 bytes" in r0["size_error"] and "takes 44 bytes" in r0["size_error"], r0


def _paced(ctx):
    import ringzip

    # 0.08 Gbit/s: each rank's one peer gets 0.95 x 10 MB/s (Options.link_gbit)
    dist.init_process_group("ringzip", init_method=ctx.init_method, rank=ctx.rank, world_size=ctx.world_size,
                            pg_options=ringzip.Options(transport="tcp", algorithm="direct", link_gbit=0.08))
    x = torch.full((1 << 20,), float(ctx.rank + 1))  # 4 MiB to the peer: >= 0.44 s paced
    times = []
    for rate in (0.08, 0.0):  # then lifted at run time
        ringzip.set_options(link_gbit=rate)
        dist.barrier()
        y = x.clone()
        t0 = time.perf_counter()
        dist.all_reduce(y)
        times.append(time.perf_counter() - t0)
        assert torch.equal(y, torch.full_like(x, 3.0))
    dist.destroy_process_group()
    return times


def test_link_gbit_paces_the_connections():
    paced_floor = 4 * 2**20 / (0.95 * 0.08e9 / 8)
    for paced, lifted in mp.run(_paced, 2, timeout=120):
        assert paced >= 0.8 * paced_floor, (paced, paced_floor)  # the kernel held the sends to the rate
        assert lifted < paced_floor / 2, (lifted, paced_floor)  # and set_options(link_gbit=0) lifted it
