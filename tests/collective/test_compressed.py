"""Compressed collectives of the ringzip backend on 2, 3 and 4 ranks.

One launch per world size (``tests/mp.py``; starting a rank costs ~2 s of CPU, a launch takes
5-20 s here): every rank creates the default ringzip group, a gloo group over the same ranks
(the exact reference, and the channel through which results are gathered for the cross-rank
checks) and a few ringzip groups with clean error-feedback / stats state, then runs every
section, recording each failing check by name. The pytest tests report the launches section by
section. In every case all collectives run before any assertion, so a failing rank cannot
leave the others waiting in a collective.

Inputs are deterministic (``_bounds.gen``): every rank rebuilds every rank's input, so each
rank computes the exact fp64 sum and a per-element error bound locally (``_bounds``: derived
from the codec bounds of docs/wire-format.md and the steps of each algorithm; the measured
max error/bound is 0.7-0.97 for the q-codecs, so the bounds are sharp).

Sections (``_sections_values.py``, ``_sections_state.py``), per world size:
  bounds       every codec x algorithm (ring, sra, auto; also sparse for topk/randomk), SUM on
               float32: outputs bitwise identical on all ranks (§3.2); every element within the
               bound (q-codecs: from the actual chunk-local bucket scales; sra: each contribution
               encoded once + the sum encoded once; ring: one encode per hop of the partial sum;
               q1: |x| + mean|x| per encode); topk: exactly the selected entries survive (error =
               the dropped elements); randomk: k coordinates, the same on all ranks, exact sum
               there, 0 elsewhere; nearest rounding: auto == sra bit for bit; the codec's stats
               counter moved (the call was compressed).
  scaling      AVG and PREMUL_SUM (bound of the pre-scaled inputs, / n for AVG).
  dtypes       float16 / bfloat16 inputs (bound + rounding of the result to the dtype).
  noncontig    strided and transposed inputs: same bits as the contiguous input (deterministic
               codecs), within the bound (stochastic), elements outside the view untouched.
  coalesced    all_reduce_coalesced goes through the compressed path as one call.
  reduce_scatter  reduce_scatter_tensor and reduce_scatter (list), q8/q4/q1/fp16/topk, SUM and
               AVG: within the phase-1 bound (owner's own part exact), input not modified.
  edges        tiny tensors (0, 1, < n elements per part) with min_numel 0; bucket sizes 8 ..
               larger than a part; top-k / random-k above 2^20 elements; unbiasedness through the
               collective (mean of 40 calls -> exact sum at rate 1/sqrt(40): zero-mean rounding,
               re-drawn every call); three async calls in flight with set_options between them
               (options taken at issue time); a ringzip subgroup of ranks {0, n-1}.
  nonfinite    NaN / +Inf / -Inf on one rank -> non-finite output on every rank, identical
               replicas, for every codec x algorithm; residuals stay finite; the group keeps working.
  exact        stays exact (§3.1, §3.6): int dtypes, MIN/MAX/PRODUCT, float64, tensors below
               min_numel (16384 set explicitly), codec "none" with every algorithm: equal to gloo
               bit for bit (or to the same call with codec "none"), not counted in stats.
  set_options  switching codec mid-run (q8 -> none -> topk -> q8) takes effect on the next call;
               rejected values leave the options unchanged.
  stats        calls, bytes_in, bytes_dense_equiv, bytes_wire > 0, ratio within 4 % of the
               codec's nominal ratio, codec <= total seconds, reset; residual_bytes > 0 only with
               error feedback.
  ef           topk:0.1 with error feedback, 50 steps of fixed inputs: sum of outputs = t*S - sum
               of residuals, accumulated outputs track accumulated inputs, residual norm saturates;
               error_feedback_state / load_error_feedback_state round trip (replayed step gives
               the same bits, also in a fresh group) and state() right after a load; a NaN step
               resets the offending rank's residual and the next step is finite; EF tracking
               through sra for the biased dense codecs (q1, q2 nearest), with reduce_scatter as
               the control.
Plus ``test_sra_error_does_not_grow_with_world_size`` over the n=2 and n=4 launches.
"""
from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from tests import mp
from tests.collective._sections_state import (
    section_ef, section_exact, section_nonfinite, section_set_options, section_stats,
)
from tests.collective._sections_values import (
    section_bounds, section_coalesced, section_dtypes, section_edges, section_noncontig, section_reduce_scatter,
    section_scaling,
)
from tests.collective._common import T

WORLD_SIZES = [2, 3, 4]


# --------------------------------------------------------------------------------------------


