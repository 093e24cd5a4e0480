"""ringzip collectives vs gloo, on 1, 2, 3 and 4 ranks (lossless mode must equal gloo).

Each world size is ONE launch (see ``tests/mp.py``): every rank creates the default ringzip
group, a gloo group over the same ranks, and ringzip groups forcing each algorithm, then runs the
whole collective x dtype x op x size matrix on identical deterministic inputs on both backends,
recording every failing case by name. The pytest tests below report that launch section by
section.

Comparison rule (details in ``tests/backend/_common.py``):
  * integers, bool, and all data movement (broadcast, gathers, scatter, all-to-all, p2p) and
    MIN/MAX: bit-for-bit equal to gloo;
  * float SUM/PRODUCT on small integer-valued inputs (exact in any order): bit-for-bit equal;
  * float SUM of random data, AVG, PREMUL_SUM: every element within
    (n+1) * (u + 2^-53) * sum_r |f x_r| of the fp64 reference computed through gloo (gloo SUM of the fp64
    inputs, times 1/n for AVG or the PREMUL_SUM factor); gloo's result must meet the same bound;
    all ranks must hold bitwise-identical floating all-reduce results.
"""
from __future__ import annotations

import datetime
import math

import pytest
import torch
import torch.distributed as dist

from tests import mp
from tests.backend._common import (
    ALL_DTYPES, FLOATS, INTS, dname, exact, gen, init_world, backend_options, make_op, op_factor,
    same, valid_ops, within_bound, work_exception,
)

BACKEND = "ringzip"
WORLD_SIZES = [1, 2, 3, 4]
ALGORITHMS = ["ring", "rd", "direct", "star", "sra", "hd", "tree"]
BIG = 300_000


# --------------------------------------------------------------------------------------------
# reduction helpers: out is ringzip's result, run_ref(tensor, op) runs the same collective on gloo


def check_reduction(chk_what, out, x, opname, kind, run_ref, ws, *, compare=True):
    """Compare ``out`` (ringzip) with gloo per the module rule. ``x`` is this rank's input.

    All gloo reference collectives are issued before any comparison, and on every rank
    (``compare=False`` on ranks without an output), so a failed check cannot desynchronize ranks.
    """
    if exact(opname, kind) or not x.dtype.is_floating_point:
        ref = run_ref(x.clone(), make_op(opname))
        if compare:
            same(out, ref, chk_what)
        return
    f = op_factor(opname, ws)
    ref64 = run_ref(x.double() * f, dist.ReduceOp.SUM)
    abs64 = run_ref((x.double() * f).abs(), dist.ReduceOp.SUM)
    g = run_ref(x.clone(), make_op(opname)) if opname in ("SUM", "AVG") else None
    if not compare:
        return
    within_bound(out, ref64, abs64, ws, chk_what)
    if g is not None:  # gloo itself meets the bound (validates the rule)
        within_bound(g, ref64, abs64, ws, chk_what + " [gloo reference itself]")


def all_reduce_case(chk, name, group, ref, x, opname, kind, ws, crossrank=False):
    with chk.case(name):
        out = x.clone()
        ret = dist.all_reduce(out, op=make_op(opname), group=group)
        assert ret is None, f"all_reduce returned {ret!r} without async_op"

        def run_ref(t, op):
            dist.all_reduce(t, op=op, group=ref)
            return t

        check_reduction(name, out, x, opname, kind, run_ref, ws)
        if crossrank and out.numel():
            outs = [torch.empty_like(out) for _ in range(ws)]
            dist.all_gather(outs, out, group=ref)
            for r, o in enumerate(outs):
                same(o, outs[0], f"{name}: rank {r} result differs from rank 0 (replicas must be identical)")


def sizes_for(ws):
    return sorted({0, 1, max(ws - 1, 1), 7, 1000})


# --------------------------------------------------------------------------------------------


def section_all_reduce(chk, g, ref, rank, ws):
    for dt in ALL_DTYPES:
        for opname, kind in valid_ops(dt):
            for n in sizes_for(ws):
                key = f"all_reduce/{opname}/{dname(dt)}/{kind}/n={n}"
                x = gen(key, rank, dt, n, kind)
                all_reduce_case(chk, key, g, ref, x, opname, kind, ws, crossrank=dt.is_floating_point)
    # multi-dimensional
    x = gen("ar2d", rank, torch.float32, (3, 5, 2))
    all_reduce_case(chk, "all_reduce/SUM/float32/shape=3x5x2", g, ref, x, "SUM", "int", ws)
    # scalar (0-dim)
    x = gen("ar0d", rank, torch.int64, (), "int")
    all_reduce_case(chk, "all_reduce/SUM/int64/0-dim", g, ref, x, "SUM", "int", ws)


