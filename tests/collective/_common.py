"""Helpers shared by the sections of test_compressed.py: options, cross-rank gathers, bit
comparisons, top-k oracles, and the run context."""
from __future__ import annotations

import torch
import torch.distributed as dist

from tests import mp
from tests.collective._bounds import check_within, ring_bound, sra_bound

N = 20011  # odd: uneven parts for n = 2, 3, 4 and a partial last bucket in every part
NS = 4099  # small but >= min_numel (1024) for the sweeps
PREMUL = 0.37
DENSE = [("fp16", "stochastic"), ("bf16", "stochastic"), ("q8", "stochastic"), ("q8", "nearest"),
         ("q4", "stochastic"), ("q4", "nearest"), ("q2", "stochastic"), ("q2", "nearest"), ("q1", "stochastic")]
SPARSE = ["topk:0.01", "randomk:0.01"]
BASE = dict(codec="none", algorithm="auto", bucket_size=512, rounding="stochastic", min_numel=1024,
            error_feedback=False, seed=0, topk_block=1 << 20)


def setopt(group, **kw):
    import ringzip

    o = dict(BASE)
    o.update(kw)
    return ringzip.set_options(group=group, **o)


def algos_for(codec):
    return ["ring", "sra", "auto", "sparse"] if codec in SPARSE or codec.startswith(("topk", "randomk")) else ["ring", "sra", "auto"]


def gather_bits(t, ref, ws):
    """Every rank's tensor (as integer bit patterns), gathered over the gloo group."""
    v = t.detach().contiguous().reshape(-1)
    if v.is_floating_point():
        v = v.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[v.element_size()])
    if v.dtype == torch.int16:
        v = v.to(torch.int32)  # gloo has no int16; the widening is lossless
    outs = [torch.empty_like(v) for _ in range(ws)]
    dist.all_gather(outs, v, group=ref)
    return outs


def assert_identical(outs, what):
    for r, o in enumerate(outs[1:], 1):
        if not torch.equal(o, outs[0]):
            raise AssertionError(f"{what}: rank {r}'s result differs from rank 0's in {int((o != outs[0]).sum())}/"
                                 f"{o.numel()} elements (replicas must be bitwise identical)")


def same_bits(a, b, what):
    if a.dtype != b.dtype or a.shape != b.shape:
        raise AssertionError(f"{what}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}")
    va, vb = a.contiguous().reshape(-1), b.contiguous().reshape(-1)
    if va.is_floating_point():
        va = va.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[va.element_size()])
        vb = vb.view(va.dtype)
    if not torch.equal(va, vb):
        ne = (va != vb).nonzero()
        i = int(ne[0])
        raise AssertionError(f"{what}: {ne.numel()}/{va.numel()} elements differ; first at {i}: "
                             f"{a.reshape(-1)[i].item()!r} vs {b.reshape(-1)[i].item()!r}")


def calls(group, codec):
    import ringzip

    return ringzip.stats(group).get(codec, {}).get("calls", 0)


TOPK_BLOCK = 1 << 20  # ringzip.Options().topk_block
MAX_TOPK_BLOCKS = 4096  # csrc/collective/compressed/layout.h


def topk_blocks(n, block=TOPK_BLOCK):
    """Block boundaries of a top-k all-reduce of n elements (Options.topk_block; 0: one block;
    never more than MAX_TOPK_BLOCKS blocks)."""
    b = min(block, n) if block else n
    b = max(b, -(-n // MAX_TOPK_BLOCKS), 1)
    return list(range(0, n, b)) + [n]


def topk_kept(xs64, ratio, begin=None, block=TOPK_BLOCK):
    """(sum of the entries top-k keeps, sum of |dropped entries|) over ranks: all-reduce, top-k
    per block of ``block`` elements; with ``begin``: top-k per part and each part's owner exact
    (reduce-scatter)."""
    from ringzip.reference import sparse

    kept = torch.zeros_like(xs64[0])
    dropped = torch.zeros_like(xs64[0])
    for r, x in enumerate(xs64):
        mask = torch.zeros(x.numel(), dtype=torch.bool)
        edges = topk_blocks(x.numel(), block) if begin is None else begin
        parts = list(zip(edges[:-1], edges[1:]))
        for lo, hi in parts:
            seg = x[lo:hi].float()
            k = sparse.k_for(ratio, seg.numel())
            if k:
                mask[lo + sparse.topk_indices(seg, k)] = True
        if begin is not None:
            mask[begin[r]:begin[r + 1]] = True
        kept += torch.where(mask, x, 0.0)
        dropped += torch.where(mask, 0.0, x.abs())
    return kept, dropped


class T:  # per-launch context
    def __init__(self, ctx):
        self.rank, self.ws = ctx.rank, ctx.world_size
        self.chk = mp.Checker(ctx.rank)
        self.extra: dict = {}


def dense_bound(algo, codec, xs64, rounding):
    return ring_bound(codec, xs64, rounding=rounding) if algo == "ring" else sra_bound(codec, xs64, rounding=rounding)


def check_sparse(codec, out, xs64, what, block=TOPK_BLOCK):
    ratio = float(codec.split(":")[1])
    S = sum(xs64)
    slack = (len(xs64) + 3) * 2.0**-23 * sum(x.abs() for x in xs64)
    o = out.double().reshape(-1)
    if codec.startswith("topk"):
        kept, dropped = topk_kept(xs64, ratio, block=block)
        check_within(o, S, dropped + slack, what + " [vs exact sum: error <= dropped elements]")
        check_within(o, kept, slack, what + " [vs sum of the entries top-k keeps]")
    else:
        from ringzip.reference import sparse

        k = sparse.k_for(ratio, o.numel())
        supp = o != 0
        assert int(supp.sum()) == k, f"{what}: {int(supp.sum())} non-zero outputs, expected k = {k}"
        check_within(o[supp], S[supp], slack[supp], what + " [exact sum on the sampled coordinates]")
