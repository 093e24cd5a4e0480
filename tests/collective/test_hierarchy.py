"""Node-aware all-reduce and reduce-scatter (csrc/collective/hierarchy/) with n ranks as threads
over the loopback transport, gloo mode (eager, every exchange posting its receive first) and
grouped (NCCL-like), bit for bit against the pure-torch oracle (ringzip.reference.hierarchy), on
node layouts 2x2, 2x3, 3x2 and interleaved ranks; layouts that can't run node-aware are refused."""
from __future__ import annotations

import pytest
import torch

from ringzip import _C
from ringzip.reference import collectives as RC
from ringzip.reference import hierarchy as RH

from .test_loopback_matrix import gen, same

L = _C.loopback
MODES = ("gloo", "grouped")
# node label of every rank: contiguous and interleaved ranks, labels in any order
LAYOUTS = ([0, 0, 1, 1], [0, 1, 0, 1], [7, 7, 7, 3, 3, 3], [0, 1, 2, 0, 1, 2], [2, 2, 1, 1, 0, 0])
CODECS = ("bf16", "q8", "q4", "q2", "q1", "topk:0.01", "randomk:0.01")


def lid(nodes):
    return "".join(map(str, nodes))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nodes", LAYOUTS, ids=lid)
@pytest.mark.parametrize("algo", ("auto", "ring", "rd", "star", "hd", "tree"))
@pytest.mark.parametrize("count", (0, 5, 1003, 70_000))
def test_dense_allreduce(mode, nodes, algo, count):
    xs = gen(count + len(nodes), len(nodes), count)
    got = L.collective("allreduce", xs, mode=mode, algorithm=algo, seq=3, nodes=nodes)
    same(got, RH.allreduce(xs, nodes, "sum", algo, seq=3), f"allreduce {algo} {nodes} n={count}")
    for g in got[1:]:
        assert torch.equal(g, got[0])


@pytest.mark.parametrize("op", ("max", "prod", "bxor"))
def test_dense_allreduce_ops(op):
    nodes = [0, 0, 1, 1, 2, 2]
    g = torch.Generator().manual_seed(1)
    xs = [torch.randint(-9, 9, (999,), generator=g, dtype=torch.int32) for _ in nodes]
    same(L.collective("allreduce", xs, reduce_op=op, nodes=nodes), RH.allreduce(xs, nodes, op), op)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nodes", LAYOUTS, ids=lid)
@pytest.mark.parametrize("part", (0, 1, 333, 20_000))
def test_dense_reduce_scatter(mode, nodes, part):
    n = len(nodes)
    xs = gen(part, n, part * n)
    got = L.collective("reduce_scatter", xs, mode=mode, nodes=nodes)
    own = [g[r * part:(r + 1) * part] for r, g in enumerate(got)]
    same(own, RH.reduce_scatter(xs, nodes), f"reduce_scatter {nodes} part={part}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nodes", LAYOUTS, ids=lid)
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("feedback", (False, True))
def test_compressed_allreduce(mode, nodes, codec, feedback):
    n, count = len(nodes), 3001
    xs = gen(n, n, count)
    res = gen(n + 1, n, count, 0.01) if feedback else None
    got, got_res = L.compressed("allreduce", xs, codec, mode=mode, seed=5, rng_seq=2, seq=4, residuals=res,
                                nodes=nodes, topk_block=700)
    want, want_res = RH.compressed_allreduce(xs, nodes, codec, seed=5, rng_seq=2, seq=4, topk_block=700,
                                             residuals=res)
    same(got, want, f"{codec} {nodes}")
    for g in got[1:]:
        assert torch.equal(g, got[0]), "ranks differ"
    if feedback:
        same(got_res, want_res, f"{codec} {nodes} residual")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nodes", LAYOUTS, ids=lid)
@pytest.mark.parametrize("codec", ("bf16", "q4", "q1"))
@pytest.mark.parametrize("feedback", (False, True))
def test_compressed_reduce_scatter(mode, nodes, codec, feedback):
    n, part = len(nodes), 1001
    xs = gen(n + 2, n, n * part)
    res = gen(n + 3, n, n * part, 0.01) if feedback else None
    got, got_res = L.compressed("reduce_scatter", xs, codec, mode=mode, seed=9, rng_seq=1, residuals=res,
                                nodes=nodes)
    want, want_res = RH.compressed_reduce_scatter(xs, nodes, codec, seed=9, rng_seq=1, residuals=res)
    same([g[r * part:(r + 1) * part] for r, g in enumerate(got)], want, f"{codec} {nodes}")
    if feedback:
        same(got_res, want_res, f"{codec} {nodes} residual")


def test_node_aware_q4_error_not_above_flat():
    """One codec hop between nodes instead of one per rank: the node-aware result is closer to the
    exact sum than the flat one (rel-L2 over several calls)."""
    nodes = [0, 0, 1, 1, 2, 2]
    n, count = len(nodes), 1 << 16
    flat_err = node_err = 0.0
    for call in range(4):
        xs = gen(100 + call, n, count)
        exact = torch.stack(xs).double().sum(0)
        flat = L.compressed("allreduce", xs, "q4", rng_seq=call)[0][0]
        node = L.compressed("allreduce", xs, "q4", rng_seq=call, nodes=nodes)[0][0]
        flat_err += float((flat.double() - exact).norm() / exact.norm())
        node_err += float((node.double() - exact).norm() / exact.norm())
    assert node_err < flat_err, (node_err, flat_err)


