"""Sections of test_compressed.py about the values: error bounds per codec x algorithm, scaling,
dtypes, non-contiguous and coalesced inputs, reduce-scatter, edge sizes, unbiasedness, async
calls, subgroups. Each section runs inside one launch and records named cases."""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
from ringzip.reference import sparse

from tests.collective._bounds import QBITS, check_within, even_parts, gen, ring_bound, sra_bound
from tests.collective._common import (
    DENSE, N, NS, PREMUL, SPARSE, algos_for, assert_identical, calls, check_sparse, dense_bound, gather_bits,
    same_bits, setopt, topk_blocks, topk_kept,
)


def section_bounds(t, g, ref):
    import ringzip

    rank, ws, chk = t.rank, t.ws, t.chk
    xs = [gen("bounds", r, N) for r in range(ws)]
    xs64 = [x.double() for x in xs]
    S = sum(xs64)
    for codec, rnd in DENSE:
        det = {}
        for algo in ("ring", "sra", "auto"):
            name = f"bounds/{codec}/{rnd}/{algo}"
            with chk.case(name):
                setopt(g, codec=codec, algorithm=algo, rounding=rnd)
                ringzip.stats(g, reset=True)
                out = xs[rank].clone()
                dist.all_reduce(out, group=g)
                outs = gather_bits(out, ref, ws)
                det[algo] = out
                assert_identical(outs, name)
                assert calls(g, codec) == 1, f"{name}: stats show {calls(g, codec)} compressed calls, expected 1"
                check_within(out, S, dense_bound(algo, codec, xs64, rnd), name)
                if codec in QBITS and rnd == "stochastic" and algo != "auto":
                    t.extra[f"nerr/{codec}/{algo}"] = ((out.double() - S).norm() / S.norm()).item()
        if rnd == "nearest" and len(det) == 3:
            with chk.case(f"bounds/{codec}/nearest/auto_is_sra"):
                same_bits(det["auto"], det["sra"], f"{codec} nearest: auto vs sra")
    for codec in SPARSE:
        for algo in algos_for(codec):
            name = f"bounds/{codec}/{algo}"
            with chk.case(name):
                setopt(g, codec=codec, algorithm=algo)
                ringzip.stats(g, reset=True)
                out = xs[rank].clone()
                dist.all_reduce(out, group=g)
                outs = gather_bits(out, ref, ws)
                assert_identical(outs, name)
                assert calls(g, codec) == 1, f"{name}: stats show {calls(g, codec)} compressed calls, expected 1"
                check_sparse(codec, out, xs64, name)


# --------------------------------------------------------------------------------------------
# AVG / PREMUL_SUM, dtypes, non-contiguous, coalesced


def section_scaling(t, g, ref):
    rank, ws, chk = t.rank, t.ws, t.chk
    xs = [gen("scaling", r, N) for r in range(ws)]
    for opname in ("AVG", "PREMUL_SUM"):
        pre, post = (1.0, 1.0 / ws) if opname == "AVG" else (PREMUL, 1.0)
        op = dist.ReduceOp.AVG if opname == "AVG" else dist._make_nccl_premul_sum(PREMUL)
        xs64 = [x.double() * pre for x in xs]
        S = sum(xs64) * post
        for codec, algo, rnd in [("q8", "sra", "stochastic"), ("q8", "ring", "stochastic"), ("q4", "sra", "nearest"),
                                 ("fp16", "sra", "stochastic"), ("topk:0.01", "sparse", "stochastic")]:
            name = f"scaling/{opname}/{codec}/{algo}/{rnd}"
            with chk.case(name):
                setopt(g, codec=codec, algorithm=algo, rounding=rnd)
                out = xs[rank].clone()
                dist.all_reduce(out, op=op, group=g)
                outs = gather_bits(out, ref, ws)
                assert_identical(outs, name)
                if codec.startswith("topk"):
                    kept, dropped = topk_kept(xs64, 0.01)
                    b = (dropped + (ws + 3) * 2.0**-23 * sum(x.abs() for x in xs64)) * post
                else:
                    b = dense_bound(algo, codec, xs64, rnd) * post
                check_within(out, S, b + 2.0**-23 * S.abs(), name)


