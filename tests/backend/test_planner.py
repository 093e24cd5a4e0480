"""What the planner decides when a call is issued (Planner::plan, through ringzip._C.cost.plan): a
made-up call on a made-up group, so every branch -- the CUDA tensors' too -- runs on any machine.
What it settles when the call starts (the tuner's choices) is tested through real groups
(test_auto.py) and the loopback's device branches (tests/collective/test_device_branches.py)."""
import pytest
import torch

import ringzip
from ringzip import _C

FLAT4 = [0, 0, 0, 0]
NODES2x2 = [0, 0, 1, 1]
BIG = 1 << 20  # elements: above min_numel


def plan(kind="allreduce", device="cpu", dtype=torch.float32, op="sum", numel=BIG, nodes=FLAT4, **options):
    return _C.cost.plan(ringzip.Options(**options)._as_c(), nodes, kind, device, dtype, op, numel)


def test_exact_host_calls_run_ringzip_schedules():
    p = plan()
    assert not p["compressed"] and not p["nccl"] and p["dense"] == "auto" and not p["node_aware"]
    assert plan(algorithm="tree")["dense"] == "tree"
    assert plan(algorithm="sra")["dense"] == "sra"  # a name of both families names both
    assert plan(algorithm="sparse")["dense"] == "auto"  # a compressed algorithm's name leaves the dense one on auto


def test_cuda_exact_calls_use_nccls_kernel_where_it_reduces_alike():
    assert plan(device="cuda")["nccl"]
    for kind in ("reduce_scatter", "reduce", "broadcast", "allgather"):
        assert plan(kind, device="cuda")["nccl"], kind
    assert not plan(device="cuda", algorithm="ring")["nccl"]  # a named algorithm runs ringzip's
    assert plan("reduce_scatter", device="cuda", algorithm="ring")["nccl"]  # it names the all-reduce's only
    assert not plan(device="cuda", dtype=torch.bool, op="max")["nccl"]  # bool is not NCCL's
    assert not plan(device="cuda", dtype=torch.int32, op="band")["nccl"]  # nor are the bitwise ops
    for op in ("sum", "avg", "product", "min", "max", "premul_sum"):
        assert plan(device="cuda", op=op)["nccl"], op
    assert not plan(device="cuda", nodes=NODES2x2)["node_aware"]  # CUDA's exact calls run flat
    assert not any(plan(kind, nodes=NODES2x2)["nccl"] for kind in ("allreduce", "broadcast"))  # host: never


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_what_is_compressed(device):
    q4 = dict(device=device, codec="q4")
    p = plan(**q4)
    assert p["compressed"] and p["codec"] == "q4" and not p["nccl"]
    for dtype in (torch.float16, torch.bfloat16):
        assert plan(dtype=dtype, **q4)["compressed"], dtype
    for op in ("avg", "premul_sum"):
        assert plan(op=op, **q4)["compressed"], op
    assert not plan(op="max", **q4)["compressed"]
    assert not plan(dtype=torch.int64, **q4)["compressed"]
    assert not plan(dtype=torch.float64, **q4)["compressed"]
    assert not plan(numel=65535, **q4)["compressed"] and plan(numel=65536, **q4)["compressed"]  # min_numel
    assert plan(numel=10, min_numel=0, **q4)["compressed"]
    assert not plan("reduce", **q4)["compressed"]
    assert plan("reduce_scatter", **q4)["compressed"]
    assert not _C.cost.plan(ringzip.Options(codec="q4")._as_c(), FLAT4, "reduce_scatter", device, torch.float32,
                            "sum", BIG, may_compress=False)["compressed"]  # the coalesced reduce-scatter's items
    assert plan(algorithm="ring", **q4)["compressed_algorithm"] == "ring"


def test_node_aware_where_the_layout_and_the_option_allow():
    assert plan(nodes=NODES2x2)["node_aware"] and plan(nodes=NODES2x2, codec="q8")["node_aware"]
    assert not plan(nodes=NODES2x2, hierarchy="flat")["node_aware"]
    assert not plan(nodes=[0, 0, 1], codec="q8")["node_aware"]  # uneven nodes
    assert not plan("reduce", nodes=NODES2x2)["node_aware"]


def test_the_calling_threads_codec_and_the_deterministic_flag():
    with ringzip.exact():
        assert not plan(codec="q4")["compressed"]
    with ringzip.compress("q8"):
        p = plan()
        assert p["compressed"] and p["codec"] == "q8"
    assert plan(codec="auto")["codec"] == "auto"
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert plan(codec="auto")["codec"] == "q4" and plan(codec="auto:q8")["codec"] == "q8"
    finally:
        torch.use_deterministic_algorithms(was)


def test_bad_names_are_value_errors():
    for kw in (dict(kind="allgatherv"), dict(device="tpu"), dict(op="mean")):
        with pytest.raises(ValueError, match="ringzip"):
            plan(**kw)
