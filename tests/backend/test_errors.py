"""Bad input raises a clear Python exception naming the problem, and the group keeps working.

One 2-rank launch runs every case. Each bad call is made identically on all ranks (a misuse on
one rank only would leave its peers waiting, which is a timeout test, see test_collectives). A
case passes when the call raises one of the expected exception types (ValueError, TypeError or
RuntimeError, which includes torch's DistBackendError) whose message matches the case's pattern,
and a correct all_reduce on the same group right after gives the right sum.
"""
from __future__ import annotations

import datetime
import re

import pytest
import torch
import torch.distributed as dist

from tests import mp
from tests.backend._common import init_world

BACKEND = "ringzip"
WS = 2
CLEAR = (ValueError, TypeError, RuntimeError)


def _cases(ws, rank):
    f32 = lambda n: torch.ones(n)  # noqa: E731
    op = dist.ReduceOp
    c = {}
    # unsupported op / dtype combinations
    c["band_float32"] = (lambda: dist.all_reduce(f32(4), op=op.BAND), r"(?i)band|bitwise", r"(?i)float|dtype|integ|type")
    c["bor_float64"] = (lambda: dist.all_reduce(torch.ones(4, dtype=torch.float64), op=op.BOR), r"(?i)bor|bitwise", r"(?i)float|dtype|integ|type")
    c["bxor_bfloat16"] = (lambda: dist.all_reduce(torch.ones(4, dtype=torch.bfloat16), op=op.BXOR), r"(?i)bxor|bitwise", r"(?i)float|dtype|integ|type")
    c["avg_int32"] = (lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=op.AVG), r"(?i)avg", r"(?i)int|dtype|type")
    c["avg_bool"] = (lambda: dist.all_reduce(torch.ones(4, dtype=torch.bool), op=op.AVG), r"(?i)avg", r"(?i)bool|dtype|type")
    c["premul_sum_int64"] = (lambda: dist.all_reduce(torch.ones(4, dtype=torch.int64), op=dist._make_nccl_premul_sum(2.0)),
                             r"(?i)premul", r"(?i)int|dtype|type")
    c["reduce_scatter_avg_int32"] = (lambda: dist.reduce_scatter_tensor(torch.ones(2, dtype=torch.int32), torch.ones(2 * ws, dtype=torch.int32), op=op.AVG),
                                     r"(?i)avg", r"(?i)int|dtype|type")
    c["band_float32_reduce"] = (lambda: dist.reduce(f32(4), dst=0, op=op.BAND), r"(?i)band|bitwise", r"(?i)float|dtype|integ|type")
    c["unsupported_dtype_float8"] = (lambda: dist.all_reduce(torch.zeros(4, dtype=torch.float8_e4m3fn)),
                                     r"(?i)float8|e4m3|dtype|type", None)
    # mismatched list lengths and output sizes
    c["all_gather_list_too_long"] = (lambda: dist.all_gather([f32(3) for _ in range(ws + 1)], f32(3)), r"(?i)size|length|number|count|world|list", None)
    c["all_gather_output_wrong_numel"] = (lambda: dist.all_gather([f32(3) for _ in range(ws - 1)] + [f32(4)], f32(3)), r"(?i)size|numel|shape|element", None)
    c["all_gather_output_wrong_dtype"] = (lambda: dist.all_gather([torch.ones(3, dtype=torch.float64) for _ in range(ws)], f32(3)), r"(?i)dtype|type", None)
    c["all_gather_into_tensor_wrong_size"] = (lambda: dist.all_gather_into_tensor(f32(3 * ws + 1), f32(3)), r"(?i)size|numel|shape", None)
    c["all_gather_into_tensor_wrong_dtype"] = (lambda: dist.all_gather_into_tensor(torch.ones(3 * ws, dtype=torch.int32), f32(3)), r"(?i)dtype|type", None)
    c["reduce_scatter_tensor_wrong_size"] = (lambda: dist.reduce_scatter_tensor(f32(3), f32(3 * ws + 1)), r"(?i)size|numel|shape", None)
    c["reduce_scatter_list_too_short"] = (lambda: dist.reduce_scatter(f32(3), [f32(3) for _ in range(ws - 1)] or [f32(3), f32(3)]),
                                          r"(?i)size|length|number|count|world|list", None)
    c["all_to_all_single_bad_splits"] = (lambda: dist.all_to_all_single(f32(2 * ws), f32(2 * ws), output_split_sizes=[1] * ws, input_split_sizes=[2] * ws),
                                         r"(?i)split|size", None)
    c["all_to_all_single_indivisible"] = (lambda: dist.all_to_all_single(f32(2 * ws + 1), f32(2 * ws + 1)), r"(?i)split|size|divis", None)
    c["all_to_all_list_too_long"] = (lambda: dist.all_to_all([f32(2) for _ in range(ws + 1)], [f32(2) for _ in range(ws + 1)]),
                                     r"(?i)size|length|number|count|world|list|expected \d+ (input|output)", None)
    c["all_reduce_coalesced_mixed_dtypes"] = (lambda: dist.all_reduce_coalesced([f32(2), torch.ones(2, dtype=torch.int64)]), r"(?i)dtype|type", None)
    # invalid root / peer ranks
    c["broadcast_src_out_of_range"] = (lambda: dist.broadcast(f32(3), src=ws), r"(?i)rank|root|src", None)
    c["broadcast_src_negative"] = (lambda: dist.broadcast(f32(3), src=-1), r"(?i)rank|root|src", None)
    c["reduce_dst_out_of_range"] = (lambda: dist.reduce(f32(3), dst=ws + 3), r"(?i)rank|root|dst", None)
    c["send_peer_out_of_range"] = (lambda: dist.send(f32(3), dst=ws), r"(?i)rank|peer|dst|dest", None)
    c["recv_peer_out_of_range"] = (lambda: dist.recv(f32(3), src=ws + 1), r"(?i)rank|peer|src|source", None)
    c["send_to_self"] = (lambda: dist.send(f32(3), dst=rank), r"(?i)rank|self|same|dst|dest", None)
    # wrong device
    # (a lone meta tensor never reaches the backend: torch registers meta kernels for c10d ops)
    c["mixed_devices_coalesced"] = (lambda: dist.all_reduce_coalesced([f32(2), torch.ones(2, device="meta")]), r"(?i)device|meta", None)
    return c