def section_dtypes(t, g, ref):
    rank, ws, chk = t.rank, t.ws, t.chk
    for dt, u, cdc in ((torch.float16, 2.0**-11, "fp16"), (torch.bfloat16, 2.0**-8, "bf16")):
        xs = [gen(f"dtype/{dt}", r, N, dtype=dt) for r in range(ws)]
        xs64 = [x.double() for x in xs]
        S = sum(xs64)
        for codec, algo in (("q8", "sra"), ("q4", "ring"), (cdc, "sra"), ("q2", "auto"), ("topk:0.01", "sparse")):
            name = f"dtypes/{str(dt)[6:]}/{codec}/{algo}"
            with chk.case(name):
                setopt(g, codec=codec, algorithm=algo)
                before = calls(g, codec)
                out = xs[rank].clone()
                dist.all_reduce(out, group=g)
                outs = gather_bits(out, ref, ws)
                assert out.dtype == dt, f"{name}: output dtype {out.dtype}"
                assert_identical(outs, name)
                assert calls(g, codec) == before + 1, f"{name}: {dt} input was not compressed"
                if codec.startswith("topk"):
                    kept, dropped = topk_kept(xs64, 0.01)
                    b = dropped + (ws + 3) * 2.0**-23 * sum(x.abs() for x in xs64)
                else:
                    b = dense_bound(algo, codec, xs64, "stochastic")
                # + rounding of the float32 result to the output dtype (and its subnormal spacing)
                check_within(out, S, b + u * (S.abs() + b) + 2.0**-24, name)


def section_noncontig(t, g, ref):
    rank, ws, chk = t.rank, t.ws, t.chk
    base = gen("noncontig", rank, (157, 256))  # [:, ::2] -> 157 x 128 = 20096 elements
    base_t = gen("noncontig_t", rank, (128, 157))
    xs64 = [gen("noncontig", r, (157, 256))[:, ::2].reshape(-1).double() for r in range(ws)]
    xs64_t = [gen("noncontig_t", r, (128, 157)).t().reshape(-1).double() for r in range(ws)]
    for codec, algo, rnd in (("q8", "sra", "nearest"), ("q4", "ring", "nearest"), ("topk:0.01", "sparse", "nearest"),
                             ("q8", "sra", "stochastic")):
        for kind in ("strided", "transposed"):
            name = f"noncontig/{kind}/{codec}/{algo}/{rnd}"
            with chk.case(name):
                setopt(g, codec=codec, algorithm=algo, rounding=rnd)
                if kind == "strided":
                    buf = base.clone()
                    view = buf[:, ::2]
                    src, refx = base[:, ::2], xs64
                else:
                    buf = base_t.clone()
                    view = buf.t()
                    src, refx = base_t.t(), xs64_t
                assert not view.is_contiguous()
                dist.all_reduce(view, group=g)
                cont = src.contiguous()
                dist.all_reduce(cont, group=g)
                outs = gather_bits(view, ref, ws)
                assert_identical(outs, name)
                if kind == "strided":
                    same_bits(buf[:, 1::2], base[:, 1::2], f"{name}: elements outside the view changed")
                if codec.startswith("topk"):
                    kept, dropped = topk_kept(refx, 0.01)
                    b = dropped + (ws + 3) * 2.0**-23 * sum(x.abs() for x in refx)
                else:
                    b = dense_bound(algo, codec, refx, rnd)
                check_within(view.reshape(-1), sum(refx), b, name)
                if rnd == "nearest":  # deterministic: must equal the contiguous call bit for bit
                    same_bits(view.contiguous(), cont, f"{name}: non-contiguous vs contiguous input")


def section_coalesced(t, g, ref):
    rank, ws, chk = t.rank, t.ws, t.chk
    shapes = [(10007,), (50, 201), (5000,)]
    xs = [[gen(f"coalesced/{i}", r, s) for i, s in enumerate(shapes)] for r in range(ws)]
    flat64 = [torch.cat([x.reshape(-1) for x in xr]).double() for xr in xs]
    for codec, algo in (("q8", "sra"), ("q4", "ring"), ("topk:0.01", "sparse")):
        name = f"coalesced/{codec}/{algo}"
        with chk.case(name):
            setopt(g, codec=codec, algorithm=algo)
            before = calls(g, codec)
            outs = [x.clone() for x in xs[rank]]
            dist.all_reduce_coalesced(outs, group=g)
            flat = torch.cat([o.reshape(-1) for o in outs])
            assert_identical(gather_bits(flat, ref, ws), name)
            assert calls(g, codec) == before + 1, f"{name}: not compressed as one call"
            for o, s in zip(outs, shapes):
                assert tuple(o.shape) == s
            if codec.startswith("topk"):
                kept, dropped = topk_kept(flat64, 0.01)
                b = dropped + (ws + 3) * 2.0**-23 * sum(x.abs() for x in flat64)
            else:
                b = dense_bound(algo, codec, flat64, "stochastic")
            check_within(flat, sum(flat64), b, name)


# --------------------------------------------------------------------------------------------
# reduce-scatter


