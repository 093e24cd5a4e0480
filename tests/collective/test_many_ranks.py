"""Every schedule of csrc/collective/ at 8, 12, 16, 24, 32 and 64 ranks (threads over the loopback
transport, gloo and grouped mode), and the node-aware ones on layouts 8x8, 4x12, 2x16 and 16x4
(nodes x ranks per node, contiguous and interleaved), bit for bit against the reference, with the
checks of the loopback matrix and of the node-aware tests (test_loopback_matrix.py,
test_hierarchy.py). `pytest tests -k many_ranks` runs them all (docs/testing.md).

Many ranks reach what 1-5 ranks never do: recursive doubling and halving-doubling fold 4 or 8
ranks into a power of two (12, 24 ranks); the tree is seven levels deep at 64; the ring walks up
to 63 hops, each encoding under an RNG stream of its own (rank << 8 | hop + 1); 5 elements leave
most parts, shards and top-k parts empty, yet move through every hop; 1001 elements split
unevenly at every rank count here.

The reference pays per encode of a non-empty part (its Philox in torch: ~1.5 ms a call, whatever the
size), and a ring or sra of n ranks with every part non-empty encodes about n^2 times (6-13 s at 64
ranks for one quantizer here), so the compressed cases are not the full cross product: every codec
with every algorithm runs at every rank count on 5 elements (0 and 1 at 8 ranks), and on 1001 at 8
and 12 ranks; at more ranks the codecs whose reference is cheap run 1001 and the quantizers take
turns (ALLREDUCE_UNEVEN, REDUCE_SCATTER_UNEVEN, NODE_AWARE_UNEVEN). The dense cases cost little:
every algorithm runs 5 and 1001 elements at every rank count (0 and 1 at 8 and 64) and on every
layout.
"""
from __future__ import annotations

import functools

import pytest

from ringzip import _C
from ringzip.reference import hierarchy as RH

from . import test_hierarchy as H
from . import test_loopback_matrix as M
from .test_loopback_matrix import DENSE_CODECS, MODES, SPARSE_CODECS, check_allreduce, check_reduce_scatter, gen, same

L = _C.loopback
WORLDS = (8, 12, 16, 24, 32, 64)
CODECS = DENSE_CODECS + SPARSE_CODECS
QUANTIZERS = ("q8", "q4", "q2", "q1")
CHEAP = tuple(c for c in CODECS if c not in QUANTIZERS)  # casts, none and the sparse codecs
DENSE_ALGOS = ("ring", "rd", "hd", "tree", "direct", "star", "sra", "auto")
BELOW, UNEVEN = 5, 1001  # fewer elements than ranks; odd, and 1001 % n != 0 for every n here
LAYOUTS = ((8, 8), (4, 12), (2, 16), (16, 4))


def algos_of(codec):
    return ("sparse",) if codec in SPARSE_CODECS else ("ring", "sra")


def name(v):
    return f"{v[0]}x{v[1]}" if isinstance(v, tuple) else "ef" if v is True else str(v)


def params(cases):
    """pytest params of (mode, *case), the two modes of a case next to each other: the reference
    is cached per case (check_allreduce, check_reduce_scatter, node_aware_reference) and so
    computed once for both."""
    return [pytest.param(mode, *case, id="-".join([mode, name(case[0]) if isinstance(case[0], tuple) else f"n{case[0]}"]
                                                   + [name(v) for v in case[1:] if v is not False]))
            for case in cases for mode in MODES]


def sizes(n, edges=(8, 64)):
    """0 and 1 elements at the rank counts of edges too."""
    return ((0, 1) if n in edges else ()) + (BELOW, UNEVEN)


# ---- dense ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode,n,algo,size", params((n, a, s) for n in WORLDS for a in DENSE_ALGOS for s in sizes(n)))
def test_many_ranks_dense_allreduce(mode, n, algo, size):
    M.test_dense_allreduce(mode, n, algo, size)


@pytest.mark.parametrize("mode,n,parts,size",
                         params((n, p, s) for n in WORLDS for p in ("even", "uneven") for s in (0, BELOW, UNEVEN)))
