"""GPU-only compatibility checks (skipped without a GPU; passed on an H200 with torch 2.11 and
NCCL 2.28.9, 2026-11-30): one 2-rank launch on one GPU.

* ``"cpu:ringzip,cuda:nccl"`` with the documented recipe (no pg_options, then
  ``ringzip.set_options``): CPU all-reduces go through ringzip with the codec set after init;
* the same string with ``pg_options=ringzip.Options``: ringzip's clear ValueError before NCCL's
  own assertion; with ``ProcessGroupNCCL.Options``: left to NCCL, the group works;
* all-reduce of a sparse CUDA tensor over ringzip (host-staged): the same bits as the same call on
  the CPU copy.
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


def test_compat_cuda():
    res = mp.run(compat_cuda, 2, timeout=60)
    mp.raise_on_failures(mp.merge(res), "GPU compatibility")
    assert all(len(r["passed"]) == 4 for r in res), [r["passed"] for r in res]