def section_reduce_scatter(t, g, ref):
    rank, ws, chk = t.rank, t.ws, t.chk
    m = 5003
    xs = [gen("rs", r, ws * m) for r in range(ws)]
    xs64 = [x.double() for x in xs]
    S = sum(xs64)
    begin = even_parts(ws * m, ws)
    mine = slice(begin[rank], begin[rank + 1])
    for opname in ("SUM", "AVG"):
        post = 1.0 / ws if opname == "AVG" else 1.0
        op = dist.ReduceOp.AVG if opname == "AVG" else dist.ReduceOp.SUM
        for codec in ("q8", "q4", "q1", "fp16", "topk:0.01"):
            for api in ("reduce_scatter_tensor", "reduce_scatter"):
                name = f"reduce_scatter/{api}/{opname}/{codec}"
                with chk.case(name):
                    setopt(g, codec=codec, algorithm="auto")
                    before = calls(g, codec)
                    out = torch.empty(m)
                    inp = xs[rank].clone()
                    if api == "reduce_scatter_tensor":
                        dist.reduce_scatter_tensor(out, inp, op=op, group=g)
                    else:
                        dist.reduce_scatter(out, list(inp.chunk(ws)), op=op, group=g)
                    same_bits(inp, xs[rank], f"{name}: the input was modified")
                    assert calls(g, codec) == before + 1, f"{name}: not compressed"
                    slack = (ws + 3) * 2.0**-23 * sum(x.abs() for x in xs64)[mine]
                    if codec.startswith("topk"):  # top-k of each part sent to its owner; own part exact
                        kept, dropped = topk_kept(xs64, 0.01, begin)
                        check_within(out, kept[mine] * post, slack * post + 2.0**-23 * S[mine].abs(),
                                     name + " [vs the kept entries]")
                        b = dropped[mine] + slack
                    else:
                        b = sra_bound(codec, xs64, phase2=False)[mine]
                    check_within(out, S[mine] * post, b * post + 2.0**-23 * S[mine].abs(), name)


# --------------------------------------------------------------------------------------------
# edge sizes, bucket sizes, large top-k, async, subgroups