@pytest.mark.parametrize("nodes,why", [([0, 0, 0, 1], "different numbers of ranks"), ([0, 1, 2], "one rank per node"),
                                       ([4, 4, 4], "one node"), ([0, 0], "one node")])
def test_unsuitable_layouts_refused(nodes, why):
    xs = gen(0, len(nodes), 8)
    with pytest.raises(ValueError, match=why):
        L.collective("allreduce", xs, nodes=nodes)
    with pytest.raises(ValueError, match=why):
        L.compressed("allreduce", xs, "q4", nodes=nodes)


def test_failure_names_group_ranks():
    """A rank that fails in an inter-node step is named by its group rank, not its index there."""
    nodes = [0, 0, 1, 1]
    xs = gen(0, 4, 1 << 12)
    xs[3] = torch.zeros(1 << 11)  # rank 3 sends fewer bytes than its peers expect
    with pytest.raises(RuntimeError) as e:
        L.collective("allreduce", xs, nodes=nodes, algorithm="ring", timeout_ms=3000)
    assert "rank 3" in str(e.value)


def test_reference_helpers():
    assert RH.members([5, 5, 2, 2, 5]) == [[0, 1, 4], [2, 3]]
    assert RC.even_parts(10, 3) == [0, 4, 7, 10]


# ---- routed transport: node peers over a transport of their own ----------------------------------

ROUTED_LAYOUTS = ([0, 0, 1, 1], [0, 0, 0, 1], [0, 1, 0, 1, 1])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nodes", ROUTED_LAYOUTS, ids=lid)
@pytest.mark.parametrize("algo", ("ring", "rd", "star", "hd", "tree"))
def test_routed_dense_matches_flat(mode, nodes, algo):
    """A flat schedule whose messages to node peers travel on another transport (shared memory in
    the backend) computes the same bits."""
    xs = gen(len(nodes), len(nodes), 5000)
    got = L.collective("allreduce", xs, mode=mode, algorithm=algo, seq=2, nodes=nodes, routed=True)
    same(got, RC.allreduce(xs, "sum", algo, seq=2), f"routed {algo} {nodes}")


@pytest.mark.parametrize("nodes", ROUTED_LAYOUTS, ids=lid)
@pytest.mark.parametrize("codec", ("q4", "topk:0.01"))
def test_routed_compressed_matches_flat(nodes, codec):
    xs = gen(3, len(nodes), 4000)
    got, _ = L.compressed("allreduce", xs, codec, seed=1, nodes=nodes, routed=True)
    same(got, RC.compressed_allreduce(xs, codec, seed=1)[0], f"routed {codec} {nodes}")


def test_routed_collectives_of_every_kind():
    nodes = [0, 0, 1, 1]
    xs = gen(5, 4, 4000)
    for op in ("broadcast", "reduce", "allgather", "reduce_scatter", "barrier"):
        got = L.collective(op, xs, root=1, nodes=nodes, routed=True)
        want = L.collective(op, xs, root=1)
        same(got, want, f"routed {op}")


# ---- chunks: all-reduce of more than 8 MiB runs pipelined in chunks ------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nodes,count", [([0, 0, 1, 1], 4_500_001), ([0, 1, 0, 1, 0, 1], 12_000_000)], ids=("2x2", "2x3"))
def test_chunked_dense_allreduce(mode, nodes, count):
    assert len(RH.chunks(count, 4)) - 1 == count * 4 // RH.CHUNK_BYTES > 1
    xs = gen(count % 97, len(nodes), count)
    got = L.collective("allreduce", xs, mode=mode, nodes=nodes)
    same(got, RH.allreduce(xs, nodes), f"chunked allreduce {nodes}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("codec", ("bf16", "q4"))
def test_chunked_compressed_allreduce(mode, codec):
    nodes, count = [0, 0, 1, 1], 4_400_000
    xs = gen(7, 4, count)
    res = gen(8, 4, count, 0.01)
    got, got_res = L.compressed("allreduce", xs, codec, mode=mode, seed=3, residuals=res, nodes=nodes)
    want, want_res = RH.compressed_allreduce(xs, nodes, codec, seed=3, residuals=res)
    same(got, want, f"chunked {codec}")
    same(got_res, want_res, f"chunked {codec} residual")


def test_chunk_failure_stops_both_stages():
    """A rank whose input is short fails inside a chunk: every rank raises, none hangs."""
    nodes = [0, 0, 1, 1]
    xs = gen(0, 4, 4_500_000)
    xs[2] = xs[2][:4_000_000].clone()
    with pytest.raises(RuntimeError, match="rank"):
        L.collective("allreduce", xs, nodes=nodes, timeout_ms=10_000)