CASE_NAMES = list(_cases(2, 0))


def error_cases(ctx, backend):
    torch.set_num_threads(1)
    init_world(ctx, backend)
    rank, ws = ctx.rank, ctx.world_size
    chk = mp.Checker(rank)
    for i, (name, (call, pat1, pat2)) in enumerate(_cases(ws, rank).items()):
        with chk.case(f"{name}/raises"):
            try:
                call()
            except CLEAR as e:
                msg = str(e)
                for pat in (pat1, pat2):
                    if pat and not re.search(pat, msg):
                        raise AssertionError(f"{type(e).__name__} message does not name the problem (want /{pat}/): {msg[:400]!r}")
            except Exception as e:  # noqa: BLE001
                raise AssertionError(f"raised {type(e).__name__} (not ValueError/TypeError/RuntimeError): {str(e)[:300]!r}")
            else:
                raise AssertionError("no exception")
        with chk.case(f"{name}/group_still_works"):
            x = torch.full((5,), float(rank + i))
            w = dist.all_reduce(x, async_op=True)
            w.wait(timeout=datetime.timedelta(seconds=60))
            exp = float(sum(r + i for r in range(ws)))
            assert torch.equal(x, torch.full((5,), exp)), f"all_reduce after the error gave {x.tolist()}, expected {exp}"
    dist.destroy_process_group()
    return chk.result()


_LAUNCH: list = []


@pytest.mark.parametrize("case", CASE_NAMES)
def test_bad_input(case):
    if not _LAUNCH:
        _LAUNCH.append(mp.run_checks(error_cases, WS, args=(BACKEND,), timeout=150, stall=40))
    mp.assert_checks(_LAUNCH[0], lambda c: c.split("/")[0] == case, case)
    assert {f"{case}/raises", f"{case}/group_still_works"} <= _LAUNCH[0].passed


def test_options_validation():
    import ringzip

    with pytest.raises(ValueError, match="algorithm"):
        ringzip.Options(algorithm="bogus")
    with pytest.raises(TypeError, match="timeout"):
        ringzip.Options(timeout=5)
    for algo in ("auto", "ring", "rd"):
        assert ringzip.Options(algorithm=algo, timeout=datetime.timedelta(seconds=5)).algorithm == algo