def section_edges(t, g, ref):
    rank, ws, chk = t.rank, t.ws, t.chk
    # tiny tensors with min_numel 0: parts of 0 or 1 element, sparse k = 1
    for codec in ["fp16", "q8", "q2", "q1", "topk:0.01", "randomk:0.5"]:
        for algo in algos_for(codec):
            for n in sorted({0, 1, ws - 1, ws + 1, 7, 513}):
                name = f"edges/tiny/{codec}/{algo}/n={n}"
                with chk.case(name):
                    setopt(g, codec=codec, algorithm=algo, min_numel=0)
                    xs64 = [gen(name, r, n).double() for r in range(ws)]
                    x = gen(name, rank, n)
                    dist.all_reduce(x, group=g)
                    outs = gather_bits(x, ref, ws)
                    assert_identical(outs, name)
                    assert x.shape == (n,)
                    if n == 0:
                        continue
                    if codec.startswith(("topk", "randomk")):
                        if codec.startswith("topk"):
                            check_sparse(codec, x, xs64, name)
                        else:
                            S = sum(xs64)
                            supp = x.double() != 0
                            check_within(x[supp], S[supp], (ws + 3) * 2.0**-23 * sum(v.abs() for v in xs64)[supp], name)
                    else:
                        check_within(x, sum(xs64), dense_bound(algo, codec, xs64, "stochastic"), name)
    # bucket sizes: smaller than, equal to, larger than a part
    xs = [gen("buckets", r, N) for r in range(ws)]
    xs64 = [x.double() for x in xs]
    for bucket in (8, 64, 4096, 32768):
        for codec, algo in (("q4", "sra"), ("q4", "ring"), ("q1", "sra")):
            name = f"edges/bucket={bucket}/{codec}/{algo}"
            with chk.case(name):
                setopt(g, codec=codec, algorithm=algo, bucket_size=bucket)
                x = xs[rank].clone()
                dist.all_reduce(x, group=g)
                outs = gather_bits(x, ref, ws)
                assert_identical(outs, name)
                b = ring_bound(codec, xs64, bucket=bucket) if algo == "ring" else sra_bound(codec, xs64, bucket=bucket)
                check_within(x, sum(xs64), b, name)
    # top-k above 2^20 elements (threshold estimation path of the selection), random-k likewise
    big = (1 << 20) + 4099
    xs64 = [gen("bigtopk", r, big).double() for r in range(ws)]
    for codec in ("topk:0.01", "randomk:0.01"):
        name = f"edges/large/{codec}/n={big}"
        with chk.case(name):
            setopt(g, codec=codec, algorithm="sparse")
            x = xs64[rank].float()
            dist.all_reduce(x, group=g)
            outs = gather_bits(x, ref, ws)
            assert_identical(outs, name)
            check_sparse(codec, x, xs64, name)
    # top-k blocks: the whole tensor (0), several (the last one shorter), and a block size that
    # would give more than 4096 blocks (enlarged to ceil(n / 4096) elements)
    xs64 = [gen("topkblock", r, N).double() for r in range(ws)]
    for block in (0, 4096, 1):
        name = f"edges/topk_block={block}"
        with chk.case(name):
            setopt(g, codec="topk:0.01", algorithm="sparse", topk_block=block)
            x = xs64[rank].float()
            dist.all_reduce(x, group=g)
            outs = gather_bits(x, ref, ws)
            assert_identical(outs, name)
            check_sparse("topk:0.01", x, xs64, name, block=block)
            edges = topk_blocks(N, block)
            k = sum(sparse.k_for(0.01, hi - lo) for lo, hi in zip(edges[:-1], edges[1:]))
            assert int((x != 0).sum()) <= ws * k, f"{name}: {int((x != 0).sum())} non-zeros > {ws} x {k}"
    # unbiasedness through the whole collective (DESIGN §3.4): the mean of T calls on the same
    # inputs converges to the exact sum, ||mean - S|| ~ ||single error|| / sqrt(T) -- only if the
    # rounding noise is zero-mean AND re-drawn every call (RNG keyed by the sequence number).
    # randomk: E[out] = (k/n) S, so (n/k) * mean -> S likewise. Nearest rounding (biased,
    # deterministic) would give a ratio of 1.
    calls_t = 40
    xs64 = [gen("unbiased", r, NS).double() for r in range(ws)]
    S = sum(xs64)
    for codec, algo, scale in (("q2", "sra", 1.0), ("q2", "ring", 1.0), ("q4", "sra", 1.0), ("randomk:0.5", "sparse", 2.0)):
        name = f"edges/unbiased/{codec}/{algo}"
        with chk.case(name):
            setopt(g, codec=codec, algorithm=algo)
            acc = torch.zeros(NS, dtype=torch.float64)
            single = []
            for _ in range(calls_t):
                x = xs64[rank].float()
                dist.all_reduce(x, group=g)
                acc += x.double() * scale
                single.append(((x.double() * scale - S).norm() / S.norm()).item())
            r = ((acc / calls_t - S).norm() / S.norm()).item() / (sum(single) / calls_t)
            t.extra[f"unbiased/{codec}/{algo}"] = r
            assert r < 2.5 / math.sqrt(calls_t), (
                f"{name}: error of the mean of {calls_t} calls / error of one call = {r:.3f}, expected ~{1 / math.sqrt(calls_t):.3f}"
                " (biased rounding, or the same random draw every call)")
    # async: options are taken when a call is issued; two calls in flight
    xs = [gen("async", r, N) for r in range(ws)]
    xs64 = [x.double() for x in xs]
    with chk.case("edges/async_in_flight"):
        setopt(g, codec="q8", algorithm="ring")
        a, b, c = xs[rank].clone(), xs[rank].clone(), xs[rank].clone()
        wa = dist.all_reduce(a, group=g, async_op=True)
        setopt(g, codec="topk:0.01", algorithm="sparse")
        wb = dist.all_reduce(b, group=g, async_op=True)
        setopt(g, codec="q4", algorithm="sra")
        wc = dist.all_reduce(c, group=g, async_op=True)
        wc.wait()
        wb.wait()
        wa.wait()
        outs = [gather_bits(v, ref, ws) for v in (a, b, c)]
        for o, what in zip(outs, "abc"):
            assert_identical(o, f"async {what}")
        check_within(a, sum(xs64), ring_bound("q8", xs64), "async q8 ring (options at issue time)")
        check_sparse("topk:0.01", b, xs64, "async topk")
        check_within(c, sum(xs64), sra_bound("q4", xs64), "async q4 sra")
    # a ringzip subgroup of ranks {0, ws-1}: RNG streams and owners use group ranks
    members = [0, ws - 1]
    sub = dist.new_group(ranks=members, backend="ringzip", pg_options=None)
    for codec, algo in (("q8", "sra"), ("q4", "ring"), ("topk:0.01", "sparse")):
        name = f"edges/subgroup/{codec}/{algo}"
        with chk.case(name):
            xs64 = [gen(name, r, N).double() for r in members]
            x = gen(name, rank, N)
            if rank in members:
                setopt(sub, codec=codec, algorithm=algo)
                dist.all_reduce(x, group=sub)
            outs = gather_bits(x, ref, ws)
            if rank in members:
                assert_identical([outs[m] for m in members], name)
                if codec.startswith("topk"):
                    check_sparse(codec, x, xs64, name)
                else:
                    check_within(x, sum(xs64), dense_bound(algo, codec, xs64, "stochastic"), name)