def section_nonfinite(chk, g, ref, rank, ws):
    for dt in FLOATS:
        for special in (float("nan"), float("inf"), float("-inf")):
            name = f"nonfinite/all_reduce/SUM/{dname(dt)}/{special}"
            with chk.case(name):
                x = gen(name, rank, dt, 64)
                if rank == ws - 1:
                    x[5] = special
                out, r = x.clone(), x.clone()
                dist.all_reduce(out, group=g)
                dist.all_reduce(r, group=ref)
                same(out, r, name)
                assert not math.isfinite(out[5].item()), f"{name}: non-finite input did not reach the output"


def reduce_scatter_tensor_case(name, grp, ref, x, opname, kind, ws):
    """reduce_scatter_tensor of x over grp against the same call over the reference group; the
    output starts filled with 7s so an untouched output cannot pass."""
    n = x.numel() // ws
    out = torch.full((n,), 7).to(x.dtype)
    dist.reduce_scatter_tensor(out, x.clone(), op=make_op(opname), group=grp)

    def run_ref(t, op):
        o = torch.empty(n, dtype=t.dtype)
        dist.reduce_scatter_tensor(o, t, op=op, group=ref)
        return o

    check_reduction(name, out, x, opname, kind, run_ref, ws)


def section_algorithms(chk, groups, ref, rank, ws):
    """Same results whichever algorithm is forced, around size thresholds."""
    sizes = sorted({1, max(ws - 1, 1), ws + 1, 1000, 4097, 65537, BIG})
    cases = [(torch.float32, "SUM", "int"), (torch.float32, "SUM", "normal"), (torch.int64, "SUM", "int"),
             (torch.float64, "AVG", "normal"), (torch.bfloat16, "SUM", "normal"), (torch.float16, "MAX", "normal"),
             (torch.int32, "BXOR", "bits"), (torch.float32, "PREMUL_SUM", "normal")]
    for algo, grp in groups.items():
        for n in sizes:
            for dt, opname, kind in cases:
                if n == BIG and dt not in (torch.float32, torch.int64):
                    continue
                key = f"algorithms/{algo}/all_reduce/{opname}/{dname(dt)}/{kind}/n={n}"
                x = gen(key.replace(algo, "x"), rank, dt, n, kind)
                all_reduce_case(chk, key, grp, ref, x, opname, kind, ws, crossrank=dt.is_floating_point)
            for dt, opname, kind in [(torch.float32, "SUM", "normal"), (torch.int32, "MAX", "bits")]:
                key = f"algorithms/{algo}/reduce_scatter_tensor/{opname}/{dname(dt)}/chunk={n}"
                if n == BIG:
                    continue
                with chk.case(key):
                    reduce_scatter_tensor_case(key, grp, ref, gen(key, rank, dt, n * ws, kind), opname, kind, ws)


def section_noncontig(chk, g, ref, rank, ws):
    for dt in (torch.float32, torch.int32, torch.bfloat16, torch.bool):
        name = f"noncontig/all_reduce/SUM/{dname(dt)}"
        with chk.case(name):
            base = gen(name, rank, dt, (6, 10))
            view = base[:, ::2]  # non-contiguous
            assert not view.is_contiguous()
            untouched = base[:, 1::2].clone()
            dist.all_reduce(view, group=g)
            # expectation from a contiguous copy (gloo itself mishandles strided tensors: it
            # reduces numel() contiguous elements from data_ptr(), touching memory outside the view)
            r = gen(name, rank, dt, (6, 10))[:, ::2].contiguous()
            dist.all_reduce(r, group=ref)
            same(view, r, name)
            same(base[:, 1::2], untouched, name + ": elements outside the view were modified")
        name = f"noncontig/broadcast/{dname(dt)}"
        with chk.case(name):
            base = gen(name, rank, dt, (4, 6))
            view = base.t()
            untouched = base.clone()
            dist.broadcast(view, src=ws - 1, group=g)
            same(base, gen(name, ws - 1, dt, (4, 6)), name)
            del untouched
        name = f"noncontig/all_gather/{dname(dt)}"
        with chk.case(name):
            x = gen(name, rank, dt, (5, 4)).t()
            outs = [torch.zeros(4, 5, dtype=dt) for _ in range(ws)]
            dist.all_gather(outs, x, group=g)
            for r in range(ws):
                same(outs[r], gen(name, r, dt, (5, 4)).t().contiguous(), f"{name}[{r}]")


