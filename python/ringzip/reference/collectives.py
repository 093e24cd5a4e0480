"""Pure-torch simulation of n ranks running ringzip's collectives (csrc/collective/): the oracle of
the loopback matrix (tests/collective/test_loopback_matrix.py), bit for bit.

Each function takes every rank's input (``xs[r]``) and returns every rank's result, computed with
the reference codecs (encode / decode of this package) in the order of operations of the C++
algorithm, so that for a fixed seed, call number (``rng_seq``), rank and phase every result is
determined to the bit:

- RNG streams: Philox key (seed, rng_seq, stream) with stream = rank << 8 | phase; phase 0: a
  rank's encodes in sra's first phase, top-k and random-k; ring hop s encodes at phase s + 1;
  the owner's encode of its reduced part (sra, ring) and the one-rank round trip at 0xF0.
- Dense float reductions are folded in the order each algorithm fixes (``reduce_into(acc, in)``
  is ``acc = op(acc, in)``): ring part p: op(x_p, op(x_{p-1}, ... op(x_{p+2}, x_{p+1}))), and so
  direct and star (the planner's "auto" chooses among these three only); recursive doubling: the fold of ranks >= 2^k into rank - 2^k,
  then pairwise exchanges, each pair computing op(lower rank's, higher rank's); halving-doubling:
  the same fold, then per block the same pairwise order over the halving rounds (mask 2^(k-1)
  first); tree: op(op(own, left child's), right child's) at every node of the heap-shaped tree.
- sra cuts every part into segments of max(bucket, 2^19 // bucket * bucket) elements, counted from
  the part's start, and encodes them one by one (as the C++ pipeline does); since segments are
  whole buckets and RNG counters are global element indices, the bits equal those of one encode
  of the whole part, which the grouped (NCCL) schedule does.
"""
from __future__ import annotations

import torch

from . import BUCKET, TOPK_BLOCK, decode, encode, parse, sparse

GATHER_PHASE = 0xF0
SEGMENT_ELEMS = 1 << 19  # csrc/collective/compressed/layout.h kSegmentElems (the bits do not depend on it)
GATHER_STEP = 0x8000
MAX_TOPK_BLOCKS = 4096
RING_THRESHOLD = 1 << 20  # csrc/plan/cost_options.cc rule_dense
STAR_MAX_SENT = 16 << 10


