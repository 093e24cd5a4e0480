"""Every schedule of csrc/collective/ with 1-5 ranks as threads of this process over the loopback
transport, in gloo mode (eager matching by tag, and every exchange posting its receive before its
send, as Gloo needs for both directions to run at once) and grouped (NCCL-like) mode, bit for bit
against the pure-torch simulation of n ranks (ringzip.reference.collectives; docs/testing.md).

  compressed all-reduce   codec (none, fp16, bf16, q8, q4, q2, q1, topk, randomk) x algorithm
                          (ring, sra; sparse for topk/randomk; auto) x world 1-5 x size (0, 1, odd,
                          bucket boundaries, sra segment boundaries, several segments), with and
                          without error feedback (output and new residual), nearest rounding,
                          bucket sizes, top-k blocks, seeds and call numbers
  compressed reduce-scatter  the same codecs and sizes; the owner's part and the residual, and
                          separately that the other parts keep the input (compressed.h)
  dense                   all-reduce with ring, rd, direct, star, hd, tree, auto on float32 SUM (float
                          reductions simulated in each algorithm's order), dtypes x ops, ring
                          reduce-scatter / allgather with uneven parts, broadcast, reduce, gather,
                          scatter, all-to-all with uneven splits, barrier

One pytest process, no launches: each case runs its n ranks as n threads (ringzip._C.loopback).
Both modes run the same schedules (collective/schedule.h): the grouped mode checks that they also
hold under NCCL's posting-order matching.
"""
from __future__ import annotations

import functools

import pytest
import torch

from ringzip import _C
from ringzip.reference import collectives as RC

L = _C.loopback
MODES = ("gloo", "grouped")
WORLDS = (1, 2, 3, 4, 5)
DENSE_CODECS = ("none", "fp16", "bf16", "q8", "q4", "q2", "q1")
SPARSE_CODECS = ("topk:0.01", "randomk:0.01")
SEG = RC.SEGMENT_ELEMS


def bits(t):
    t = t.contiguous().reshape(-1)
    if t.is_floating_point():
        return t.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()])
    return t


def same(got, want, what, nan=False):
    """Bitwise equality per rank; nan=True: NaN at the same places (any payload), all else bitwise."""
    assert len(got) == len(want), f"{what}: {len(got)} ranks vs {len(want)}"
    for r, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.numel() == w.numel(), f"{what}, rank {r}: {g.dtype}[{g.numel()}] vs {w.dtype}[{w.numel()}]"
        if nan:
            assert torch.equal(g.isnan(), w.isnan()), f"{what}, rank {r}: NaN at other places than the reference"
            g, w = g.nan_to_num(0.0, torch.inf, -torch.inf), w.nan_to_num(0.0, torch.inf, -torch.inf)
        gb, wb = bits(g), bits(w)
        if not torch.equal(gb, wb):
            ne = (gb != wb).nonzero().reshape(-1)
            i = int(ne[0])
            raise AssertionError(f"{what}, rank {r}: {ne.numel()}/{g.numel()} elements differ from the reference, "
                                 f"first at {i}: {g.reshape(-1)[i].item()!r} vs {w.reshape(-1)[i].item()!r}")


def gen(seed, n, count, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(count, generator=g) * scale for _ in range(n)]


def case_seed(*key):
    return hash(key) & 0x7FFFFFFF  # stable: str hashing is salted per process, so hash ints only


# ---- compressed all-reduce -----------------------------------------------------------------------

def small_sizes(n):
    # empty, one element, fewer than... / odd, each part exactly one bucket, each part a bucket and
    # change (partial last bucket, uneven parts)
    return (0, 1, 7, 1001, 512 * n, 1025 * n + 1)


EF_SIZES = (1001,)


def compressed_cases():
    for n in WORLDS:
        for codec in DENSE_CODECS + SPARSE_CODECS:
            for algo in ("sparse",) if codec in SPARSE_CODECS else ("ring", "sra"):
                for size in small_sizes(n):
                    for ef in (False, True) if size in EF_SIZES or size == 1025 * n + 1 else (False,):
                        for mode in MODES:
                            yield pytest.param(mode, n, codec, algo, size, ef, id=f"{mode}-n{n}-{codec}-{algo}-{size}"
                                               + ("-ef" if ef else ""))