def section_all_reduce_coalesced(chk, g, ref, rank, ws):
    for dt, opname, kind in [(torch.float32, "SUM", "int"), (torch.int64, "MAX", "bits"), (torch.float64, "SUM", "normal"),
                             (torch.bfloat16, "MIN", "normal")]:
        name = f"all_reduce_coalesced/{opname}/{dname(dt)}/{kind}"
        with chk.case(name):
            xs = [gen(f"{name}{i}", rank, dt, n, kind) for i, n in enumerate([5, 0, 1000, 1])]
            outs = [x.clone() for x in xs]
            refs = [x.clone() for x in xs]
            dist.all_reduce_coalesced(outs, op=make_op(opname), group=g)
            if exact(opname, kind):
                dist.all_reduce_coalesced(refs, op=make_op(opname), group=ref)
                for i, (o, r) in enumerate(zip(outs, refs)):
                    same(o, r, f"{name}[{i}]")
            else:
                for i, (o, x) in enumerate(zip(outs, xs)):
                    r64, a64 = x.double(), x.double().abs()
                    dist.all_reduce(r64, group=ref)
                    dist.all_reduce(a64, group=ref)
                    within_bound(o, r64, a64, ws, f"{name}[{i}]")


def section_broadcast(chk, g, ref, rank, ws):
    for dt in ALL_DTYPES:
        for n in (0, 1, 1000):
            for src in range(ws):
                name = f"broadcast/{dname(dt)}/n={n}/src={src}"
                with chk.case(name):
                    x = gen(name, rank, dt, n, "bits")
                    r = x.clone()
                    dist.broadcast(x, src=src, group=g)
                    dist.broadcast(r, src=src, group=ref)
                    same(x, r, name)
                    same(x, gen(name, src, dt, n, "bits"), name + " (vs root input)")
    name = f"broadcast/float32/n={BIG}"
    with chk.case(name):
        x = gen(name, rank, torch.float32, BIG, "normal")
        dist.broadcast(x, src=ws - 1, group=g)
        same(x, gen(name, ws - 1, torch.float32, BIG, "normal"), name)


def section_reduce(chk, g, ref, rank, ws):
    plan = [(dt, o, k) for dt in ALL_DTYPES for (o, k) in valid_ops(dt)]
    for dt, opname, kind in plan:
        for n in (1, 1000):
            for dst in range(ws):
                name = f"reduce/{opname}/{dname(dt)}/{kind}/n={n}/dst={dst}"
                with chk.case(name):
                    x = gen(name, rank, dt, n, kind)
                    out = x.clone()
                    dist.reduce(out, dst=dst, op=make_op(opname), group=g)

                    def run_ref(t, op):
                        dist.reduce(t, dst=dst, op=op, group=ref)
                        return t

                    check_reduction(name, out, x, opname, kind, run_ref, ws, compare=rank == dst)


