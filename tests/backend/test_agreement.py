"""The cost model's agreement (csrc/plan/tuner.cc, Tuner::agree): up to 16 ranks every rank sends
its figures to every other and combines them in rank order, above that rank 0 gathers, combines
and answers; either way every rank ends with the same bits, and the choices made from them match
(a rank that chose otherwise would post other messages: the call would fail or hang)."""
from __future__ import annotations

import torch
import torch.distributed as dist

from tests import mp


def _agree(ctx):
    import ringzip

    dist.init_process_group("ringzip", init_method=ctx.init_method, rank=ctx.rank, world_size=ctx.world_size)
    n = ctx.world_size
    for numel in (1 << 18, 1 << 12, 1 << 18):  # the first call agrees; more sizes, more choices
        x = torch.full((numel,), float(ctx.rank))
        dist.all_reduce(x)
        assert torch.all(x == n * (n - 1) / 2), x[:4]
    auto = ringzip.stats()["auto"]
    out = {"params": auto["params"], "refreshes": auto["refreshes"], "ways": auto["way_choices"]}
    dist.destroy_process_group()
    return out


def test_more_than_sixteen_ranks_agree_through_rank_0():
    res = mp.run(_agree, 17, timeout=300)
    assert all(r == res[0] for r in res), res
    assert res[0]["refreshes"] >= 1 and res[0]["params"]["link_gbit"] > 0, res[0]
