"""Compress what you mean to: ringzip.hooks.compress compresses DDP's gradient buckets while the
group stays exact, ringzip.exact() / ringzip.compress() set the codec per call (3 ranks, one
launch per default backend).

The hook must give DDP's own bits on a group whose codec is the hook's (the same buckets, scaled
by 1/n as DDP's reducer does, the same call numbers and residuals), over a ringzip default group
and over a gloo one (through the ringzip group the hook makes); every other call on the group
stays exact. Over gloo, so must DDP's features with the hook (VARIANTS: accumulation with and
without no_sync, static_graph, find_unused_parameters, gradient_as_bucket_view, small buckets,
torch.compile with DDPOptimizer and with compiled autograd's python reducer), each against the
same DDP on a q4 group, and one rank's Inf must reach every rank through the compressed bucket.
"""
from __future__ import annotations

import contextlib

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from tests import mp

WS = 3
STEPS = 6


def _model(seed):
    # ~99 K parameters: one bucket at or above the default min_numel (65 536), so it is compressed
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.Tanh(), torch.nn.Linear(512, 128), torch.nn.Tanh(),
                               torch.nn.Linear(128, 4))


def _train(ddp, rank, accumulate=1, no_sync=True, backward=None):
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    for step in range(STEPS):
        opt.zero_grad()
        for micro in range(accumulate):  # with no_sync: for all but the last micro-batch
            g = torch.Generator().manual_seed(1000 * rank + 10 * step + micro)
            x = torch.randn(16, 64, generator=g)
            with ddp.no_sync() if no_sync and micro < accumulate - 1 else contextlib.nullcontext():
                loss = torch.nn.functional.mse_loss(ddp(x), x[:, :4].sin())
                (backward or torch.Tensor.backward)(loss)
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in ddp.module.parameters()])


def _compiled_autograd_backward(loss):
    from torch._dynamo import compiled_autograd

    with compiled_autograd._enable(torch.compile(backend="aot_eager")):  # noqa: SLF001
        loss.backward()


def _train_variant(make_ddp, rank, v):
    """Builds the DDP (inside the compile settings: DDP picks its reducer when it is built) and
    trains it as variant `v` says."""
    compiled = v.get("compile")
    if compiled is None:
        return _train(make_ddp(), rank, v.get("accumulate", 1), v.get("no_sync", True))
    import torch._dynamo

    torch._dynamo.reset()
    with torch._dynamo.config.patch(optimize_ddp=compiled):
        ddp = make_ddp()
        backward = _compiled_autograd_backward if compiled == "python_reducer" else None
        return _train(torch.compile(ddp, backend="aot_eager"), rank, backward=backward)


def _integers(rank, n=1 << 18):
    # integer-valued floats: their exact sum has one value in any order, a codec's does not
    return torch.randint(-50, 50, (n,), generator=torch.Generator().manual_seed(rank)).float()