def section_all_gather(chk, g, ref, rank, ws):
    for dt in ALL_DTYPES:
        for n in (0, 1, 1000):
            name = f"all_gather/{dname(dt)}/n={n}"
            with chk.case(name):
                x = gen(name, rank, dt, n, "bits")
                outs = [torch.zeros(n, dtype=dt) for _ in range(ws)]
                dist.all_gather(outs, x, group=g)
                for r in range(ws):
                    same(outs[r], gen(name, r, dt, n, "bits"), f"{name}[{r}]")
            name = f"all_gather_into_tensor/{dname(dt)}/n={n}"
            with chk.case(name):
                x = gen(name, rank, dt, n, "bits")
                out = torch.zeros(ws * n, dtype=dt)
                dist.all_gather_into_tensor(out, x, group=g)
                r_ = torch.zeros(ws * n, dtype=dt)
                dist.all_gather_into_tensor(r_, x, group=ref)
                same(out, r_, name)
                same(out, torch.cat([gen(name, r, dt, n, "bits") for r in range(ws)]), name + " (vs inputs)")
    name = f"all_gather_into_tensor/float32/n={BIG // ws}"
    with chk.case(name):
        x = gen(name, rank, torch.float32, BIG // ws, "normal")
        out = torch.zeros(ws * (BIG // ws))
        dist.all_gather_into_tensor(out, x, group=g)
        same(out, torch.cat([gen(name, r, torch.float32, BIG // ws, "normal") for r in range(ws)]), name)
    for dt in (torch.float32, torch.int64, torch.bool):
        name = f"all_gather_coalesced/{dname(dt)}"
        with chk.case(name):
            xs = [gen(f"{name}{i}", rank, dt, n, "bits") for i, n in enumerate([3, 0, 100])]
            outs = [[torch.zeros_like(x) for x in xs] for _ in range(ws)]
            dist.all_gather_coalesced(outs, xs, group=g)
            for r in range(ws):
                for i, n in enumerate([3, 0, 100]):
                    same(outs[r][i], gen(f"{name}{i}", r, dt, n, "bits"), f"{name}[{r}][{i}]")
    name = "coalescing_manager/all_gather_into_tensor"
    with chk.case(name):
        xs = [gen(f"{name}{i}", rank, torch.float32, n) for i, n in enumerate([4, 1, 50])]
        outs = [torch.zeros(ws * x.numel()) for x in xs]
        with dist._coalescing_manager(group=g, async_ops=False):
            for o, x in zip(outs, xs):
                dist.all_gather_into_tensor(o, x, group=g)
        for i, n in enumerate([4, 1, 50]):
            same(outs[i], torch.cat([gen(f"{name}{i}", r, torch.float32, n) for r in range(ws)]), f"{name}[{i}]")
    name = "coalescing_manager/all_reduce"
    with chk.case(name):
        xs = [gen(f"{name}{i}", rank, torch.float32, n) for i, n in enumerate([4, 1, 50])]
        outs = [x.clone() for x in xs]
        with dist._coalescing_manager(group=g, async_ops=True) as cm:
            for o in outs:
                dist.all_reduce(o, group=g)
        cm.wait()
        for i, x in enumerate(xs):
            r_ = x.clone()
            dist.all_reduce(r_, group=ref)
            same(outs[i], r_, f"{name}[{i}]")


def section_gather_scatter(chk, g, ref, rank, ws):
    for dt in ALL_DTYPES:
        for n in (0, 1, 1000):
            for root in range(ws):
                name = f"gather/{dname(dt)}/n={n}/dst={root}"
                with chk.case(name):
                    x = gen(name, rank, dt, n, "bits")
                    outs = [torch.zeros(n, dtype=dt) for _ in range(ws)] if rank == root else None
                    dist.gather(x, outs, dst=root, group=g)
                    if rank == root:
                        for r in range(ws):
                            same(outs[r], gen(name, r, dt, n, "bits"), f"{name}[{r}]")
                name = f"scatter/{dname(dt)}/n={n}/src={root}"
                with chk.case(name):
                    ins = [gen(f"{name}|{r}", root, dt, n, "bits") for r in range(ws)] if rank == root else None
                    out = torch.zeros(n, dtype=dt)
                    dist.scatter(out, ins, src=root, group=g)
                    same(out, gen(f"{name}|{rank}", root, dt, n, "bits"), name)


def section_reduce_scatter(chk, g, ref, rank, ws):
    for dt in ALL_DTYPES:
        for opname, kind in valid_ops(dt):
            if opname in ("BAND", "BOR") and dt != torch.int32:
                continue
            for n in (0, 1, 333):
                name = f"reduce_scatter_tensor/{opname}/{dname(dt)}/{kind}/chunk={n}"
                with chk.case(name):
                    reduce_scatter_tensor_case(name, g, ref, gen(name, rank, dt, n * ws, kind), opname, kind, ws)
                name = f"reduce_scatter/{opname}/{dname(dt)}/{kind}/chunk={n}"
                with chk.case(name):
                    x = gen(name, rank, dt, n * ws, kind)
                    out = torch.full((n,), 7).to(dt)
                    dist.reduce_scatter(out, [c.clone() for c in x.chunk(ws)] if n else
                                        [torch.empty(0, dtype=dt) for _ in range(ws)], op=make_op(opname), group=g)

                    def run_ref(t, op):
                        o = torch.empty(n, dtype=t.dtype)
                        dist.reduce_scatter(o, list(t.chunk(ws)) if n else [torch.empty(0, dtype=t.dtype) for _ in range(ws)],
                                            op=op, group=ref)
                        return o

                    check_reduction(name, out, x, opname, kind, run_ref, ws)
            reduce_scatter_coalesced_case(chk, g, ref, rank, ws, dt, opname, kind)


def reduce_scatter_coalesced_case(chk, g, ref, rank, ws, dt, opname, kind):
    """reduce_scatter_tensor calls coalesced (FSDP's gradients): one work for every item, each
    equal to the reference's own call; the outputs start filled with 7s."""
    name = f"reduce_scatter_tensor_coalesced/{opname}/{dname(dt)}/{kind}"
    with chk.case(name):
        chunks = (4, 0, 1, 50)
        xs = [gen(f"{name}/{i}", rank, dt, m * ws, kind) for i, m in enumerate(chunks)]
        outs = [torch.full((m,), 7).to(dt) for m in chunks]
        with dist._coalescing_manager(group=g, async_ops=True) as cm:  # noqa: SLF001
            for o, x in zip(outs, xs):
                dist.reduce_scatter_tensor(o, x.clone(), op=make_op(opname), group=g)
        cm.wait()
        for i, (o, x) in enumerate(zip(outs, xs)):
            def run_ref(t, op, m=o.numel()):
                r = torch.empty(m, dtype=t.dtype)
                dist.reduce_scatter_tensor(r, t, op=op, group=ref)
                return r

            check_reduction(f"{name}/{i}", o, x, opname, kind, run_ref, ws)


def _uneven(i, j):
    return (i + 2 * j) % 3  # elements rank i sends to rank j


def section_all_to_all(chk, g, ref, rank, ws):
    for dt in ALL_DTYPES:
        for n in (0, 1, 100):
            name = f"all_to_all_single/equal/{dname(dt)}/n={n}"
            with chk.case(name):
                x = gen(name, rank, dt, n * ws, "bits")
                out = torch.zeros(n * ws, dtype=dt)
                dist.all_to_all_single(out, x, group=g)
                exp = torch.cat([gen(name, r, dt, n * ws, "bits")[rank * n:(rank + 1) * n] for r in range(ws)])
                same(out, exp, name)
        name = f"all_to_all_single/uneven/{dname(dt)}"
        with chk.case(name):
            ins = [_uneven(rank, j) for j in range(ws)]
            outs_s = [_uneven(j, rank) for j in range(ws)]
            x = gen(name, rank, dt, sum(ins), "bits")
            out = torch.zeros(sum(outs_s), dtype=dt)
            dist.all_to_all_single(out, x, output_split_sizes=outs_s, input_split_sizes=ins, group=g)
            r_ = torch.zeros(sum(outs_s), dtype=dt)
            dist.all_to_all_single(r_, x, output_split_sizes=outs_s, input_split_sizes=ins, group=ref)
            same(out, r_, name)
            parts = []
            for j in range(ws):
                xj = gen(name, j, dt, sum(_uneven(j, k) for k in range(ws)), "bits")
                off = sum(_uneven(j, k) for k in range(rank))
                parts.append(xj[off:off + _uneven(j, rank)])
            same(out, torch.cat(parts), name + " (vs inputs)")
        name = f"all_to_all/list/{dname(dt)}"
        with chk.case(name):  # gloo's list all_to_all takes equal sizes only
            ins = [gen(f"{name}|{rank}->{j}", 0, dt, 9, "bits") for j in range(ws)]
            outs = [torch.zeros(9, dtype=dt) for j in range(ws)]
            dist.all_to_all(outs, ins, group=g)
            for j in range(ws):
                same(outs[j], gen(f"{name}|{j}->{rank}", 0, dt, 9, "bits"), f"{name}[from {j}]")
    name = f"all_to_all_single/equal/float32/n={BIG // ws}"
    with chk.case(name):
        n = BIG // ws // ws
        x = gen(name, rank, torch.float32, n * ws, "normal")
        out = torch.zeros(n * ws)
        dist.all_to_all_single(out, x, group=g)
        exp = torch.cat([gen(name, r, torch.float32, n * ws, "normal")[rank * n:(rank + 1) * n] for r in range(ws)])
        same(out, exp, name)


def section_p2p(chk, g, ref, rank, ws):
    nxt, prv = (rank + 1) % ws, (rank - 1) % ws
    for dt in ALL_DTYPES:
        for n in (0, 1, 1000):
            name = f"p2p/send_recv/{dname(dt)}/n={n}"
            with chk.case(name):
                x = gen(f"{name}|{rank}", 0, dt, n, "bits")
                buf = torch.zeros(n, dtype=dt)
                if rank % 2 == 0:
                    dist.send(x, dst=nxt, group=g)
                    src = dist.recv(buf, src=prv, group=g)
                else:
                    src = dist.recv(buf, src=prv, group=g)
                    dist.send(x, dst=nxt, group=g)
                assert src == prv, f"{name}: recv returned {src}, expected {prv}"
                same(buf, gen(f"{name}|{prv}", 0, dt, n, "bits"), name)
    name = "p2p/isend_irecv/ring"
    with chk.case(name):
        x = gen(f"{name}|{rank}", 0, torch.float64, 4097, "normal")
        buf = torch.zeros(4097, dtype=torch.float64)
        works = [dist.irecv(buf, src=prv, group=g), dist.isend(x, dst=nxt, group=g)]
        for w in works:
            w.wait()
        same(buf, gen(f"{name}|{prv}", 0, torch.float64, 4097, "normal"), name)
    name = "p2p/batch_isend_irecv"
    with chk.case(name):
        x = gen(f"{name}|{rank}", 0, torch.int32, 33, "bits")
        buf = torch.zeros(33, dtype=torch.int32)
        ops = [dist.P2POp(dist.isend, x, nxt, group=g), dist.P2POp(dist.irecv, buf, prv, group=g)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        same(buf, gen(f"{name}|{prv}", 0, torch.int32, 33, "bits"), name)
    name = "p2p/recv_any_source"
    with chk.case(name):
        if rank == 0:
            seen = set()
            for i in range(ws - 1):
                buf = torch.zeros(10, dtype=torch.int64)
                if i < ws - 2:
                    src = dist.recv(buf, src=None, group=g)
                else:  # last one through irecv(src=None)
                    w = dist.irecv(buf, src=None, group=g)
                    w.wait()
                    src = w._source_rank()
                assert src in range(1, ws) and src not in seen, f"{name}: any-source receive returned sender {src!r}"
                seen.add(src)
                same(buf, torch.full((10,), 100 + src, dtype=torch.int64), f"{name} from {src}")
        else:
            dist.send(torch.full((10,), 100 + rank, dtype=torch.int64), dst=0, group=g)
    name = "p2p/tags_out_of_order"
    with chk.case(name):
        if rank == 1:
            dist.send(torch.full((5,), 1.0), dst=0, group=g, tag=11)
            dist.isend(torch.full((5,), 2.0), dst=0, group=g, tag=22).wait()
        elif rank == 0:
            b22, b11 = torch.zeros(5), torch.zeros(5)
            w22 = dist.irecv(b22, src=1, group=g, tag=22)
            w11 = dist.irecv(b11, src=1, group=g, tag=11)
            w22.wait()
            w11.wait()
            same(b11, torch.full((5,), 1.0), name + " tag 11")
            same(b22, torch.full((5,), 2.0), name + " tag 22")
    dist.barrier(group=ref)


def section_barrier_async(chk, g, ref, rank, ws):
    with chk.case("barrier/sync"):
        for _ in range(3):
            assert dist.barrier(group=g) is None
    with chk.case("barrier/async"):
        w = dist.barrier(group=g, async_op=True)
        w.wait()
        assert w.is_completed()
    with chk.case("async/all_reduce/out_of_order_wait"):
        xs = [gen(f"async{i}", rank, torch.float32, n) for i, n in enumerate([10, 100_000, 1, 1000])]
        outs = [x.clone() for x in xs]
        works = [dist.all_reduce(o, group=g, async_op=True) for o in outs]
        for w in reversed(works):
            assert w.wait() is True or w.wait() is None
        for w in works:
            assert w.is_completed(), "is_completed() False after wait()"
            exc = work_exception(w)
            assert exc is None, f"exception() = {exc!r} for a successful op"
        for x, o in zip(xs, outs):
            r_ = x.clone()
            dist.all_reduce(r_, group=ref)
            same(o, r_, "async all_reduce")
    with chk.case("async/get_future"):
        x = gen("fut", rank, torch.int64, 17)
        o = x.clone()
        fut = dist.all_reduce(o, group=g, async_op=True).get_future()
        val = fut.wait()
        r_ = x.clone()
        dist.all_reduce(r_, group=ref)
        assert isinstance(val, list) and len(val) == 1, f"future value {type(val).__name__} len {len(val) if isinstance(val, list) else '-'}"
        same(val[0], r_, "future value")
        same(o, r_, "in-place output")
        chained = fut.then(lambda f: f.value()[0] * 2).wait()
        same(chained, r_ * 2, "then() chained future")
    with chk.case("async/wait_with_timeout_argument"):
        o = torch.ones(8)
        w = dist.all_reduce(o, group=g, async_op=True)
        w.wait(timeout=datetime.timedelta(seconds=60))
        same(o, torch.full((8,), float(ws)), "all_reduce waited with timeout")
    with chk.case("async/mixed_collectives_in_flight"):
        a, b = torch.full((5,), float(rank)), torch.zeros(ws * 3, dtype=torch.int32)
        w1 = dist.all_reduce(a, op=dist.ReduceOp.MAX, group=g, async_op=True)
        w2 = dist.all_gather_into_tensor(b, torch.full((3,), rank, dtype=torch.int32), group=g, async_op=True)
        w3 = dist.broadcast(torch.zeros(3), src=0, group=g, async_op=True)
        w3.wait(), w2.wait(), w1.wait()
        same(a, torch.full((5,), float(ws - 1)), "async MAX")
        same(b, torch.arange(ws, dtype=torch.int32).repeat_interleave(3), "async all_gather_into_tensor")
    with chk.case("get_backend"):
        assert dist.get_backend() == BACKEND_UNDER_TEST[0], f"get_backend() = {dist.get_backend()!r}"
        assert dist.get_backend(g) == BACKEND_UNDER_TEST[0]


BACKEND_UNDER_TEST = [BACKEND]  # set in the worker (the harness is validated with gloo)


def section_subgroups(chk, backend, rank, ws):
    """Subgroups via new_group: group ranks, roots given as global ranks, p2p by global rank."""
    sets = [[0]] + ([[ws - 1, 0]] if ws >= 2 else []) + ([list(range(1, ws))] if ws >= 3 else [])
    for ranks in sets:
        for algo in ([None, "rd"] if len(ranks) > 1 else [None]):
            opts = backend_options(backend, algorithm=algo) if algo else None
            sub = dist.new_group(ranks=ranks, backend=backend, pg_options=opts)
            subref = dist.new_group(ranks=ranks, backend="gloo")
            tag = f"subgroup/{'-'.join(map(str, ranks))}{'/' + algo if algo else ''}"
            if rank not in ranks:
                with chk.case(f"{tag}/non_member"):
                    assert sub == dist.GroupMember.NON_GROUP_MEMBER, f"non-member got {sub!r}"
                    assert dist.get_rank(sub) == -1
                continue
            me, m = sorted(ranks).index(rank), len(ranks)
            root = max(ranks)
            with chk.case(f"{tag}/rank_size"):
                assert dist.get_rank(sub) == me, f"group rank {dist.get_rank(sub)} != {me}"
                assert dist.get_world_size(sub) == m
                assert sub.rank() == me and sub.size() == m
            with chk.case(f"{tag}/all_reduce"):
                for dt, opname, kind in [(torch.float32, "SUM", "int"), (torch.int64, "PRODUCT", "prod"), (torch.float32, "SUM", "normal")]:
                    x = gen(f"{tag}{dname(dt)}", rank, dt, 1001, kind)
                    all_reduce_case(chk, f"{tag}/all_reduce/{opname}/{dname(dt)}/{kind}", sub, subref, x, opname, kind, m)
            with chk.case(f"{tag}/broadcast_global_src"):
                x = gen(f"{tag}b", rank, torch.int32, 50, "bits")
                dist.broadcast(x, src=root, group=sub)
                same(x, gen(f"{tag}b", root, torch.int32, 50, "bits"), "broadcast from global rank")
            with chk.case(f"{tag}/broadcast_group_src"):
                x = gen(f"{tag}gb", rank, torch.int32, 50, "bits")
                dist.broadcast(x, group_src=0, group=sub)
                same(x, gen(f"{tag}gb", min(ranks), torch.int32, 50, "bits"), "broadcast group_src=0")
            with chk.case(f"{tag}/reduce_global_dst"):
                x = torch.full((4,), float(rank + 1))
                dist.reduce(x, dst=root, group=sub)
                if rank == root:
                    same(x, torch.full((4,), float(sum(r + 1 for r in ranks))), "reduce at global dst")
            with chk.case(f"{tag}/all_gather"):
                outs = [torch.zeros(3, dtype=torch.int64) for _ in range(m)]
                dist.all_gather(outs, torch.full((3,), rank, dtype=torch.int64), group=sub)
                for i, r in enumerate(sorted(ranks)):
                    same(outs[i], torch.full((3,), r, dtype=torch.int64), f"all_gather slot {i}")
            if m > 1:
                with chk.case(f"{tag}/send_recv_global_ranks"):
                    lo, hi = min(ranks), max(ranks)
                    if rank == lo:
                        dist.send(torch.full((6,), 42.0 + lo), dst=hi, group=sub)
                    elif rank == hi:
                        buf = torch.zeros(6)
                        src = dist.recv(buf, src=lo, group=sub)
                        assert src == lo, f"recv returned {src}, expected global rank {lo}"
                        same(buf, torch.full((6,), 42.0 + lo), "subgroup send/recv")
            with chk.case(f"{tag}/get_backend"):
                assert dist.get_backend(sub) == backend, f"get_backend(subgroup) = {dist.get_backend(sub)!r}"
    dist.barrier()


def collective_matrix(ctx, backend):
    BACKEND_UNDER_TEST[0] = backend
    rank, ws = ctx.rank, ctx.world_size
    ref = init_world(ctx, backend)
    g = dist.group.WORLD
    groups = {"auto": g}
    for algo in ALGORITHMS:
        groups[algo] = dist.new_group(backend=backend, pg_options=backend_options(backend, algorithm=algo))
    chk = mp.Checker(rank)
    section_all_reduce(chk, g, ref, rank, ws)
    section_nonfinite(chk, g, ref, rank, ws)
    section_algorithms(chk, groups, ref, rank, ws)
    section_noncontig(chk, g, ref, rank, ws)
    section_all_reduce_coalesced(chk, g, ref, rank, ws)
    section_broadcast(chk, g, ref, rank, ws)
    section_reduce(chk, g, ref, rank, ws)
    section_all_gather(chk, g, ref, rank, ws)
    section_gather_scatter(chk, g, ref, rank, ws)
    section_reduce_scatter(chk, g, ref, rank, ws)
    section_all_to_all(chk, g, ref, rank, ws)
    section_barrier_async(chk, g, ref, rank, ws)
    section_subgroups(chk, backend, rank, ws)
    if ws > 1:  # last: a broken send/recv desynchronizes the ranks
        section_p2p(chk, g, ref, rank, ws)
    dist.destroy_process_group()
    return chk.result()


SECTIONS = ["all_reduce", "nonfinite", "algorithms", "noncontig", "all_reduce_coalesced", "broadcast", "reduce",
            "all_gather", "all_gather_into_tensor", "all_gather_coalesced", "coalescing_manager", "gather", "scatter",
            "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced", "all_to_all_single", "all_to_all", "p2p", "barrier", "async",
            "get_backend", "subgroup"]

_LAUNCHES: dict = {}


def matrix_launch(ws, backend=BACKEND):
    if (ws, backend) not in _LAUNCHES:
        _LAUNCHES[(ws, backend)] = mp.run_checks(collective_matrix, ws, args=(backend,), timeout=60 + 40 * ws, stall=40)
    return _LAUNCHES[(ws, backend)]


@pytest.mark.parametrize("section", SECTIONS)
@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_collective_matrix(ws, section):
    if section == "p2p" and ws == 1:
        return  # no peer exists; send-to-self is tested in test_errors
    mp.assert_checks(matrix_launch(ws), lambda c: c.split("/")[0] == section, f"{section} on {ws} ranks")


# --------------------------------------------------------------------------------------------
# separate launches: mixed backend strings, timeouts


def mixed_backends(ctx, cpu_backend):
    torch.set_num_threads(1)
    if cpu_backend == "ringzip":
        import ringzip  # noqa: F401
    chk = mp.Checker(ctx.rank)
    ws = ctx.world_size
    # torch creates the NCCL backend eagerly and refuses without a GPU: use gloo for cuda there
    gpu = "nccl" if torch.cuda.is_available() else "gloo"
    spec = f"cpu:{cpu_backend},cuda:{gpu}"
    dist.init_process_group(spec, rank=ctx.rank, world_size=ws, init_method=ctx.init_method)
    with chk.case(f"mixed/{spec}/config"):
        cfg = dist.get_backend_config()
        assert cfg.replace(" ", "") == spec, f"get_backend_config() = {cfg!r}"
    with chk.case(f"mixed/{spec}/cpu_backend_object"):
        b = dist.group.WORLD._get_backend(torch.device("cpu"))
        assert b is not None
        assert cpu_backend in type(b).__name__.lower() or cpu_backend in str(getattr(b, "name", lambda: "")()).lower(), \
            f"CPU backend object is {type(b).__name__}, not {cpu_backend}"
    with chk.case(f"mixed/{spec}/all_reduce"):
        x = torch.arange(10, dtype=torch.float32) * (ctx.rank + 1)
        dist.all_reduce(x)
        same(x, torch.arange(10, dtype=torch.float32) * sum(range(1, ws + 1)), "all_reduce")
    spec2 = f"cpu:gloo,cuda:{cpu_backend}"
    sub = dist.new_group(backend=spec2)
    with chk.case(f"mixed/{spec2}/new_group_cpu_goes_to_gloo"):
        x = torch.full((3,), ctx.rank + 1, dtype=torch.int64)
        dist.all_reduce(x, group=sub)
        same(x, torch.full((3,), sum(range(1, ws + 1)), dtype=torch.int64), "all_reduce")
        assert dist.get_backend(sub) in (spec2, "gloo", cpu_backend), dist.get_backend(sub)
    sub2 = dist.new_group(backend=spec)
    with chk.case(f"mixed/{spec}/new_group"):
        x = torch.full((3,), ctx.rank + 1, dtype=torch.int32)
        dist.all_reduce(x, op=dist.ReduceOp.MAX, group=sub2)
        same(x, torch.full((3,), ws, dtype=torch.int32), "all_reduce MAX")
    dist.destroy_process_group()
    return chk.result()


def test_mixed_backend_strings():
    res = mp.run(mixed_backends, 2, args=(BACKEND,), timeout=90)
    mp.raise_on_failures(mp.merge(res), "mixed backend strings")
    assert all(len(r["passed"]) == 5 for r in res), [r["passed"] for r in res]


def timeouts(ctx, backend):
    """A collective that a peer never joins fails with a timeout error; the world group stays usable."""
    torch.set_num_threads(1)
    ref = init_world(ctx, backend)
    chk = mp.Checker(ctx.rank)
    short = datetime.timedelta(seconds=3)
    variants = {"new_group_timeout": dict(timeout=short)}
    if backend == "ringzip":
        variants["options_timeout"] = dict(pg_options=backend_options(backend, timeout=short))
    for name, kw in variants.items():
        grp = dist.new_group(backend=backend, **kw)
        with chk.case(f"timeout/{name}"):
            if ctx.rank == 0:
                import time
                t0 = time.monotonic()
                w = dist.all_reduce(torch.ones(4), group=grp, async_op=True)
                try:
                    w.wait()
                except RuntimeError as e:
                    msg = str(e).lower()
                    assert "timeout" in msg or "timed out" in msg, f"error does not mention the timeout: {e}"
                else:
                    raise AssertionError("all_reduce without the peer completed instead of timing out")
                took = time.monotonic() - t0
                assert took < 30, f"timeout of 3 s took {took:.1f} s"
        dist.barrier(group=ref)
    with chk.case("timeout/world_group_still_works"):
        x = torch.ones(5)
        dist.all_reduce(x)
        same(x, torch.full((5,), float(ctx.world_size)), "all_reduce after timeouts")
    return chk.result()


def test_timeout_when_peer_missing():
    res = mp.run(timeouts, 2, args=(BACKEND,), timeout=120)
    mp.raise_on_failures(mp.merge(res), "timeouts")
