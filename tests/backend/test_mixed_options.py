"""ringzip options in groups with mixed backend strings ("cpu:ringzip,cuda:nccl").

torch has no per-backend pg_options: it hands the one pg_options object to the creator of every
backend in the string, and NCCL's creator rejects anything but ProcessGroupNCCL.Options. NCCL
cannot be created on a machine without a GPU, so this test registers ``ncclstub``, a cuda
backend whose creator checks its options exactly like torch's NCCL creator and returns a gloo
backend. One 2-rank launch checks:

* ``cpu:ringzip,cuda:gloo`` with ``pg_options=ringzip.Options``: gloo ignores foreign options, so
  this works and ringzip uses them;
* ``cpu:ringzip,cuda:ncclstub`` with ``pg_options=ringzip.Options``: ringzip raises a ValueError
  naming the recipe before the other backend fails with a message about its own options class;
* the documented recipe: the group without pg_options, then ``ringzip.set_options(...)``;
* ``cpu:ringzip,cuda:ncclstub`` with the other backend's options: ringzip leaves them to it;
* a ringzip-only group with foreign options: TypeError.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from tests import mp
from tests.backend._common import same

_received: list = []


class StubOptions:
    """Stands in for ProcessGroupNCCL.Options."""


def _stub_creator(opts, backend_options):
    # the same check as torch's _create_nccl_process_group
    if backend_options is not None and not isinstance(backend_options, StubOptions):
        raise AssertionError("Expected backend_options argument to be of type StubOptions")
    _received.append(backend_options)
    return dist.ProcessGroupGloo(opts.store, opts.group_rank, opts.group_size, opts.timeout)


def _bf16_sum_is_compressed(ringzip, group, rank, ws, what):
    """A 100 000-element all-reduce on `group` ran through codec bf16 (exact on these integers)."""
    before = ringzip.stats(group).get("bf16", {}).get("calls", 0)
    x = (torch.arange(100_000) % 7).float() * (rank + 1)
    dist.all_reduce(x, group=group)
    same(x, (torch.arange(100_000) % 7).float() * sum(range(1, ws + 1)), what)
    after = ringzip.stats(group).get("bf16", {}).get("calls", 0)
    assert after == before + 1, f"{what}: bf16 calls {before} -> {after}: the call was not compressed"


def mixed_options(ctx):
    torch.set_num_threads(1)
    import ringzip

    rank, ws = ctx.rank, ctx.world_size
    dist.Backend.register_backend("ncclstub", _stub_creator, extended_api=True, devices=["cuda"])
    chk = mp.Checker(rank)
    dist.init_process_group("cpu:ringzip,cuda:gloo", rank=rank, world_size=ws, init_method=ctx.init_method,
                            pg_options=ringzip.Options(codec="bf16", min_numel=1000))
    with chk.case("gloo_ignores_ringzip_options"):
        assert ringzip.get_options().codec == "bf16", ringzip.get_options()
        _bf16_sum_is_compressed(ringzip, None, rank, ws, "cpu:ringzip,cuda:gloo with pg_options")
    with chk.case("picky_backend_gets_clear_error"):
        try:
            dist.new_group(backend="cpu:ringzip,cuda:ncclstub", pg_options=ringzip.Options(codec="bf16"))
        except ValueError as e:
            msg = str(e)
            assert "ringzip.set_options" in msg and "ncclstub" in msg, f"message does not give the recipe: {msg}"
        else:
            raise AssertionError("new_group with ringzip.Options next to a picky backend did not raise")
        assert not _received, "the other backend was created after ringzip's error"
    with chk.case("recipe_set_options_after_new_group"):
        g = dist.new_group(backend="cpu:ringzip,cuda:ncclstub")
        assert _received == [None], _received
        assert isinstance(g._get_backend(torch.device("cpu")), ringzip._C.RingzipBackend)
        ringzip.set_options(group=g, codec="bf16", min_numel=1000)
        _bf16_sum_is_compressed(ringzip, g, rank, ws, "cpu:ringzip,cuda:ncclstub + set_options")
    with chk.case("other_backends_options_left_to_it"):
        mine = StubOptions()
        g2 = dist.new_group(backend="cpu:ringzip,cuda:ncclstub", pg_options=mine)
        assert _received[-1] is mine, "the other backend did not get its options"
        assert ringzip.get_options(g2).codec == "none", ringzip.get_options(g2)
        x = torch.full((3,), float(rank + 1))
        dist.all_reduce(x, group=g2)
        same(x, torch.full((3,), float(sum(range(1, ws + 1)))), "all_reduce")
    with chk.case("ringzip_only_rejects_foreign_options"):
        try:
            dist.new_group(backend="ringzip", pg_options=StubOptions())
        except TypeError as e:
            assert "ringzip.Options" in str(e), str(e)
        else:
            raise AssertionError("a ringzip group took StubOptions")
    dist.destroy_process_group()
    return chk.result()


CASES = ["gloo_ignores_ringzip_options", "picky_backend_gets_clear_error", "recipe_set_options_after_new_group",
         "other_backends_options_left_to_it", "ringzip_only_rejects_foreign_options"]


def test_mixed_backend_options():
    res = mp.run(mixed_options, 2, timeout=90)
    mp.raise_on_failures(mp.merge(res), "options with mixed backend strings")
    assert all(sorted(r["passed"]) == sorted(CASES) for r in res), [r["passed"] for r in res]