@functools.lru_cache(maxsize=2)
def reference_allreduce(n, codec, algo, size, ef, bucket=512, stochastic=True, topk_block=1 << 20, seed=None,
                        rng_seq=None, seq=None):
    key = (n, size, int(ef), bucket, int(stochastic), topk_block)
    seed = 1000 + n if seed is None else seed
    rng_seq = size % 7 + n if rng_seq is None else rng_seq
    seq = n + size % 3 if seq is None else seq
    xs = gen(case_seed(*key), n, size)
    res = gen(case_seed(*key, 1), n, size, 0.05) if ef else None
    want = RC.compressed_allreduce(xs, codec, algo, seed=seed, rng_seq=rng_seq, seq=seq, topk_block=topk_block,
                                   bucket=bucket, stochastic=stochastic, residuals=res)
    return xs, res, want, dict(seed=seed, rng_seq=rng_seq, seq=seq, topk_block=topk_block, bucket=bucket,
                               rounding="stochastic" if stochastic else "nearest")


def check_allreduce(mode, n, codec, algo, size, ef, **kw):
    xs, res, (want, want_res), args = reference_allreduce(n, codec, algo, size, ef, **kw)
    out, new_res = L.compressed("allreduce", xs, codec, mode=mode, algorithm=algo, residuals=res, **args)
    what = f"{codec} {algo} all-reduce, {n} ranks, {size} elements, {mode}"
    same(out, want, what)
    same(out, [out[0]] * n, what + " (replicas vs rank 0)")
    if ef:
        same(new_res, want_res, what + ", residual")


@pytest.mark.parametrize("mode,n,codec,algo,size,ef", list(compressed_cases()))
def test_compressed_allreduce(mode, n, codec, algo, size, ef):
    check_allreduce(mode, n, codec, algo, size, ef)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("codec", DENSE_CODECS + SPARSE_CODECS)