def compressed_matrix(ctx):
    torch.set_num_threads(1)
    import ringzip

    t = T(ctx)
    dist.init_process_group("ringzip", rank=ctx.rank, world_size=ctx.world_size, init_method=ctx.init_method,
                            pg_options=ringzip.Options(min_numel=1024, error_feedback=False))
    ref = dist.new_group(backend="gloo")
    gnf = dist.new_group(backend="ringzip", pg_options=ringzip.Options(min_numel=1024))
    gs = dist.new_group(backend="ringzip", pg_options=ringzip.Options(min_numel=1024))
    g = dist.group.WORLD
    timing = t.extra.setdefault("seconds", {})
    for section, group in ((section_bounds, g), (section_scaling, g), (section_dtypes, g), (section_noncontig, g),
                           (section_coalesced, g), (section_exact, g), (section_set_options, g),
                           (section_reduce_scatter, g), (section_edges, g), (section_nonfinite, gnf), (section_stats, gs),
                           (section_ef, None)):
        t0 = time.monotonic()
        section(t, group, ref) if group is not None else section(t, ref)
        dist.barrier(group=ref)
        timing[section.__name__[8:]] = round(time.monotonic() - t0, 2)
    dist.destroy_process_group()
    res = t.chk.result()
    from tests.collective._bounds import TIGHTNESS

    t.extra["tightness"] = dict(TIGHTNESS)
    res["extra"] = t.extra
    return res


SECTIONS = ["bounds", "scaling", "dtypes", "noncontig", "coalesced", "nonfinite", "exact", "set_options", "stats", "ef",
            "reduce_scatter", "edges"]
_LAUNCHES: dict = {}


def launch(ws):
    if ws not in _LAUNCHES:
        try:
            res = mp.run(compressed_matrix, ws, timeout=60 + 30 * ws)
            passed = set().union(*(r["passed"] for r in res))
            _LAUNCHES[ws] = ("ok", mp.merge(res), passed, [r["extra"] for r in res])
        except mp.MultiProcessError as e:
            _LAUNCHES[ws] = ("error", str(e), None, None)
    return _LAUNCHES[ws]


@pytest.mark.parametrize("section", SECTIONS)
@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_compressed(ws, section):
    status, failures, passed, _ = launch(ws)
    if status != "ok":
        pytest.fail(f"launch on {ws} ranks failed:\n{failures}", pytrace=False)
    mine = {c: m for c, m in failures.items() if c.split("/")[0] == section}
    mp.raise_on_failures(mine, f"{section} on {ws} ranks")
    assert any(c.split("/")[0] == section for c in passed), f"no {section} case ran on {ws} ranks"


def test_sra_error_does_not_grow_with_world_size():
    """Normalized error ||out - S|| / ||S|| on iid N(0,1) inputs, n = 2 vs n = 4.

    sra encodes each contribution once (phase-1 error variance ~ (n-1) Delta^2, Delta from one
    rank's bucket scale) and the sum once (Delta ~ sqrt(n)); with ||S||^2 ~ n:
    nerr^2 ~ ((n-1) + n) / n, so nerr(4)/nerr(2) = sqrt(1.75/1.5) = 1.08 while the quantization
    error is small against the signal (q8, q4). ring re-encodes the partial sum at every hop:
    nerr^2 ~ (1 + 2 + ... + n) / n, ratio ~1.29. Asserted for q8 and q4: sra ratio < 1.2, and sra
    below ring at n = 4. q2 is reported only: its error exceeds the signal (nerr ~ 2), the
    phase-1 noise dominates and the (n-1)/n factor alone allows sqrt(1.5) = 1.22 (measured ~1.25,
    ring ~1.41). The estimates over 20011 elements are good to < 1%."""
    e = {}
    for ws in (2, 4):
        status, failures, _, extra = launch(ws)
        if status != "ok":
            pytest.fail(f"launch on {ws} ranks failed:\n{failures}", pytrace=False)
        e[ws] = extra[0]
    lines, bad = [], []
    for codec in ("q8", "q4", "q2"):
        for algo in ("sra", "ring"):
            key = f"nerr/{codec}/{algo}"
            if key not in e[2] or key not in e[4]:
                bad.append(f"{key} missing (its bounds case failed)")
                continue
            r = e[4][key] / e[2][key]
            lines.append(f"{codec}/{algo}: n=2 {e[2][key]:.4g}  n=4 {e[4][key]:.4g}  ratio {r:.3f}")
            if algo == "sra" and codec != "q2" and r > 1.2:
                bad.append(f"{key}: grows by {r:.3f} from n=2 to n=4")
        k_sra, k_ring = f"nerr/{codec}/sra", f"nerr/{codec}/ring"
        if codec != "q2" and k_sra in e[4] and k_ring in e[4] and not e[4][k_sra] < e[4][k_ring]:
            bad.append(f"{codec}: sra error {e[4][k_sra]:.4g} not below ring {e[4][k_ring]:.4g} at n=4")
    assert not bad, "\n".join(bad) + "\n" + "\n".join(lines)
