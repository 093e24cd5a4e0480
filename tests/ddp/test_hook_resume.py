"""Resuming DDP training whose buckets travel through ringzip.hooks.compress is bit-exact, with
error feedback, over a gloo default group and over a ringzip one (3 ranks).

Per default backend, two launches of new processes:

* launch 1: each case trains N steps with the hook (codec q4, error feedback on), saves model +
  optimizer + the hook's state with torch.distributed.checkpoint, and trains M more steps: its
  parameters are those of an uninterrupted N + M run;
* launch 2 (as after a restart): a fresh model, optimizer and hook state, DCP load, the hook's
  state loaded before the first step, M steps.

The resumed parameters must equal the uninterrupted ones bit for bit on every rank. The cases
save and load the two ways the hook's state can go: ``state.state_dict()`` /
``state.load_state_dict()`` (loaded before the hook is registered) and
``ringzip.error_feedback_state(model=)`` / ``ringzip.load_error_feedback_state(model=)``
(after). A replay through a comm hook of its own, as a group's resume does, would fail here:
DDP takes one comm hook. Over gloo the hook makes a ringzip group per state; over ringzip the
first case's buckets travel on the default group itself and the second's on a ringzip group of
the same ranks. The model is test_resume's: four multi-tensor buckets after DDP's rebuild, three
of one size, while a restarted DDP reduces its first step in one bucket of all parameters.
"""
from __future__ import annotations

import os
import time
import warnings

import pytest
import torch
import torch.distributed as dist

from tests import mp
from tests.ddp.test_resume import BUCKET_CAP_MB, _batch, _flat, _model, _train

WS = 3
N_STEPS, M_STEPS = 3, 4
CASES = ["state_dict", "functions"]
LAUNCH_TIMEOUT = 120


def _options():
    import ringzip

    # q4 rounds stochastically, so error feedback is off unless asked for
    return ringzip.Options(error_feedback=True, min_numel=1024)


def _setup(default_backend, case):
    import ringzip
    from torch.nn.parallel import DistributedDataParallel as DDP

    if default_backend == "gloo":
        state = ringzip.hooks.State(codec="q4", options=_options())
        pg = None
    elif case == "state_dict":
        state = ringzip.hooks.State(codec="q4")  # the default group is ringzip: no group of its own
        pg = None
    else:
        pg = dist.new_group(backend="ringzip", pg_options=_options())
        state = ringzip.hooks.State(codec="q4", process_group=pg)
    model = DDP(_model(), process_group=pg, bucket_cap_mb=BUCKET_CAP_MB)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, opt, state


def _checkpoint(model, opt, ef):
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(model, opt)
    # residuals differ by rank: each under its own key (DCP keeps one copy of a key)
    return {"model": msd, "optim": osd, f"ringzip_rank{dist.get_rank()}": ef}


def _path(ckpt_dir, backend, case):
    return os.path.join(ckpt_dir, f"{backend}_{case}")


def _init(ctx, default_backend):
    torch.set_num_threads(1)
    dist.init_process_group(default_backend, rank=ctx.rank, world_size=ctx.world_size, init_method=ctx.init_method,
                            pg_options=_options() if default_backend == "ringzip" else None)


def first_launch(ctx, default_backend, ckpt_dir):
    import ringzip
    import torch.distributed.checkpoint as dcp

    _init(ctx, default_backend)
    out = {}
    for case in CASES:
        mp.progress(f"{default_backend}/{case}: first part + save")
        model, opt, state = _setup(default_backend, case)
        model.register_comm_hook(state, ringzip.hooks.compress)
        _train(model, opt, ctx.rank, range(N_STEPS))
        ef = state.state_dict() if case == "state_dict" else ringzip.error_feedback_state(model=model)
        assert ef["ddp"]["layout"] == "rebuilt" and len(ef["ddp"]["buckets"]) == 4, ef["ddp"]
        assert ef["awaiting"] and ef["calls"] >= N_STEPS, (ef["awaiting"], ef["calls"])
        assert ringzip.stats(state.group)["residual_bytes"] > 0, "error feedback was off"
        assert (state.group is dist.group.WORLD) == (default_backend == "ringzip" and case == "state_dict")
        dcp.save(_checkpoint(model, opt, ef), checkpoint_id=_path(ckpt_dir, default_backend, case))
        mp.progress(f"{default_backend}/{case}: on, uninterrupted")
        _train(model, opt, ctx.rank, range(N_STEPS, N_STEPS + M_STEPS))
        out[case] = _flat(model)
    dist.destroy_process_group()
    return out


def second_launch(ctx, default_backend, ckpt_dir):
    import ringzip
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    _init(ctx, default_backend)
    out = {}
    for case in CASES:
        mp.progress(f"{default_backend}/{case}: resume")
        model, opt, state = _setup(default_backend, case)
        if case == "functions":
            model.register_comm_hook(state, ringzip.hooks.compress)
        sd = _checkpoint(model, opt, state.state_dict())  # DCP loads in place into a dict of this shape
        dcp.load(sd, checkpoint_id=_path(ckpt_dir, default_backend, case))
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        ef = sd[f"ringzip_rank{ctx.rank}"]
        if case == "state_dict":
            with pytest.raises(ValueError, match="rank"):
                state.load_state_dict(dict(ef, rank=(ctx.rank + 1) % ctx.world_size))
            state.load_state_dict(ef)
            model.register_comm_hook(state, ringzip.hooks.compress)
        else:
            ringzip.load_error_feedback_state(state=ef, model=model)
        again = ringzip.error_feedback_state(model=model)  # a checkpoint right after the load saves what was loaded
        assert (again["calls"], again["awaiting"], again["ddp"]) == (ef["calls"], ef["awaiting"], ef["ddp"]), again
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the layout check of the step after the replay warns on a mismatch
            _train(model, opt, ctx.rank, range(N_STEPS, N_STEPS + M_STEPS))
        assert ringzip.stats(state.group)["q4"]["calls"] == 4 * M_STEPS
        out[case] = _flat(model)
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("default_backend", ["gloo", "ringzip"])
def test_hook_resume_is_bit_exact(default_backend, tmp_path):
    t0 = time.monotonic()
    ref = mp.run(first_launch, WS, args=(default_backend, str(tmp_path)), timeout=LAUNCH_TIMEOUT, stall=60)
    got = mp.run(second_launch, WS, args=(default_backend, str(tmp_path)), timeout=LAUNCH_TIMEOUT, stall=60)
    problems = []
    for case in CASES:
        for rank in range(WS):
            a, b = ref[rank][case], got[rank][case]
            if not torch.equal(a, b):
                problems.append(f"{case} rank {rank}: resumed parameters differ from the uninterrupted run "
                                f"(max |diff| {(a - b).abs().max().item():.3g}, {int((a != b).sum())} of {a.numel()})")
    print(f"hook resume over {default_backend}: {len(CASES)} cases, 2 launches of {WS} ranks, "
          f"wall {time.monotonic() - t0:.1f} s")
    assert not problems, "\n".join(problems)


def test_state_options_are_for_the_group_the_hook_makes():
    import ringzip

    with pytest.raises(ValueError, match="group"):
        ringzip.hooks.State(options=ringzip.Options(error_feedback=True), group=object())