def test_many_ranks_ring_reduce_scatter_and_allgather(mode, n, parts, size):
    M.test_ring_reduce_scatter_and_allgather(mode, n, parts, size)


@pytest.mark.parametrize("mode,n,size", params((n, s) for n in WORLDS for s in (0, BELOW, UNEVEN)))
def test_many_ranks_rooted_collectives(mode, n, size):
    M.test_rooted_collectives(mode, n, size)


@pytest.mark.parametrize("mode,n", params((n,) for n in WORLDS))
def test_many_ranks_alltoall_and_barrier(mode, n):
    M.test_alltoall_uneven_and_barrier(mode, n)


# ---- compressed ----------------------------------------------------------------------------------

# The codecs that run UNEVEN elements at each rank count; at 16 ranks each quantizer by one
# algorithm, q8 and q2 by the ring, q4 and q1 by sra.
ALLREDUCE_UNEVEN = {8: CODECS, 12: CODECS, 16: CODECS, 24: CHEAP, 32: CHEAP, 64: ("none", "fp16") + SPARSE_CODECS}


def allreduce_cases():
    for n in WORLDS:
        for codec in CODECS:
            for algo in algos_of(codec):
                for size in sizes(n, edges=(8,)):
                    if size == UNEVEN and (codec not in ALLREDUCE_UNEVEN[n] or n == 16 and codec in QUANTIZERS
                                           and algo != ("ring", "sra")[QUANTIZERS.index(codec) % 2]):
                        continue
                    yield n, codec, algo, size, size == UNEVEN  # UNEVEN with error feedback


@pytest.mark.parametrize("mode,n,codec,algo,size,ef", params(allreduce_cases()))
def test_many_ranks_compressed_allreduce(mode, n, codec, algo, size, ef):
    check_allreduce(mode, n, codec, algo, size, ef)


# Reduce-scatter is sra's first phase for every codec, the sparse ones included: n^2 encodes, and
# random-k's draw from Philox, so random-k runs UNEVEN up to 16 ranks.
NOT_RANDOMK = ("none", "fp16", "bf16", "topk:0.01")
REDUCE_SCATTER_UNEVEN = {8: CODECS, 12: CODECS, 16: ("q8", "q2") + CHEAP, 24: ("q4", "q1") + NOT_RANDOMK,
                         32: NOT_RANDOMK, 64: ("none", "fp16", "bf16")}


def reduce_scatter_cases():
    for n in WORLDS:
        for codec in CODECS:
            for size in sizes(n, edges=(8,)):
                if size != UNEVEN or codec in REDUCE_SCATTER_UNEVEN[n]:
                    yield n, codec, size, size == UNEVEN


@pytest.mark.parametrize("mode,n,codec,size,ef", params(reduce_scatter_cases()))
def test_many_ranks_compressed_reduce_scatter(mode, n, codec, size, ef):
    check_reduce_scatter(mode, n, codec, size, ef)


# ---- node-aware ----------------------------------------------------------------------------------

