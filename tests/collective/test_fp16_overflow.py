"""Codec fp16 and values beyond fp16's range (largest finite 65504): counted and warned once.

The fp16 codec casts float32 to fp16 on the wire without scaling, so values or sums above 65504
become inf. ringzip does not hide that (README, docs/wire-format.md); on the host path it counts
every compressed fp16 call whose result holds Inf/NaN although this rank's input was finite in
``ringzip.stats()["fp16"]["overflows"]`` and warns once per process (C++ TORCH_WARN_ONCE: a line
on stderr). One 2-rank launch:

* a value of 1e5 on finite input: result inf on both ranks, counted, warned;
* values of 40000 on both ranks: each fits, the sum 80000 does not: counted;
* a second overflow: counted again, no second warning;
* in-range values: not counted; bf16 with 1e5: finite, exact, nothing counted;
* NaN input on rank 0 only: rank 0 (non-finite input) does not count it; rank 1 does (its input
  was finite: the documented ambiguity of a local check);
* reduce_scatter_tensor (the FSDP path) with values above 65504: counted.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist

from tests import mp

N = 4096


def _overflows(ringzip):
    return ringzip.stats().get("fp16", {}).get("overflows", 0)


def fp16_overflow(ctx):
    torch.set_num_threads(1)
    import ringzip

    rank, ws = ctx.rank, ctx.world_size
    dist.init_process_group("ringzip", rank=rank, world_size=ws, init_method=ctx.init_method,
                            pg_options=ringzip.Options(codec="fp16", min_numel=1024))
    chk = mp.Checker(rank)
    err_path = os.path.join(ctx.tmpdir, f"stderr{rank}.txt")
    saved = os.dup(2)
    with open(err_path, "w") as f:
        os.dup2(f.fileno(), 2)  # TORCH_WARN from C++ goes to fd 2
    try:
        with chk.case("value_above_65504"):
            x = torch.ones(N)
            x[7] = 1e5
            dist.all_reduce(x)
            assert torch.isinf(x[7]) and x[7] > 0, f"x[7] = {x[7]}"
            assert torch.isfinite(x[8:]).all()
            assert _overflows(ringzip) == 1, ringzip.stats()
        with chk.case("sum_above_65504"):
            x = torch.full((N,), 40000.0)
            dist.all_reduce(x)
            assert torch.isinf(x).all(), "40000 + 40000 fit in fp16"
            assert _overflows(ringzip) == 2, ringzip.stats()
        with chk.case("in_range_not_counted"):
            x = torch.full((N,), 30000.0)
            dist.all_reduce(x)
            assert torch.equal(x, torch.full((N,), 30000.0 * ws)), x[:4]
            assert _overflows(ringzip) == 2, ringzip.stats()
        with chk.case("bf16_keeps_the_range"):
            ringzip.set_options(codec="bf16")
            x = torch.full((N,), 65536.0 * 2)
            dist.all_reduce(x)
            assert torch.equal(x, torch.full((N,), 65536.0 * 2 * ws)), x[:4]
            ringzip.set_options(codec="fp16")
            assert _overflows(ringzip) == 2, ringzip.stats()
        with chk.case("nonfinite_input_on_rank_0"):
            x = torch.ones(N)
            if rank == 0:
                x[3] = float("nan")
            dist.all_reduce(x)
            assert torch.isnan(x[3]), x[3]
            assert _overflows(ringzip) == (2 if rank == 0 else 3), ringzip.stats()
        with chk.case("reduce_scatter_tensor"):
            before = _overflows(ringzip)
            inp = torch.full((N * ws,), 1e5)  # (a sum is not re-encoded: the owner's part ends exact + decoded)
            out = torch.empty(N)
            dist.reduce_scatter_tensor(out, inp)
            assert torch.isinf(out).all(), out[:4]
            assert _overflows(ringzip) == before + 1, ringzip.stats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    with chk.case("warned_once"):
        text = open(err_path).read()
        assert text.count("codec fp16") == 1 and "65504" in text and "bf16" in text, f"stderr: {text[-2000:]!r}"
    dist.destroy_process_group()
    return chk.result()


CASES = ["value_above_65504", "sum_above_65504", "in_range_not_counted", "bf16_keeps_the_range",
         "nonfinite_input_on_rank_0", "reduce_scatter_tensor", "warned_once"]


def test_fp16_overflow_counted_and_warned_once():
    res = mp.run(fp16_overflow, 2, timeout=90)
    mp.raise_on_failures(mp.merge(res), "fp16 overflow")
    assert all(sorted(r["passed"]) == sorted(CASES) for r in res), [r["passed"] for r in res]
