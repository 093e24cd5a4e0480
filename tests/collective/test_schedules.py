"""Every algorithm is one schedule run by two executors (csrc/collective/schedule.h): eager on
host transports, grouped on stream-ordered ones (NCCL). Both must compute the same bits.

One launch per world size (2, 3, 4 ranks): every rank creates a ringzip group over Gloo (eager
executor), a ringzip group whose Gloo transport is wrapped in StreamOrderedTransport (NCCL's
semantics: tags ignored, matching by posting order, groups completing as a whole -- the grouped
executor; a schedule that posted out of order would fail or hang there as on NCCL) and a gloo
group (the exact reference). Then, for the same inputs and the same options on both ringzip
groups:
  compressed   every codec x algorithm (ring, sra; top-k in several blocks, random-k), also
               with segmented SRA (parts longer than one segment), error feedback over two
               calls, and compressed reduce_scatter: grouped == eager bit for bit.
  dense        all_reduce with each algorithm (ring with several segments per part, rd, star,
               direct) on float32 and int32: grouped == eager bit for bit, ints == gloo.
  movement     broadcast / reduce (every root), all_gather, reduce_scatter, gather, scatter,
               all_to_all, barrier: grouped == gloo.
"""
from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist

from tests import mp
from tests.collective._bounds import gen
from tests.collective._common import BASE, T, same_bits

WORLD_SIZES = [2, 3, 4]
CODECS = [("fp16", "stochastic"), ("bf16", "nearest"), ("q8", "stochastic"), ("q4", "nearest"),
          ("q2", "stochastic"), ("q1", "stochastic")]
N = 20011
SEGMENTED = (1 << 21) + 4099  # SRA parts longer than one 2^19-element segment on 2-4 ranks
BIG_DENSE = (1 << 20) * 3 + 17  # float32: ring parts of several 1 MiB segments


def _stream_ordered_backend(dist_opts, pg_options):
    import ringzip
    from ringzip import _C
    from ringzip._registry import apply_options

    opts = ringzip.Options.from_env(pg_options)
    store = dist.PrefixStore("ringzip/transport/", dist_opts.store)
    timeout = dist_opts.timeout
    gloo = dist.ProcessGroupGloo(store, dist_opts.group_rank, dist_opts.group_size, timeout)
    backend = _C.RingzipBackend(gloo, timeout, "auto", str(dist_opts.group_id), stream_ordered=True)
    apply_options(backend, opts)
    return backend


def _set(group, **kw):
    import ringzip

    o = dict(BASE)
    o.update(kw)
    ringzip.set_options(group=group, **o)


def _both(t, eager, grouped, name, fn):
    """fn(group) on both groups (always both, on every rank), then the bits compared."""
    with t.chk.case(name):
        a = fn(eager)
        b = fn(grouped)
        for i, (x, y) in enumerate(zip(a, b)):
            same_bits(y, x, f"{name}[{i}]: grouped vs eager")


def _allreduce(x, calls=1):
    def fn(g):
        outs = []
        for _ in range(calls):
            y = x.clone()
            dist.all_reduce(y, group=g)
            outs.append(y)
        return outs
    return fn