def checks(ctx, default_backend):
    import ringzip

    torch.set_num_threads(1)
    rank = ctx.rank
    chk = mp.Checker(rank)
    dist.init_process_group(default_backend, rank=rank, world_size=ctx.world_size, init_method=ctx.init_method)
    # DDP on a group whose codec is q4: what the hook must reproduce bit for bit
    q4 = dist.new_group(backend="ringzip", pg_options=ringzip.Options(codec="q4"))
    on_q4 = DDP(_model(3 + rank), process_group=q4)
    want = _train(on_q4, rank)

    with chk.case(f"{default_backend}/hook_equals_group_codec"):
        state = ringzip.hooks.State(codec="q4")
        ddp = DDP(_model(3 + rank))
        ddp.register_comm_hook(state, ringzip.hooks.compress)
        got = _train(ddp, rank)
        assert torch.equal(got, want), f"hook vs q4 group: max diff {(got - want).abs().max().item()}"
        st = ringzip.stats(state.group)
        assert st["q4"]["calls"] == STEPS and st["q4"]["ratio"] > 4, st["q4"]
        if default_backend == "ringzip":
            assert state.group is dist.group.WORLD  # no second group where DDP's already is ringzip
        else:
            assert state.group is not dist.group.WORLD

    with chk.case(f"{default_backend}/other_calls_stay_exact"):
        g = state.group  # codec none: the hook's calls were the only compressed ones
        x = _integers(rank)
        dist.all_reduce(x, group=g)
        assert torch.equal(x, sum(_integers(r) for r in range(ctx.world_size))), "a user's all-reduce was not exact"
        assert ringzip.stats(g)["q4"]["calls"] == STEPS

    # DDP's features with the hook, on the user's gloo group: each bit for bit DDP on a q4 group
    for name, v in VARIANTS.items() if default_backend == "gloo" else ():
        with chk.case(f"gloo/variant/{name}"):
            mp.progress(f"gloo/variant/{name}")
            opts = {"min_numel": v.get("min_numel", ringzip.Options().min_numel)}
            ref = dist.new_group(backend="ringzip", pg_options=ringzip.Options(codec="q4", **opts))
            want_v = _train_variant(lambda: DDP(_model(5 + rank), process_group=ref, **v.get("ddp", {})), rank, v)
            state = ringzip.hooks.State(codec="q4", options=ringzip.Options(**opts))

            def hooked():
                ddp = DDP(_model(5 + rank), **v.get("ddp", {}))
                ddp.register_comm_hook(state, ringzip.hooks.compress)
                return ddp

            got = _train_variant(hooked, rank, v)
            assert torch.equal(got, want_v), f"{name}: max diff {(got - want_v).abs().max().item()}"
            calls = (ringzip.stats(state.group)["q4"]["calls"], ringzip.stats(ref).get("q4", {}).get("calls"))
            assert calls[0] >= STEPS and calls[0] == calls[1], f"{name}: q4 calls (hook, q4 group): {calls}"

    if default_backend == "gloo":
        with chk.case("gloo/nonfinite_reaches_every_rank"):
            # AMP's GradScaler skips a step when any rank's gradients overflowed: through the
            # hook's compressed bucket, one rank's Inf must reach every rank's gradients
            ddp = DDP(_model(7 + rank))
            ddp.register_comm_hook(ringzip.hooks.State(codec="q4"), ringzip.hooks.compress)
            x = torch.randn(16, 64, generator=torch.Generator().manual_seed(rank))
            loss = torch.nn.functional.mse_loss(ddp(x), x[:, :4].sin())
            (loss * (float("inf") if rank == 1 else 1.0)).backward()
            grads = torch.cat([p.grad.reshape(-1) for p in ddp.parameters()])
            assert not torch.isfinite(grads).all(), "rank 1's Inf did not reach this rank through the hook"

    if default_backend == "ringzip":
        with chk.case("per_call/exact_on_a_codec_group"):
            x = _integers(rank)
            with ringzip.exact():
                dist.all_reduce(x, group=q4)
            assert torch.equal(x, sum(_integers(r) for r in range(ctx.world_size)))

        with chk.case("per_call/compress_on_an_exact_group"):
            q8 = dist.new_group(backend="ringzip", pg_options=ringzip.Options(codec="q8"))
            plain = dist.new_group(backend="ringzip")
            a, b = torch.randn(1 << 18, generator=torch.Generator().manual_seed(rank)), None
            b = a.clone()
            dist.all_reduce(a, group=q8)
            with ringzip.compress("q8"):
                w = dist.all_reduce(b, group=plain, async_op=True)  # captured at issue ...
            w.wait()  # ... so it keeps the codec after the block
            assert torch.equal(a, b), "compress('q8') on an exact group differs from a q8 group"
            assert ringzip.stats(plain)["q8"]["calls"] == 1
            with ringzip.compress("q8"), ringzip.exact():  # the innermost wins
                x = _integers(rank)
                dist.all_reduce(x, group=plain)
            assert torch.equal(x, sum(_integers(r) for r in range(ctx.world_size)))
            assert ringzip.stats(plain)["q8"]["calls"] == 1

        with chk.case("resume/without_model_warns"):
            # DDP's buckets hold residuals on q4: saving or loading them without model= cannot resume
            # exactly (the first step of a new process reduces other buckets), and says so
            with pytest.warns(UserWarning, match="model="):
                state = ringzip.error_feedback_state(group=q4)
            with pytest.warns(UserWarning, match="model="):
                ringzip.load_error_feedback_state(group=q4, state=state)
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("error")
                ringzip.error_feedback_state(model=on_q4)  # the right call: no warning

        with chk.case("per_call/bad_codec"):
            with pytest.raises(ValueError, match="zz"):
                with ringzip.compress("zz"):
                    pass
            x = _integers(rank)  # nothing was left pushed: this call runs the group's codec (none)
            dist.all_reduce(x, group=dist.group.WORLD)
            assert torch.equal(x, sum(_integers(r) for r in range(ctx.world_size)))
    dist.destroy_process_group()
    return chk.result()


VARIANTS = {
    "no_sync_accumulation": {"accumulate": 3},
    # every micro-batch all-reduced: DDP reduces the gradients accumulated so far, each time
    "accumulation_synced_every_micro_batch": {"accumulate": 3, "no_sync": False},
    "static_graph": {"ddp": {"static_graph": True}},
    "find_unused_parameters": {"ddp": {"find_unused_parameters": True}},
    "gradient_as_bucket_view": {"ddp": {"gradient_as_bucket_view": True}},
    "small_buckets": {"ddp": {"bucket_cap_mb": 0.1}},
    # torch.compile(ddp): DDPOptimizer splits the graph at bucket boundaries, DDP's reducer calls the hook
    "compiled_ddp": {"compile": "ddp_optimizer"},
    # compiled autograd: DDP calls the hook per parameter (each weight of at least min_numel elements compressed)
    "compiled_autograd_python_reducer": {"compile": "python_reducer", "min_numel": 1024},
}
_LAUNCH: dict = {}
CASES = [("ringzip", "hook_equals_group_codec"), ("ringzip", "other_calls_stay_exact"),
         ("gloo", "hook_equals_group_codec"), ("gloo", "other_calls_stay_exact"),
         ("ringzip", "per_call/exact_on_a_codec_group"), ("ringzip", "per_call/compress_on_an_exact_group"),
         ("ringzip", "per_call/bad_codec"), ("ringzip", "resume/without_model_warns"),
         ("gloo", "nonfinite_reaches_every_rank"), *[("gloo", f"variant/{v}") for v in VARIANTS]]


@pytest.mark.parametrize("backend,case", CASES, ids=[f"{b}-{c}" for b, c in CASES])
def test_compress_what_you_mean(backend, case):
    if backend not in _LAUNCH:
        _LAUNCH[backend] = mp.run_checks(checks, WS, args=(backend,), timeout=300, stall=90)
    name = case if case.startswith(("per_call/", "resume/")) else f"{backend}/{case}"
    mp.assert_checks(_LAUNCH[backend], lambda c: c == name, f"{backend}: {case}")