def even_parts(count: int, parts: int) -> list[int]:
    return [count // parts * i + min(i, count % parts) for i in range(parts + 1)]


# ---- dense ---------------------------------------------------------------------------------------

def reduce_into(op: str, acc: torch.Tensor, inp: torch.Tensor) -> torch.Tensor:
    """op(acc, in) element-wise as csrc/collective/reduce.cc: NaN wins min/max; bool sum/max are
    OR, prod/min AND; integers wrap; half types round once per step."""
    b = acc.dtype == torch.bool
    if op == "sum":
        return acc | inp if b else acc + inp
    if op == "prod":
        return acc & inp if b else acc * inp
    if op == "min":
        return acc & inp if b else torch.where((acc < inp) | (acc != acc), acc, inp)
    if op == "max":
        return acc | inp if b else torch.where((acc > inp) | (acc != acc), acc, inp)
    if op in ("band", "bor", "bxor"):
        return {"band": acc & inp, "bor": acc | inp, "bxor": acc ^ inp}[op]
    raise ValueError(f"unknown reduce op {op!r}")


def choose_allreduce(nbytes: int, n: int, algo: str = "auto") -> str:
    if algo != "auto":
        return algo
    if nbytes * (n - 1) <= STAR_MAX_SENT:
        return "star"
    return "rd" if nbytes < RING_THRESHOLD else "ring"


def _flat(xs):
    return [x.contiguous().reshape(-1).clone() for x in xs]


def ring_reduce_scatter(xs, op="sum", begin=None):
    """Every rank's whole buffer after the ring reduce-scatter: part r of rank r holds the
    reduction; rank r's part r-1 is untouched and part r-s-2 holds the partial sum of hop s."""
    d = _flat(xs)
    n = len(d)
    begin = begin or even_parts(d[0].numel(), n)
    sl = lambda p: slice(begin[p], begin[p + 1])  # noqa: E731
    for s in range(n - 1):
        sent = [d[r][sl((r - s - 1) % n)].clone() for r in range(n)]
        for r in range(n):
            p = (r - s - 2) % n
            d[r][sl(p)] = reduce_into(op, d[r][sl(p)], sent[(r - 1) % n])
    return d


def ring_allgather(xs, begin=None):
    d = _flat(xs)
    n = len(d)
    begin = begin or even_parts(d[0].numel(), n)
    full = torch.cat([d[p][begin[p]:begin[p + 1]] for p in range(n)])
    return [full.clone() for _ in range(n)]


def allreduce(xs, op="sum", algo="auto", seq=0):
    d = _flat(xs)
    n, count = len(d), d[0].numel()
    algo = choose_allreduce(count * d[0].element_size(), n, algo)
    if n == 1 or (count == 0 and algo != "ring"):
        return d
    if algo in ("ring", "direct", "star", "sra"):  # the others fold each part in the ring's order
        return ring_allgather(ring_reduce_scatter(d, op))
    if algo == "tree":
        return _tree_allreduce(d, op)
    if algo not in ("rd", "hd"):
        raise ValueError(f"unknown all-reduce algorithm {algo!r}")
    p = 1
    while p * 2 <= n:
        p *= 2
    v = d[:p]
    for r in range(n - p):
        v[r] = reduce_into(op, v[r], d[r + p])
    if algo == "hd":
        return _halving_doubling(v, op, n)
    mask = 1
    while mask < p:
        v = [reduce_into(op, v[min(r, r ^ mask)], v[max(r, r ^ mask)]) for r in range(p)]
        mask <<= 1
    return [v[r].clone() for r in range(p)] + [v[r - p].clone() for r in range(p, n)]


def _halving_doubling(v, op, n):
    """csrc/collective/dense/hd.cc after the fold: v holds the p = 2^k folded buffers. Halving
    with mask m leaves rank r's window of the m blocks around r as op(lower's, higher's) of the
    pair r, r ^ m; block r of rank r is then final, and doubling only copies."""
    p, count = len(v), v[0].numel()
    begin = even_parts(count, p)
    span = lambda r, m: slice(begin[r & ~(m - 1)], begin[(r & ~(m - 1)) + m])  # noqa: E731
    m = p // 2
    while m >= 1:
        nxt = [x.clone() for x in v]
        for r in range(p):
            lo, hi = min(r, r ^ m), max(r, r ^ m)
            nxt[r][span(r, m)] = reduce_into(op, v[lo][span(r, m)], v[hi][span(r, m)])
        v, m = nxt, m // 2
    out = torch.cat([v[b][begin[b]:begin[b + 1]] for b in range(p)])
    return [out.clone() for _ in range(n)]


def _tree_allreduce(d, op):
    """csrc/collective/dense/tree.cc: rank v's children are 2v+1 and 2v+2; every rank gets the
    root's result."""
    n = len(d)

    def subtree(r):
        acc = d[r]
        for k in (2 * r + 1, 2 * r + 2):
            if k < n:
                acc = reduce_into(op, acc, subtree(k))
        return acc

    out = subtree(0)
    return [out.clone() for _ in range(n)]


def reduce(xs, op="sum", root=0):
    d = _flat(xs)
    out = ring_allgather(ring_reduce_scatter(d, op))[root] if len(d) > 1 else d[0]
    return [out if r == root else d[r] for r in range(len(d))]


def broadcast(xs, root=0):
    return [xs[root].reshape(-1).clone() for _ in xs]


def gather(xs, root=0):
    d = _flat(xs)
    return [torch.cat(d) if r == root else d[r].new_empty(0) for r in range(len(d))]


def scatter(x_root, n, root=0):
    return [c.clone() for c in x_root.reshape(-1).chunk(n)] if x_root.numel() else [x_root.new_empty(0)] * n


def alltoall(xs, splits):
    d = _flat(xs)
    n = len(d)
    pieces = [list(d[r].split(splits[r])) for r in range(n)]
    return [torch.cat([pieces[i][r] for i in range(n)]) for r in range(n)]


# ---- compressed ----------------------------------------------------------------------------------

class _Codec:
    """The reference codec under one call's key (seed, rng_seq); streams rank << 8 | phase."""

    def __init__(self, codec, seed, rng_seq, bucket, stochastic):
        self.codec, self.seed, self.seq, self.bucket, self.stochastic = codec, seed, rng_seq, bucket, stochastic
        self.kind = parse(codec, bucket).kind

    def enc(self, x, off, rank, phase):
        return encode(self.codec, x, self.seed, self.seq, rank << 8 | phase, off, self.bucket, self.stochastic)

    def dec(self, payload, n, off, rank, phase):
        return decode(self.codec, payload, n, self.seed, self.seq, rank << 8 | phase, off, self.bucket)


def choose_compressed(codec: str, algorithm: str) -> str:
    if parse(codec).kind in ("topk", "randomk"):
        return "sparse"
    return "sra" if algorithm in ("auto", "sparse") else algorithm


def _drop_nonfinite(res):
    if res is not None:
        for r in res:
            if not bool(torch.isfinite(r).all()):
                r.zero_()


def _segments(begin, n, bucket):
    """sra's segments of every part: lists of absolute element offsets."""
    b = max(1, bucket)
    seg = max(b, SEGMENT_ELEMS // b * b)
    longest = max(begin[i + 1] - begin[i] for i in range(n))
    while -(-longest // seg) >= GATHER_STEP:
        seg *= 2
    return [list(range(begin[i], begin[i + 1], seg)) + [begin[i + 1]] for i in range(n)]


def _sra(C, d, res, gather):
    n, count = len(d), d[0].numel()
    begin = even_parts(count, n)
    segs = _segments(begin, n, C.bucket)
    seg_pairs = lambda i: list(zip(segs[i][:-1], segs[i][1:]))  # noqa: E731
    sent = {}  # (from, to, segment) -> payload
    for r in range(n):
        lo, hi = begin[r], begin[r + 1]
        if res is not None:  # this rank's part stays exact: it takes what earlier calls owe in full
            d[r][lo:hi] += res[r][lo:hi]
            res[r][lo:hi] = 0
        for i in range(n):
            if i == r:
                continue
            for t, (a, b) in enumerate(seg_pairs(i)):
                x = d[r][a:b]
                if res is not None:  # encode_feedback: encode(x + r), r = x + r - decode
                    s = x + res[r][a:b]
                    sent[r, i, t] = C.enc(s, a, r, 0)
                    res[r][a:b] = s - C.dec(sent[r, i, t], b - a, a, r, 0)
                else:
                    sent[r, i, t] = C.enc(x, a, r, 0)
    owned = {}
    for r in range(n):
        for t, (a, b) in enumerate(seg_pairs(r)):
            for j in range(n):  # contributions added in rank order
                if j != r:
                    d[r][a:b] += C.dec(sent[j, r, t], b - a, a, j, 0)
            if gather:
                owned[r, t] = w = C.enc(d[r][a:b], a, r, GATHER_PHASE)
                if res is not None:
                    res[r][a:b] = d[r][a:b] - C.dec(w, b - a, a, r, GATHER_PHASE)
    if gather:
        for q in range(n):
            for j in range(n):
                for t, (a, b) in enumerate(seg_pairs(j)):
                    d[q][a:b] = C.dec(owned[j, t], b - a, a, j, GATHER_PHASE)


def _ring(C, d, res):
    n, count = len(d), d[0].numel()
    begin = even_parts(count, n)
    part = lambda i: (begin[i % n], begin[i % n + 1])  # noqa: E731
    if res is not None:
        for r in range(n):
            d[r] += res[r]
    out = []
    for r in range(n):
        a, b = part(r - 1)
        out.append(C.enc(d[r][a:b], a, r, 1))
        if res is not None:
            res[r][a:b] = d[r][a:b] - C.dec(out[r], b - a, a, r, 1)
    for s in range(n - 1):
        incoming = [out[(r - 1) % n] for r in range(n)]
        for r in range(n):
            a, b = part(r - s - 2)
            got = C.dec(incoming[r], b - a, a, (r - 1) % n, s + 1)
            if s + 2 < n:  # decode_add_encode, then the residual of a local encode of this rank's share
                out[r] = C.enc(got + d[r][a:b], a, r, s + 2)
                if res is not None:
                    res[r][a:b] = d[r][a:b] - C.dec(C.enc(d[r][a:b], a, r, s + 2), b - a, a, r, s + 2)
            else:
                d[r][a:b] += got
    owned = []
    for r in range(n):
        a, b = part(r)
        owned.append(C.enc(d[r][a:b], a, r, GATHER_PHASE))
        if res is not None:
            res[r][a:b] = d[r][a:b] - C.dec(owned[r], b - a, a, r, GATHER_PHASE)
    for q in range(n):
        for j in range(n):
            a, b = part(j)
            d[q][a:b] = C.dec(owned[j], b - a, a, j, GATHER_PHASE)


def topk_blocks(count: int, topk_block: int) -> list[int]:
    block = min(topk_block, count) if topk_block else count
    block = max(block, -(-count // MAX_TOPK_BLOCKS))
    return list(range(0, count, block)) + [count]


def _topk(C, d, res, topk_block):
    n, count = len(d), d[0].numel()
    edges = topk_blocks(count, topk_block)
    blocks = list(zip(edges[:-1], edges[1:]))
    pay = {}
    for r in range(n):
        for q, (a, b) in enumerate(blocks):
            if res is not None:  # topk_feedback: r += x, x = 0, out = encode(r), r -= decode(out)
                res[r][a:b] += d[r][a:b]
                pay[r, q] = C.enc(res[r][a:b], a, r, 0)
                res[r][a:b] -= C.dec(pay[r, q], b - a, a, r, 0)
            else:
                pay[r, q] = C.enc(d[r][a:b], a, r, 0)
        d[r].zero_()
    for r in range(n):
        for q, (a, b) in enumerate(blocks):  # block, then rank order
            for j in range(n):
                d[r][a:b] += C.dec(pay[j, q], b - a, a, j, 0)


def _randomk(C, d, res, seq):
    n, count = len(d), d[0].numel()
    k = sparse.k_for(parse(C.codec).ratio, count)
    pay, vals = [], []
    for r in range(n):
        if res is not None:
            d[r] += res[r]
        p = C.enc(d[r], 0, r, 0)
        if res is not None:
            res[r][:] = d[r] - C.dec(p, count, 0, r, 0)
        flags = int(p[4:8].clone().view(torch.int32)[0])
        vals.append(torch.cat([torch.tensor([float("nan") if flags else 0.0]), p[8:].clone().view(torch.float32)]))
        pay.append(p)
    summed = allreduce(vals, "sum", "auto", seq)  # the k values (+ flag) by an exact all-reduce
    for r in range(n):
        v = summed[r]
        p = torch.cat([pay[r][:4], torch.tensor([int(bool(torch.isnan(v[0])))], dtype=torch.int32).view(torch.uint8),
                       v[1:].contiguous().view(torch.uint8)])
        assert p.numel() == pay[r].numel() and k == v.numel() - 1
        d[r] = C.dec(p, count, 0, r, 0)


def compressed_allreduce(xs, codec, algorithm="auto", seed=0, rng_seq=0, seq=0, topk_block=TOPK_BLOCK, bucket=BUCKET,
                         stochastic=True, residuals=None):
    """(outputs, new residuals) of csrc/collective/compressed.cc compressed_allreduce on every rank."""
    d = [x.float().contiguous().reshape(-1).clone() for x in xs]
    res = None if residuals is None else [r.float().contiguous().reshape(-1).clone() for r in residuals]
    n, count = len(d), d[0].numel()
    C = _Codec(codec, seed, rng_seq, bucket, stochastic)
    if count == 0:
        return d, res
    if n == 1:  # one encode/decode round trip all the same
        if res is not None:
            d[0] += res[0]
        w = C.enc(d[0], 0, 0, GATHER_PHASE)
        if res is not None:
            res[0] = d[0] - C.dec(w, count, 0, 0, GATHER_PHASE)
        d[0] = C.dec(w, count, 0, 0, GATHER_PHASE)
    else:
        algo = choose_compressed(codec, algorithm)
        if algo == "ring":
            _ring(C, d, res)
        elif algo == "sra":
            _sra(C, d, res, gather=True)
        elif C.kind == "topk":
            _topk(C, d, res, topk_block)
        else:
            _randomk(C, d, res, seq)
    _drop_nonfinite(res)
    return d, res


def compressed_reduce_scatter(xs, codec, seed=0, rng_seq=0, bucket=BUCKET, stochastic=True, residuals=None):
    """(outputs, new residuals) of compressed_reduce_scatter (sra's first phase) on every rank:
    part r of rank r's output holds the sum; its other parts are its input, unchanged."""
    d = [x.float().contiguous().reshape(-1).clone() for x in xs]
    res = None if residuals is None else [r.float().contiguous().reshape(-1).clone() for r in residuals]
    n, count = len(d), d[0].numel()
    if n == 1 or count == 0:
        if res is not None:
            for r in range(n):
                d[r] += res[r]
                res[r].zero_()
        return d, res
    _sra(_Codec(codec, seed, rng_seq, bucket, stochastic), d, res, gather=False)
    _drop_nonfinite(res)
    return d, res
