"""GPU-only compatibility checks (skipped without a GPU; passed on an H200 with torch 2.11 and
NCCL 2.28.9, 2026-11-30): one 2-rank launch on one GPU.

* ``"cpu:ringzip,cuda:nccl"`` with the documented recipe (no pg_options, then
  ``ringzip.set_options``): CPU all-reduces go through ringzip with the codec set after init;
* the same string with ``pg_options=ringzip.Options``: ringzip's clear ValueError before NCCL's
  own assertion; with ``ProcessGroupNCCL.Options``: left to NCCL, the group works;
* all-reduce of a sparse CUDA tensor over ringzip (host-staged): the same bits as the same call on
  the CPU copy;
* ``dist.split_group`` of a ringzip default group bound to a CUDA device (``device_id=``): each
  rank's child group is ringzip with the parent's options (not yet run on a GPU).
"""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests import mp
from tests.backend.test_sparse import _check_result, _sparse

pytestmark = pytest.mark.cuda


def compat_cuda(ctx):
    torch.set_num_threads(1)
    import ringzip

    rank, ws = ctx.rank, ctx.world_size
    torch.cuda.set_device(0)
    chk = mp.Checker(rank)
    dist.init_process_group("cpu:ringzip,cuda:nccl", rank=rank, world_size=ws, init_method=ctx.init_method)
    with chk.case("nccl_mixed/recipe_set_options"):
        ringzip.set_options(codec="bf16", min_numel=1000)
        x = (torch.arange(100_000) % 7).float() * (rank + 1)
        dist.all_reduce(x)
        assert torch.equal(x, (torch.arange(100_000) % 7).float() * sum(range(1, ws + 1)))
        assert ringzip.stats()["bf16"]["calls"] == 1, ringzip.stats()
    with chk.case("nccl_mixed/ringzip_options_clear_error"):
        try:
            dist.new_group(backend="cpu:ringzip,cuda:nccl", pg_options=ringzip.Options(codec="q8"))
        except ValueError as e:
            assert "ringzip.set_options" in str(e) and "nccl" in str(e), str(e)
        else:
            raise AssertionError("no error")
    with chk.case("nccl_mixed/nccl_options_left_to_nccl"):
        g = dist.new_group(backend="cpu:ringzip,cuda:nccl", pg_options=dist.ProcessGroupNCCL.Options())
        x = torch.full((3,), float(rank + 1))
        dist.all_reduce(x, group=g)
        assert torch.equal(x, torch.full((3,), float(sum(range(1, ws + 1)))))
    with chk.case("sparse_cuda_allreduce"):
        g = dist.new_group(backend="ringzip")
        cpu = _sparse("cuda", rank, (1000, 16), 1, 300 + 50 * rank, torch.float32, dup=True)
        x = cpu.cuda()
        dist.all_reduce(x, group=g)
        dist.all_reduce(cpu, group=g)
        assert x.is_cuda
        _check_result(x.cpu(), cpu, "sparse CUDA all_reduce vs the CPU call")
    dist.destroy_process_group()
    return chk.result()


def _run(fn, cases, title):
    res = mp.run(fn, 2, timeout=60)
    mp.raise_on_failures(mp.merge(res), title)
    assert all(len(r["passed"]) == cases for r in res), [r["passed"] for r in res]


def test_compat_cuda():
    _run(compat_cuda, 4, "GPU compatibility")


def split_cuda(ctx):
    """A default group bound to a CUDA device (device_id=) splits through ringzip's Backend::split:
    dist.split_group gives each rank a ringzip group of its own ranks, with the parent's options."""
    torch.set_num_threads(1)
    import ringzip

    rank = ctx.rank
    chk = mp.Checker(rank)
    dist.init_process_group("ringzip", rank=rank, world_size=ctx.world_size, init_method=ctx.init_method,
                            device_id=torch.device("cuda", 0), pg_options=ringzip.Options(codec="bf16"))
    with chk.case("split_group/device_bound"):
        sub = dist.split_group(split_ranks=[[0], [1]])
        assert isinstance(sub._get_backend(torch.device("cuda")), ringzip._C.RingzipBackend)  # noqa: SLF001
        assert ringzip.get_options(sub).codec == "bf16", ringzip.get_options(sub)
        x = torch.full((1000,), float(rank + 1), device="cuda")
        dist.all_reduce(x, group=sub)  # one rank: its own values
        assert torch.equal(x.cpu(), torch.full((1000,), float(rank + 1)))
        y = torch.full((1000,), float(rank + 1), device="cuda")
        dist.all_reduce(y)  # the parent still sums both
        assert torch.equal(y.cpu(), torch.full((1000,), 3.0))
    dist.destroy_process_group()
    return chk.result()


def test_split_cuda():
    _run(split_cuda, 1, "split of a device-bound group")