def contiguous(nodes, per):
    return [r // per for r in range(nodes * per)]


def interleaved(nodes, per):
    return [r % nodes for r in range(nodes * per)]


def node_layouts(*placements):
    return [pytest.param(f(a, b), id=f"{a}x{b}-{f.__name__}") for a, b in LAYOUTS for f in placements]


@pytest.mark.parametrize("algo,count", [(a, c) for a in DENSE_ALGOS for c in (BELOW, UNEVEN)] + [("auto", 0)])
@pytest.mark.parametrize("nodes", node_layouts(contiguous))
@pytest.mark.parametrize("mode", MODES)
def test_many_ranks_node_aware_dense_allreduce(mode, nodes, algo, count):
    H.test_dense_allreduce(mode, nodes, algo, count)


@pytest.mark.parametrize("algo", DENSE_ALGOS)
@pytest.mark.parametrize("nodes", node_layouts(interleaved))
@pytest.mark.parametrize("mode", MODES)
def test_many_ranks_node_aware_dense_allreduce_interleaved(mode, nodes, algo):
    H.test_dense_allreduce(mode, nodes, algo, UNEVEN)


@pytest.mark.parametrize("part", (0, 1, 3))
@pytest.mark.parametrize("nodes", node_layouts(contiguous, interleaved))
@pytest.mark.parametrize("mode", MODES)
def test_many_ranks_node_aware_dense_reduce_scatter(mode, nodes, part):
    H.test_dense_reduce_scatter(mode, nodes, part)


@functools.lru_cache(maxsize=2)
def node_aware_reference(op, layout, codec, algo, size, ef):
    nodes = contiguous(*layout)
    n = len(nodes)
    xs = gen(M.case_seed(n, layout[0], size, 8), n, size)
    res = gen(M.case_seed(n, layout[0], size, 9), n, size, 0.05) if ef else None
    args = dict(seed=0xC0FFEE + n, rng_seq=size % 11)
    if op == "allreduce":
        args.update(seq=3, topk_block=40)  # shards of UNEVEN elements hold 62-250: several blocks, the last short
        want = RH.compressed_allreduce(xs, nodes, codec, algo, residuals=res, **args)
    else:
        want = RH.compressed_reduce_scatter(xs, nodes, codec, residuals=res, **args)
    return nodes, xs, res, want, args


def check_node_aware(op, mode, layout, codec, algo, size, ef):
    nodes, xs, res, (want, want_res), args = node_aware_reference(op, layout, codec, algo, size, ef)
    n = len(nodes)
    got, got_res = L.compressed(op, xs, codec, mode=mode, algorithm=algo, residuals=res, nodes=nodes, **args)
    what = f"node-aware {codec} {algo} {op}, {name(layout)}, {size} elements, {mode}"
    if op == "allreduce":
        same(got, want, what)
        same(got, [got[0]] * n, what + " (replicas vs rank 0)")
    else:
        part = size // n
        same([g[r * part:(r + 1) * part] for r, g in enumerate(got)], want, what + ", owned part")
    if ef:
        same(got_res, want_res, what + ", residual")


# The reference's inter-node step of a quantizer costs it (ranks per node) x nodes^2 encodes: the
# quantizers that run UNEVEN elements on each layout.
NODE_AWARE_UNEVEN = {(8, 8): ("q8", "q1"), (4, 12): QUANTIZERS, (2, 16): QUANTIZERS, (16, 4): ("q4",)}


def node_aware_cases(op):
    """All-reduce: every codec on every layout, on BELOW elements and (every codec but the
    quantizers of NODE_AWARE_UNEVEN) on UNEVEN with error feedback, the algorithm of a dense codec
    alternating between ring and sra from one codec and layout to the next (each quantizer runs
    UNEVEN by both, on 4x12 and 2x16). Reduce-scatter (n equal parts): every codec on two layouts,
    with parts of one element on 8x8 or 16x4, of three and error feedback on 4x12 or 2x16."""
    for i, layout in enumerate(LAYOUTS):
        n = layout[0] * layout[1]
        for j, codec in enumerate(CODECS):
            if op == "reduce_scatter":
                if layout in (((8, 8), (4, 12)), ((16, 4), (2, 16)))[j % 2]:
                    one = layout in ((8, 8), (16, 4))
                    yield (layout, codec, "auto", n, False) if one else (layout, codec, "auto", 3 * n, True)
                continue
            algo = "sparse" if codec in SPARSE_CODECS else ("ring", "sra")[(i + j) % 2]
            yield layout, codec, algo, BELOW, False
            if codec not in QUANTIZERS or codec in NODE_AWARE_UNEVEN[layout]:
                yield layout, codec, algo, UNEVEN, True


@pytest.mark.parametrize("mode,layout,codec,algo,size,ef", params(node_aware_cases("allreduce")))
def test_many_ranks_node_aware_compressed_allreduce(mode, layout, codec, algo, size, ef):
    check_node_aware("allreduce", mode, layout, codec, algo, size, ef)


@pytest.mark.parametrize("mode,layout,codec,algo,size,ef", params(node_aware_cases("reduce_scatter")))
def test_many_ranks_node_aware_compressed_reduce_scatter(mode, layout, codec, algo, size, ef):
    check_node_aware("reduce_scatter", mode, layout, codec, algo, size, ef)
