"""A group of one rank has nothing to exchange: every reduction is the identity, exactly, whatever
the codec -- no codec error, no residual parked for a later call, no probe of the cost model."""
from __future__ import annotations

import torch
import torch.distributed as dist

from tests import mp

CODECS = ["q8", "q4", "q1", "fp16", "topk:0.01", "randomk:0.1", "auto"]


def _one_rank(ctx):
    import ringzip

    dist.init_process_group("ringzip", init_method=ctx.init_method, rank=0, world_size=1)
    out = {}
    g = torch.Generator().manual_seed(3)
    for codec in CODECS:
        ringzip.set_options(codec=codec)
        x = torch.randn(1 << 18, generator=g)
        results = []
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            y = x.clone()
            dist.all_reduce(y, op=op)
            results.append(torch.equal(y, x))
        y = x.clone()
        work = dist.all_reduce(y, async_op=True)  # the DDP hook's way
        work.wait()
        results.append(torch.equal(y, x))
        out[codec] = results
    stats = ringzip.stats()
    state = ringzip.error_feedback_state()
    dist.destroy_process_group()
    compressed_calls = sum(v.get("calls", 0) for k, v in stats.items() if k not in ("none", "auto", "topology")
                           and isinstance(v, dict))
    return out, compressed_calls, len(state["residuals"]), stats.get("auto", {}).get("calls", 0)


def test_world_size_one_is_exact_and_free():
    (out, compressed_calls, residuals, tuned), = mp.run(_one_rank, 1, timeout=120)
    assert all(all(v) for v in out.values()), out  # bit for bit the input, every codec
    assert compressed_calls == 0 and residuals == 0 and tuned == 0
