"""DDP over ringzip trains exactly like DDP over gloo (2 ranks, one launch).

Each rank builds the same MLP twice (rank-dependent init, so DDP's initial broadcast matters),
wraps one copy in DDP over the ringzip default group and the other over a gloo group, and runs
the same 20 SGD steps on the same per-rank synthetic batches. Parameters must agree within
rtol 1e-6 after every variant: plain, small buckets (many all-reduces per step), a registered
allreduce_hook comm hook, and no_sync gradient accumulation.
"""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from tests import mp
from tests.backend._common import init_world

BACKEND = "ringzip"
WS = 2
STEPS = 20


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 4))


def _batch(rank, step, micro=0):
    g = torch.Generator().manual_seed(1000 * rank + 10 * step + micro)
    x = torch.randn(8, 16, generator=g)
    return x, x[:, :4].sin() * 2 + 0.1 * torch.randn(8, 4, generator=g)


def _train(ddp, rank, accumulate=1):
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        for micro in range(accumulate):
            x, y = _batch(rank, step, micro)
            if micro < accumulate - 1:
                with ddp.no_sync():
                    torch.nn.functional.mse_loss(ddp(x), y).backward()
            else:
                loss = torch.nn.functional.mse_loss(ddp(x), y)
                loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _params(ddp):
    return [p.detach().clone() for p in ddp.module.parameters()]


def ddp_compare(ctx, backend):
    torch.set_num_threads(1)
    rank = ctx.rank
    ref = init_world(ctx, backend)
    rz = dist.group.WORLD
    chk = mp.Checker(rank)
    variants = {
        "plain": dict(),
        "small_buckets": dict(bucket_cap_mb=0.001),
        "comm_hook_allreduce": dict(hook=True),
        "no_sync_accumulation": dict(accumulate=3),
        "grad_as_bucket_view": dict(gradient_as_bucket_view=True),
    }
    for name, v in variants.items():
        with chk.case(f"ddp/{name}"):
            kw = {k: v[k] for k in ("bucket_cap_mb", "gradient_as_bucket_view") if k in v}
            a = DDP(_model(7 + rank), process_group=rz, **kw)
            b = DDP(_model(7 + rank), process_group=ref, **kw)
            if v.get("hook"):
                from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

                a.register_comm_hook(rz, default_hooks.allreduce_hook)
            # DDP's constructor broadcast must have synchronized rank 0's parameters
            for p, q in zip(_params(a), [p.detach() for p in _model(7).parameters()]):
                torch.testing.assert_close(p, q, rtol=0, atol=0, msg="initial broadcast of parameters")
            la = _train(a, rank, v.get("accumulate", 1))
            lb = _train(b, rank, v.get("accumulate", 1))
            assert all(map(torch.isfinite, map(torch.tensor, la))), f"non-finite loss {la}"
            for i, (p, q) in enumerate(zip(_params(a), _params(b))):
                torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7, msg=lambda m: f"param {i} ringzip vs gloo: {m}")
            assert la[-1] < la[0], f"loss did not decrease: {la[0]:.4f} -> {la[-1]:.4f}"
            # replicas identical across ranks
            ps = torch.cat([p.reshape(-1) for p in _params(a)])
            gathered = [torch.empty_like(ps) for _ in range(ctx.world_size)]
            dist.all_gather(gathered, ps, group=ref)
            for r, t in enumerate(gathered):
                assert torch.equal(t, gathered[0]), f"rank {r} parameters differ from rank 0 after training"
    dist.destroy_process_group()
    return chk.result()


VARIANTS = ["plain", "small_buckets", "comm_hook_allreduce", "no_sync_accumulation", "grad_as_bucket_view"]
_LAUNCH: list = []


@pytest.mark.parametrize("variant", VARIANTS)
def test_ddp_matches_gloo(variant):
    if not _LAUNCH:
        _LAUNCH.append(mp.run_checks(ddp_compare, WS, args=(BACKEND,), timeout=180, stall=60))
    mp.assert_checks(_LAUNCH[0], lambda c: c == f"ddp/{variant}", f"DDP {variant}")