def section_compressed(t, eager, grouped):
    r = t.rank
    x = gen("sched", r, N)
    for codec, rnd in CODECS:
        for algo in ("ring", "sra"):
            for g in (eager, grouped):
                _set(g, codec=codec, algorithm=algo, rounding=rnd)
            _both(t, eager, grouped, f"compressed/{codec}/{rnd}/{algo}", _allreduce(x))
    for codec, block in (("topk:0.01", 4096), ("topk:0.05", 0), ("randomk:0.01", 4096)):
        for g in (eager, grouped):
            _set(g, codec=codec, algorithm="auto", topk_block=block)
        _both(t, eager, grouped, f"compressed/{codec}/block{block}", _allreduce(x))
    big = gen("sched-big", r, SEGMENTED)
    for codec in ("q8", "q1"):
        for g in (eager, grouped):
            _set(g, codec=codec, algorithm="sra")
        _both(t, eager, grouped, f"compressed/{codec}/sra/segmented", _allreduce(big))
    for codec, algo in (("q2", "sra"), ("q4", "ring"), ("topk:0.01", "auto"), ("randomk:0.05", "auto")):
        for g in (eager, grouped):
            _set(g, codec=codec, algorithm=algo, error_feedback=True, topk_block=8192)
        _both(t, eager, grouped, f"compressed/{codec}/{algo}/error_feedback", _allreduce(x, calls=3))
    for codec in ("q4", "q1"):
        for g in (eager, grouped):
            _set(g, codec=codec, algorithm="auto")

        def rs(g):
            out = torch.empty(N // t.ws)
            dist.reduce_scatter_tensor(out, x[: N // t.ws * t.ws].clone(), group=g)
            return [out]
        _both(t, eager, grouped, f"compressed/{codec}/reduce_scatter", rs)


def section_dense(t, eager, grouped, ref):
    r = t.rank
    for algo in ("ring", "rd", "star", "direct"):
        for g in (eager, grouped):
            _set(g, algorithm=algo)
        for n in (1, 7, N) + ((BIG_DENSE,) if algo == "ring" else ()):
            x = gen("dense", r, n)
            _both(t, eager, grouped, f"dense/{algo}/float32/{n}", _allreduce(x))
            xi = (gen("dense-int", r, n) * 100).to(torch.int32)
            with t.chk.case(f"dense/{algo}/int32/{n}/vs_gloo"):
                a, b = xi.clone(), xi.clone()
                dist.all_reduce(a, group=grouped)
                dist.all_reduce(b, group=ref)
                same_bits(a, b, f"{algo} int32 all_reduce: grouped vs gloo")
    for g in (eager, grouped):
        _set(g, algorithm="auto")


def section_movement(t, grouped, ref):
    r, ws = t.rank, t.ws
    x = (gen("move", r, N) * 1000).to(torch.int32)

    def compare(name, fn):
        with t.chk.case(f"movement/{name}"):
            for i, (a, b) in enumerate(zip(fn(grouped), fn(ref))):
                same_bits(a, b, f"{name}[{i}]: grouped vs gloo")

    for root in range(ws):
        def bcast(g, root=root):
            y = x.clone()
            dist.broadcast(y, src=root, group=g)
            return [y]
        compare(f"broadcast/root{root}", bcast)

        def red(g, root=root):
            y = x.clone()
            dist.reduce(y, dst=root, group=g)
            return [y] if r == root else [x]
        compare(f"reduce/root{root}", red)

    def allgather(g):
        outs = [torch.empty_like(x) for _ in range(ws)]
        dist.all_gather(outs, x, group=g)
        return outs
    compare("all_gather", allgather)

    def reduce_scatter(g):
        out = torch.empty(N // ws, dtype=torch.int32)
        dist.reduce_scatter_tensor(out, x[: N // ws * ws].clone(), group=g)
        return [out]
    compare("reduce_scatter", reduce_scatter)

    def gather(g):
        outs = [torch.empty_like(x) for _ in range(ws)] if r == 0 else None
        dist.gather(x, gather_list=outs, dst=0, group=g)
        return outs or []
    compare("gather", gather)

    def scatter(g):
        out = torch.empty_like(x)
        dist.scatter(out, scatter_list=[x + i for i in range(ws)] if r == ws - 1 else None, src=ws - 1, group=g)
        return [out]
    compare("scatter", scatter)

    def alltoall(g):  # uneven splits: rank i gets 100 (i + 1) elements from everybody
        ins = x[: 100 * ws * (ws + 1) // 2].clone()
        out = torch.empty(100 * (r + 1) * ws, dtype=torch.int32)
        dist.all_to_all_single(out, ins, output_split_sizes=[100 * (r + 1)] * ws,
                               input_split_sizes=[100 * (i + 1) for i in range(ws)], group=g)
        return [out]
    compare("all_to_all", alltoall)

    with t.chk.case("movement/barrier"):
        for _ in range(3):
            dist.barrier(group=grouped)


def schedule_matrix(ctx):
    torch.set_num_threads(1)
    import ringzip  # noqa: F401  (registers the backend)

    t = T(ctx)
    dist.Backend.register_backend("rzstream", _stream_ordered_backend, extended_api=True, devices=["cpu"])
    timeout = datetime.timedelta(seconds=60)
    dist.init_process_group("ringzip", rank=ctx.rank, world_size=ctx.world_size, init_method=ctx.init_method,
                            timeout=timeout, pg_options=ringzip.Options(min_numel=1024, error_feedback=False))
    grouped = dist.new_group(backend="rzstream", timeout=timeout,
                             pg_options=ringzip.Options(min_numel=1024, error_feedback=False))
    ref = dist.new_group(backend="gloo")
    eager = dist.group.WORLD
    section_compressed(t, eager, grouped)
    dist.barrier(group=ref)
    section_dense(t, eager, grouped, ref)
    dist.barrier(group=ref)
    section_movement(t, grouped, ref)
    dist.barrier(group=ref)
    dist.destroy_process_group()
    return t.chk.result()


SECTIONS = ["compressed", "dense", "movement"]
_LAUNCHES: dict = {}


def launch(ws):
    if ws not in _LAUNCHES:
        try:
            res = mp.run(schedule_matrix, ws, timeout=120 + 60 * ws)
            _LAUNCHES[ws] = ("ok", mp.merge(res), set().union(*(r["passed"] for r in res)))
        except mp.MultiProcessError as e:
            _LAUNCHES[ws] = ("error", str(e), None)
    return _LAUNCHES[ws]


@pytest.mark.parametrize("section", SECTIONS)
@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_grouped_executor_matches_eager(ws, section):
    status, failures, passed = launch(ws)
    if status != "ok":
        pytest.fail(f"launch on {ws} ranks failed:\n{failures}", pytrace=False)
    mine = {c: m for c, m in failures.items() if c.split("/")[0] == section}
    mp.raise_on_failures(mine, f"{section} on {ws} ranks")
    assert any(c.split("/")[0] == section for c in passed), f"no {section} case ran on {ws} ranks"