@pytest.mark.parametrize("algo", ["auto", "sparse", "ring"])
def test_compressed_algorithm_choice(mode, codec, algo):
    # auto and sparse run sra for dense codecs; sparse codecs always run the sparse algorithm
    check_allreduce(mode, 3, codec, algo, 1001, True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("codec", ["q8", "q4", "q2"])
@pytest.mark.parametrize("algo", ["ring", "sra"])
def test_compressed_nearest_rounding(mode, n, codec, algo):
    check_allreduce(mode, n, codec, algo, 1001, True, stochastic=False)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("codec,bucket", [("q8", 8), ("q4", 24), ("q2", 1000), ("q1", 8), ("q1", 24), ("fp16", 24)])
@pytest.mark.parametrize("algo", ["ring", "sra"])
def test_compressed_bucket_sizes(mode, codec, bucket, algo):
    check_allreduce(mode, 3, codec, algo, 3001, True, bucket=bucket)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("codec", SPARSE_CODECS)
@pytest.mark.parametrize("n,size,block", [(3, 1001, 256), (4, 1001, 0), (2, 5000, 1), (5, 40000, 4096), (1, 1001, 256)])
@pytest.mark.parametrize("ef", [False, True])
def test_compressed_topk_blocks(mode, codec, n, size, block, ef):
    # top-k selects per block (block 1 on 5000 elements: at most 4096 blocks, so blocks of 2)
    check_allreduce(mode, n, codec, "sparse", size, ef, topk_block=block)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed,rng_seq", [(0, 0), (2**64 - 1, 2**32 - 1), (0x123456789, 77)])
@pytest.mark.parametrize("codec", ["q4", "randomk:0.01"])
def test_compressed_seeds_and_call_numbers(mode, seed, rng_seq, codec):
    check_allreduce(mode, 3, codec, "sra" if codec == "q4" else "sparse", 1001, True, seed=seed, rng_seq=rng_seq)


# sra cuts parts into segments of max(bucket, 2^19 // bucket * bucket) elements: parts of exactly
# one segment, one segment and one element, and several segments (bucket 1000: 524000-element
# segments that are not powers of two). Few and big: the reference pays for every element.
BIG = [
    (2, "q1", 512, 2 * SEG, True, True),              # one whole segment per part
    (2, "q8", 512, 2 * (SEG + 1), True, True),        # a 1-element second segment, stochastic
    (3, "q4", 1000, 3 * (2 * 524000 + 3) + 1, False, True),  # 3 segments per part, nearest
    (2, "fp16", 512, 2 * (2 * SEG) + 1, True, False),  # uneven parts, 2 segments each
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n,codec,bucket,size,stochastic,ef", BIG, ids=[f"{c}-{s}" for _, c, _, s, _, _ in BIG])
def test_compressed_sra_segments(mode, n, codec, bucket, size, stochastic, ef):
    check_allreduce(mode, n, codec, "sra", size, ef, bucket=bucket, stochastic=stochastic)


# SRA's segment length is planned per call (cost::sra_segment_elems), and on a long link its
# reductions run segments behind its sends (cost::sra_lag): the bits of the result and of the
# residuals must depend on neither, only the number and order of messages.
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("lag", (1, 2, 1 << 20), ids=("lag1", "lag2", "all"))
@pytest.mark.parametrize("n,codec,bucket,size,segment", [
    (3, "q4", 512, 3 * 5000 + 2, 1024),          # many segments of two buckets, uneven parts
    (3, "q2", 1000, 3 * 7001, 2500),             # asked length not a multiple of the bucket: 2 buckets
    (2, "q8", 512, 2 * (2 * SEG + 1), 4 * SEG),  # the coarse length: one segment per part
])
def test_compressed_sra_segment_length(mode, n, codec, bucket, size, segment, lag):
    xs, res = gen(case_seed(n, size, bucket, 3), n, size), gen(case_seed(n, size, bucket, 4), n, size, 0.05)
    args = dict(seed=11, rng_seq=5, bucket=bucket)
    want, want_res = RC.compressed_allreduce(xs, codec, "sra", residuals=res, **args)
    out, new_res = L.compressed("allreduce", xs, codec, mode=mode, algorithm="sra", residuals=res,
                                segment_elems=segment, lag=lag, **args)
    same(out, want, f"{codec} sra, segments of {segment}, {mode}, lag {lag}")
    same(new_res, want_res, f"{codec} sra, segments of {segment}, {mode}, lag {lag}, residual")


@pytest.mark.parametrize("mode", MODES)
def test_compressed_sparse_large(mode):
    check_allreduce(mode, 2, "topk:0.01", "sparse", (1 << 20) + 5, True)  # two top-k blocks of 2^20
    check_allreduce(mode, 2, "randomk:1", "sparse", 270_000, False)  # k + 1 floats > 1 MiB: ring inside


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("codec,algo", [(c, a) for c in DENSE_CODECS for a in ("ring", "sra")]
                         + [(c, "sparse") for c in SPARSE_CODECS])
def test_compressed_nonfinite(mode, codec, algo):
    # NaN on rank 1, +Inf on rank 2, -Inf in rank 0's residual: the same NaN/Inf positions and
    # finite bits as the reference; residuals with a NaN/Inf are dropped (zeroed)
    xs, res = gen(5, 3, 1001), gen(6, 3, 1001, 0.05)
    xs[1][17], xs[2][500], res[0][900] = float("nan"), float("inf"), float("-inf")
    args = dict(seed=3, rng_seq=4, seq=2)
    want, want_res = RC.compressed_allreduce(xs, codec, algo, residuals=res, **args)
    out, new_res = L.compressed("allreduce", xs, codec, mode=mode, algorithm=algo, residuals=res, **args)
    same(out, want, f"{codec} {algo} with NaN/Inf, {mode}", nan=True)
    same(new_res, want_res, f"{codec} {algo} with NaN/Inf, {mode}, residual", nan=True)


# ---- compressed reduce-scatter -------------------------------------------------------------------


@functools.lru_cache(maxsize=2)
def reference_reduce_scatter(n, codec, size, ef, bucket=512):
    key = (n, size, int(ef), bucket, 2)
    xs = gen(case_seed(*key), n, size)
    res = gen(case_seed(*key, 1), n, size, 0.05) if ef else None
    args = dict(seed=2000 + n, rng_seq=size % 5, bucket=bucket)
    return xs, res, RC.compressed_reduce_scatter(xs, codec, residuals=res, **args), args


def run_reduce_scatter(mode, n, codec, size, ef, bucket=512, compute="host"):
    xs, res, (want, want_res), args = reference_reduce_scatter(n, codec, size, ef, bucket)
    out, new_res = L.compressed("reduce_scatter", xs, codec, mode=mode, residuals=res, compute=compute, **args)
    return xs, out, new_res, want, want_res


def check_reduce_scatter(mode, n, codec, size, ef, bucket=512, compute="host"):
    xs, out, new_res, want, want_res = run_reduce_scatter(mode, n, codec, size, ef, bucket, compute)
    begin = RC.even_parts(size, n)
    own = lambda ts: [t[begin[r]:begin[r + 1]] for r, t in enumerate(ts)]  # noqa: E731
    what = f"{codec} reduce-scatter, {n} ranks, {size} elements, {mode}, {compute} compute"
    same(own(out), own(want), what + ", owned part")
    if ef:
        same(new_res, want_res, what + ", residual")


def rs_cases():
    for n in WORLDS:
        for codec in DENSE_CODECS + SPARSE_CODECS:
            for size in small_sizes(n):
                for ef in (False, True) if size in EF_SIZES else (False,):
                    for mode in MODES:
                        yield pytest.param(mode, n, codec, size, ef, id=f"{mode}-n{n}-{codec}-{size}" + ("-ef" if ef else ""))


@pytest.mark.parametrize("mode,n,codec,size,ef", list(rs_cases()))
def test_compressed_reduce_scatter(mode, n, codec, size, ef):
    check_reduce_scatter(mode, n, codec, size, ef)


RS_BIG = [(2, "q4", 2 * (SEG + 1) + 1, True), (2, "topk:0.01", 2 * (2 * SEG) + 1, True),
          (2, "randomk:0.01", 2 * (SEG + 100), False)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n,codec,size,ef", RS_BIG, ids=[f"{c}-{s}" for _, c, s, _ in RS_BIG])
def test_compressed_reduce_scatter_segments(mode, n, codec, size, ef):
    check_reduce_scatter(mode, n, codec, size, ef)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("codec", ["q8", "none", "topk:0.01"])
@pytest.mark.parametrize("ef", [False, True])
def test_compressed_reduce_scatter_keeps_other_parts(mode, n, codec, ef):
    size = 1001
    xs, out, _, _, _ = run_reduce_scatter(mode, n, codec, size, ef)
    begin = RC.even_parts(size, n)
    for r in range(n):
        keep = torch.ones(size, dtype=torch.bool)
        keep[begin[r]:begin[r + 1]] = False
        same([out[r][keep]], [xs[r][keep]], f"{codec} reduce-scatter, {mode}, rank {r}'s other parts")


# ---- dense -------------------------------------------------------------------------------------

DENSE_ALGOS = ("ring", "rd", "direct", "star", "sra", "hd", "tree", "auto")


def dense_inputs(key, n, count, dtype=torch.float32, op="sum"):
    g = torch.Generator().manual_seed(case_seed(*key))
    if dtype == torch.bool:
        return [torch.rand(count, generator=g) < 0.5 for _ in range(n)]
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        lo, hi = (max(info.min, -3), 4) if op == "prod" else (max(info.min, -1000), min(info.max, 1000))
        return [torch.randint(lo, hi, (count,), generator=g, dtype=dtype) for _ in range(n)]
    if op == "prod":
        return [(1 + 0.1 * torch.randn(count, generator=g)).to(dtype) for _ in range(n)]
    xs = [torch.randn(count, generator=g).to(dtype) for _ in range(n)]
    if op in ("min", "max"):  # signed zeros: which one wins depends on the operand order
        for r, x in enumerate(xs):
            x[r::7] = 0.0 if r % 2 else -0.0
    return xs


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", WORLDS)
@pytest.mark.parametrize("algo", DENSE_ALGOS)
@pytest.mark.parametrize("size", [0, 1, 7, 1001, 10007])
def test_dense_allreduce(mode, n, algo, size):
    xs = dense_inputs((n, size, 3), n, size)
    seq = size % 5
    same(L.collective("allreduce", xs, mode=mode, algorithm=algo, seq=seq), RC.allreduce(xs, "sum", algo, seq),
         f"{algo} all-reduce, {n} ranks, {size} elements, {mode}")


# Over a long link exact SRA cuts parts above 4 MiB into segments (collective/dense/sra.cc), each
# reduced and sent on by itself: the same bits as unsegmented and as the ring, in both executors,
# uneven parts too. The hub reports a 100 ms round trip (the transport's word for a long link).
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n,count,dtype", [(2, 4_500_003, torch.float32), (3, 6_600_001, torch.float16),
                                           (4, 4_400_009, torch.float32)], ids=str)
def test_dense_sra_segments(mode, n, count, dtype):
    xs = dense_inputs((n, count, 5), n, count, dtype)
    trace = _C.sim.Trace()
    got = L.collective("allreduce", xs, mode=mode, algorithm="sra", seq=3, round_trip_s=0.1, trace=trace)
    same(got, L.collective("allreduce", xs, mode=mode, algorithm="ring", seq=3), f"sra vs ring, {n} ranks, {count}")
    same(got, L.collective("allreduce", xs, mode=mode, algorithm="sra", seq=3), f"sra vs unsegmented, {n} ranks")
    same(got, RC.allreduce(xs, "sum", "sra", 3), f"sra vs the reference, {n} ranks, {count}")
    sends = [e for e in trace.events(0) if e[0] == "send"]
    assert len(sends) > 2 * (n - 1), f"{len(sends)} sends: not segmented"


# The dense algorithms the planner's "auto" chooses among (plan/cost.h dense_candidates) add in one
# order, so that a choice by measured time never changes a result: every pair agrees bit for bit,
# for every dtype and op (MIN / MAX keep the same operand order: the sign of a zero tells).
AUTO_CANDIDATES = ("star", "ring", "direct", "sra")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", (2, 3, 4, 5, 6))
@pytest.mark.parametrize("dtype,op", [(torch.float32, "sum"), (torch.float16, "sum"), (torch.bfloat16, "sum"),
                                      (torch.float64, "sum"), (torch.float32, "prod"), (torch.float32, "min"),
                                      (torch.float32, "max"), (torch.int32, "sum")],
                         ids=lambda v: str(v).replace("torch.", ""))
@pytest.mark.parametrize("size", [1, 5, 1001, 70_001])
def test_auto_candidates_agree(mode, n, dtype, op, size):
    xs = dense_inputs((n, size, 11), n, size, dtype, op)
    got = {a: L.collective("allreduce", xs, mode=mode, algorithm=a, reduce_op=op, seq=size % 7) for a in AUTO_CANDIDATES}
    for a in AUTO_CANDIDATES[1:]:
        same(got[a], got[AUTO_CANDIDATES[0]], f"{a} vs {AUTO_CANDIDATES[0]}, {dtype} {op}, {n} ranks, {size} elements")


@pytest.mark.parametrize("nodes", [(0, 0, 1, 1), (0, 1, 0, 1, 0, 1), (0, 0, 0, 1, 1, 1)], ids=str)
def test_auto_candidates_agree_node_aware(nodes):
    n, size = len(nodes), 100_003
    xs = dense_inputs((n, size, 12), n, size)
    got = {a: L.collective("allreduce", xs, algorithm=a, nodes=list(nodes)) for a in AUTO_CANDIDATES}
    for a in AUTO_CANDIDATES[1:]:
        same(got[a], got[AUTO_CANDIDATES[0]], f"node-aware {nodes}: {a} vs {AUTO_CANDIDATES[0]}")


def test_auto_candidates_are_the_models():
    # What "auto" may choose is exactly the set checked above.
    assert tuple(_C.cost.dense_candidates()) == AUTO_CANDIDATES


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("algo", ["ring", "auto"])
def test_dense_allreduce_ring_segments(mode, algo):
    xs = dense_inputs((3, 4), 3, 3 * 700_001)  # parts of 2.8 MB: three 1 MiB segments each
    same(L.collective("allreduce", xs, mode=mode, algorithm=algo), RC.allreduce(xs, "sum", algo), f"{algo}, {mode}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("dtype,op", [(torch.float32, "sum"), (torch.float32, "min"), (torch.float16, "sum")],
                         ids=["float32-sum", "float32-min", "float16-sum"])
def test_dense_allreduce_tree_segments(mode, n, dtype, op):
    # 2.8 MB of float32: eight segments of 350 kB and one of a single element, several in flight
    # through the tree's levels at once; float16: five of 256 kB and a short last one
    xs = dense_inputs((n, 6, len(op), dtype.itemsize), n, 700_001, dtype, op)
    same(L.collective("allreduce", xs, mode=mode, algorithm="tree", reduce_op=op),
         RC.allreduce(xs, op, "tree"), f"tree, {n} ranks, {dtype} {op}, {mode}")


DTYPE_OPS = [(torch.float32, "prod"), (torch.float32, "min"), (torch.float32, "max"), (torch.float64, "sum"),
             (torch.float16, "sum"), (torch.bfloat16, "max"), (torch.int8, "sum"), (torch.uint8, "max"),
             (torch.int32, "prod"), (torch.int64, "bxor"), (torch.int32, "band"), (torch.int64, "bor"),
             (torch.bool, "sum"), (torch.bool, "min"), (torch.int8, "min"), (torch.float64, "prod")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize("algo", DENSE_ALGOS)
@pytest.mark.parametrize("dtype,op", DTYPE_OPS, ids=[f"{str(d)[6:]}-{o}" for d, o in DTYPE_OPS])
def test_dense_dtypes_and_ops(mode, n, algo, dtype, op):
    xs = dense_inputs((n, 5, DTYPE_OPS.index((dtype, op))), n, 777, dtype, op)
    same(L.collective("allreduce", xs, mode=mode, algorithm=algo, reduce_op=op, seq=1),
         RC.allreduce(xs, op, algo, 1), f"{algo} all-reduce {dtype} {op}, {n} ranks, {mode}")


ALL_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
              torch.int64, torch.bool)
BITWISE = ("band", "bor", "bxor")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=[str(d)[6:] for d in ALL_DTYPES])
def test_dense_every_dtype_and_op(mode, dtype):
    # every reduce_into kernel (collective/reduce.cc) once, in the ring's order; bitwise ops on
    # floating dtypes are refused on every rank
    for op in ("sum", "prod", "min", "max") + BITWISE:
        xs = dense_inputs((ALL_DTYPES.index(dtype), len(op)), 3, 7, dtype, op)
        if dtype.is_floating_point and op in BITWISE:
            with pytest.raises(RuntimeError, match=f"reduce op {op.upper()} needs an integer or bool dtype"):
                L.collective("allreduce", xs, mode=mode, algorithm="ring", reduce_op=op)
            continue
        same(L.collective("allreduce", xs, mode=mode, algorithm="ring", reduce_op=op), RC.allreduce(xs, op, "ring"),
             f"ring all-reduce {dtype} {op}, {mode}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("algo", DENSE_ALGOS)
@pytest.mark.parametrize("op", ["min", "max"])
def test_dense_replicas_identical_with_signed_zeros(request, mode, n, algo, op):
    size = 5000  # 20 kB: auto picks recursive doubling (whose partners once reduced in opposite orders)
    xs = [torch.full((size,), -0.0 if r % 2 == 0 else 0.0) for r in range(n)]
    out = L.collective("allreduce", xs, mode=mode, algorithm=algo, reduce_op=op)
    same(out, RC.allreduce(xs, op, algo), f"{algo} {op} of signed zeros, {n} ranks, {mode}")
    same(out, [out[0]] * n, f"{algo} {op} of signed zeros, {n} ranks, {mode} (replicas vs rank 0)")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [2, 3, 4, 5])
