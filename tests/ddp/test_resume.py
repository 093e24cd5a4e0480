"""Resuming DDP training from a checkpoint with error feedback is bit-exact.

For every case (codec x gradient_as_bucket_view, plus one find_unused_parameters run), on 2
ranks, DDP over a fresh ringzip group:

* launch 1: an uninterrupted run of N + M steps (its parameters are the reference), and a run
  of N steps that saves model + optimizer + ``ringzip.error_feedback_state`` with
  torch.distributed.checkpoint (DCP, over the same ringzip group);
* launch 2 (new processes, as after a restart): a fresh model and optimizer, DCP load,
  ``ringzip.load_error_feedback_state`` before the first step, M more steps.

The resumed parameters must equal the uninterrupted ones bit for bit (``torch.equal``) on every
rank. The model is an MLP with biases and a small ``bucket_cap_mb``, so DDP's rebuilt layout has
four buckets of several tensors, three of them of equal size (residuals must follow their
bucket, not just their size); a restarted DDP reduces its first step in one bucket of all
parameters instead, in another order. topk:0.01 and q1 carry error feedback; q4 (unbiased, no
error feedback) checks that the stochastic-rounding stream resumes where it stopped.
"""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from tests import mp

WS = 2
N_STEPS, M_STEPS = 3, 4
D = 64
BUCKET_CAP_MB = 16000 / 2**20  # ~4000 floats: each 64x64 Linear (4160 elements) fills a bucket
CASES = [  # (name, codec, gradient_as_bucket_view, find_unused_parameters)
    ("topk/gabv0", "topk:0.01", False, False),
    ("topk/gabv1", "topk:0.01", True, False),
    ("q1/gabv0", "q1", False, False),
    ("q1/gabv1", "q1", True, False),
    ("q4/gabv0", "q4", False, False),
    ("q4/gabv1", "q4", True, False),
    ("q1/find_unused", "q1", False, True),  # DDP never rebuilds its buckets
]


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(48, D), torch.nn.ReLU(), torch.nn.Linear(D, D), torch.nn.ReLU(),
                               torch.nn.Linear(D, D), torch.nn.ReLU(), torch.nn.Linear(D, D))


def _batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 48, generator=g)
    return x, torch.randn(16, D, generator=g)


def _setup(case):
    import ringzip
    from torch.nn.parallel import DistributedDataParallel as DDP

    _, codec, gabv, unused = case
    pg = dist.new_group(backend="ringzip", pg_options=ringzip.Options(codec=codec, min_numel=1024))
    model = DDP(_model(), process_group=pg, bucket_cap_mb=BUCKET_CAP_MB, gradient_as_bucket_view=gabv,
                find_unused_parameters=unused)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return pg, model, opt


def _train(model, opt, rank, steps):
    for step in steps:
        x, y = _batch(rank, step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.module.parameters()])


def _state_dict(model, opt, pg, ef):
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(model, opt)
    # Residuals differ by rank: each rank stores its own under its own key (DCP keeps one copy
    # of a key that several ranks save).
    return {"model": msd, "optim": osd, f"ringzip_rank{dist.get_rank(pg)}": ef}


def first_launch(ctx, ckpt_dir):
    torch.set_num_threads(1)
    import ringzip
    import torch.distributed.checkpoint as dcp

    dist.init_process_group("ringzip", rank=ctx.rank, world_size=ctx.world_size, init_method=ctx.init_method)
    out = {}
    for case in CASES:
        mp.progress(f"{case[0]}: uninterrupted")
        pg, model, opt = _setup(case)
        _train(model, opt, ctx.rank, range(N_STEPS + M_STEPS))
        out[case[0]] = _flat(model)
        mp.progress(f"{case[0]}: first part + save")
        pg, model, opt = _setup(case)
        _train(model, opt, ctx.rank, range(N_STEPS))
        sd = _state_dict(model, opt, pg, ringzip.error_feedback_state(pg, model=model))
        dcp.save(sd, checkpoint_id=os.path.join(ckpt_dir, case[0].replace("/", "_")), process_group=pg)
    dist.destroy_process_group()
    return out


def second_launch(ctx, ckpt_dir):
    torch.set_num_threads(1)
    import pytest
    import ringzip
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    dist.init_process_group("ringzip", rank=ctx.rank, world_size=ctx.world_size, init_method=ctx.init_method)
    out = {}
    for case in CASES:
        mp.progress(f"{case[0]}: resume")
        pg, model, opt = _setup(case)
        # DCP loads in place into a state dict of the same shape: this process's own (empty)
        # error-feedback state stands in for the saved one.
        sd = _state_dict(model, opt, pg, ringzip.error_feedback_state(pg, model=model))
        dcp.load(sd, checkpoint_id=os.path.join(ckpt_dir, case[0].replace("/", "_")), process_group=pg)
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        ef = sd[f"ringzip_rank{ctx.rank}"]
        if case[0] == CASES[0][0]:  # refused states (checked once, before the real load)
            with pytest.raises(ValueError, match="version 1"):
                ringzip.load_error_feedback_state(pg, {"version": 1, "residuals": []})
            with pytest.raises(ValueError, match="rank"):
                ringzip.load_error_feedback_state(pg, dict(ef, rank=1 - ctx.rank), model=model)
        ringzip.load_error_feedback_state(pg, ef, model=model)
        if case[0] == CASES[0][0]:  # a checkpoint right after the load saves what was loaded
            again = ringzip.error_feedback_state(pg, model=model)
            assert again["ddp"]["layout"] == "rebuilt" and again["ddp"] == ef["ddp"], (again["ddp"], ef["ddp"])
            assert (again["calls"], again["awaiting"]) == (ef["calls"], ef["awaiting"])
            assert [s for s, _ in again["residuals"]] == [s for s, _ in ef["residuals"]]
            assert all(torch.equal(a, b) for (_, a), (_, b) in zip(again["residuals"], ef["residuals"]))
        _train(model, opt, ctx.rank, range(N_STEPS, N_STEPS + M_STEPS))
        out[case[0]] = _flat(model)
    dist.destroy_process_group()
    return out


def test_resume_is_bit_exact(tmp_path):
    t0 = time.monotonic()
    ref = mp.run(first_launch, WS, args=(str(tmp_path),), timeout=90)
    got = mp.run(second_launch, WS, args=(str(tmp_path),), timeout=90)
    wall = time.monotonic() - t0
    problems = []
    for name, *_ in CASES:
        for rank in range(WS):
            a, b = ref[rank][name], got[rank][name]
            if not torch.equal(a, b):
                problems.append(f"{name} rank {rank}: resumed parameters differ from the uninterrupted run "
                                f"(max |diff| {(a - b).abs().max().item():.3g}, {int((a != b).sum())} of {a.numel()})")
    print(f"resume test: {len(CASES)} cases, 2 launches of {WS} ranks, wall {wall:.1f} s")
    assert not problems, "\n".join(problems)