@pytest.mark.parametrize("algo", DENSE_ALGOS)
@pytest.mark.parametrize("op", ["min", "max"])
def test_dense_operand_order_of_signed_zeros(mode, n, algo, op):
    # every element a zero of random sign on every rank: the result of each element names the
    # operand order of every reduction on its way (op(+0, -0) keeps the second), so an algorithm
    # that swaps an order anywhere (a halving round, a fold, a tree node) differs from the reference
    g = torch.Generator().manual_seed(case_seed(n, 7, len(op)))
    xs = [torch.where(torch.rand(4099, generator=g) < 0.5, -0.0, 0.0) for _ in range(n)]
    out = L.collective("allreduce", xs, mode=mode, algorithm=algo, reduce_op=op, seq=n)
    same(out, RC.allreduce(xs, op, algo, n), f"{algo} {op} of random signed zeros, {n} ranks, {mode}")


def uneven_parts(n, count):
    cuts = sorted(torch.randint(0, count + 1, (n - 1,), generator=torch.Generator().manual_seed(n)).tolist())
    return [0] + cuts + [count]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", WORLDS)
@pytest.mark.parametrize("parts", ["even", "uneven"])
@pytest.mark.parametrize("size", [0, 5, 1001])
def test_ring_reduce_scatter_and_allgather(mode, n, parts, size):
    begin = RC.even_parts(size, n) if parts == "even" else uneven_parts(n, size)
    xs = dense_inputs((n, size, 6), n, size)
    what = f"ring {parts} parts, {n} ranks, {size} elements, {mode}"
    same(L.collective("reduce_scatter", xs, mode=mode, parts=begin), RC.ring_reduce_scatter(xs, "sum", begin),
         "reduce-scatter (whole buffers), " + what)
    same(L.collective("allgather", xs, mode=mode, parts=begin), RC.ring_allgather(xs, begin), "allgather, " + what)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", WORLDS)
@pytest.mark.parametrize("size", [0, 1001])
def test_rooted_collectives(mode, n, size):
    xs = dense_inputs((n, size, 7), n, size)
    for root in sorted({0, n - 1, n // 2}):
        what = f"root {root}, {n} ranks, {size} elements, {mode}"
        same(L.collective("broadcast", xs, mode=mode, root=root), RC.broadcast(xs, root), "broadcast, " + what)
        same(L.collective("reduce", xs, mode=mode, root=root), RC.reduce(xs, "sum", root), "reduce, " + what)
        same(L.collective("gather", xs, mode=mode, root=root), RC.gather(xs, root), "gather, " + what)
        big = [torch.arange(n * size, dtype=torch.float32) if r == root else torch.zeros(size) for r in range(n)]
        same(L.collective("scatter", big, mode=mode, root=root), RC.scatter(big[root], n, root), "scatter, " + what)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", WORLDS)
def test_alltoall_uneven_and_barrier(mode, n):
    g = torch.Generator().manual_seed(n)
    splits = [torch.randint(0, 9, (n,), generator=g).tolist() for _ in range(n)]
    splits[0][n - 1] = 0  # an empty message
    xs = [torch.arange(sum(s), dtype=torch.int64) + 100 * r for r, s in enumerate(splits)]
    same(L.collective("alltoall", xs, mode=mode, splits=splits), RC.alltoall(xs, splits), f"alltoall, {n} ranks, {mode}")
    L.collective("barrier", [torch.zeros(1)] * n, mode=mode)
