"""Every collective on the CUDA path against the host path, case by case.

A case is ``fn(dev, rank, ws) -> list of result tensors``; it is run twice in the same ringzip
group, on CPU tensors (the host path: CPU kernels over Gloo, tested against gloo in
tests/backend) and on CUDA tensors (the CUDA path: NCCL transport, CUDA kernels), and the two
results must be equal bit for bit. Inputs are chosen so that this is a fair demand at world
sizes 1 and 2: integer-valued or two-term float sums (commutative, hence order-free), nearest
rounding for the codecs (the two runs are different calls, so stochastic rounding would draw
different random numbers), no error feedback except where both runs keep their own tensors.

Used by test_collectives_cuda.py (world size 1, in process) and _collectives_worker.py (2 ranks
sharing one GPU, where NCCL allows it). Every rank must run the same cases in the same order.
"""
from __future__ import annotations

import functools
import os
import sys

import torch
import torch.distributed as dist

import ringzip

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:  # run as a script (the 2-rank worker) or from another directory
    sys.path.insert(0, _ROOT)
from tests.backend._common import ALL_DTYPES, dname, gen, make_op, same, valid_ops

CODECS = ["fp16", "bf16", "q8", "q4", "q2", "q1", "topk:0.05"]


def options(**kw) -> None:
    base = dict(codec="none", algorithm="auto", min_numel=0, error_feedback=False, rounding="nearest", seed=5)
    base.update(kw)
    ringzip.set_options(**base)


def _on(t: torch.Tensor, dev: str) -> torch.Tensor:
    return t.to(dev)


def _cpu(ts) -> list:
    return [t.cpu() for t in ts]


# ---- all-reduce -------------------------------------------------------------------------------------

def all_reduce(dev, rank, ws, *, key, dt, opname, kind, n=1000, algo="auto", codec="none", noncontig=False):
    options(algorithm=algo, codec=codec)
    if noncontig:
        x = _on(gen(key, rank, dt, (n, 3), kind), dev).t()  # (3, n), not contiguous
    else:
        x = _on(gen(key, rank, dt, n, kind), dev)
    dist.all_reduce(x, op=make_op(opname))
    return _cpu([x])


_KEEP = []  # tensors whose error-feedback residuals must stay theirs (see all_reduce_feedback)


def all_reduce_feedback(dev, rank, ws, *, key, codec, algo):
    """Three steps into the same tensor with error feedback: the residuals of the CPU and the
    CUDA tensor must evolve alike. Both tensors stay alive, so each keeps its own residual (a
    freed tensor's residual would pass to the next new tensor of its size: compression.h)."""
    options(codec=codec, algorithm=algo, error_feedback=True)
    x = torch.zeros(6000, device=dev)
    _KEEP.append(x)
    out = []
    for step in range(3):
        x.copy_(gen(f"{key}/{step}", rank, torch.float32, 6000, "normal"))
        dist.all_reduce(x)
        out.append(x.clone())
    options()
    return _cpu(out)


def all_reduce_coalesced(dev, rank, ws, *, key, dt, opname, kind, codec="none"):
    options(codec=codec)
    xs = [_on(gen(f"{key}{i}", rank, dt, n, kind), dev) for i, n in enumerate([5, 0, 1000, 1])]
    with dist._coalescing_manager(async_ops=True) as cm:
        for x in xs:
            dist.all_reduce(x, op=make_op(opname))
    cm.wait()
    return _cpu(xs)


# ---- rooted -----------------------------------------------------------------------------------------

def broadcast(dev, rank, ws, *, key, dt, n, src):
    options()
    x = _on(gen(key, rank, dt, n, "bits"), dev)
    dist.broadcast(x, src=src)
    return _cpu([x])


def reduce(dev, rank, ws, *, key, dt, opname, kind, dst):
    options()
    x = _on(gen(key, rank, dt, 1000, kind), dev)
    before = x.clone()
    dist.reduce(x, dst=dst, op=make_op(opname))
    # Only the root's result is defined; other ranks' input must be left as it was.
    return _cpu([x]) if rank == dst else _cpu([x, before])


def gather(dev, rank, ws, *, key, dt, n, dst):
    options()
    x = _on(gen(key, rank, dt, n, "bits"), dev)
    outs = [torch.zeros(n, dtype=dt, device=dev) for _ in range(ws)] if rank == dst else None
    dist.gather(x, outs, dst=dst)
    return _cpu(outs) if rank == dst else []


def scatter(dev, rank, ws, *, key, dt, n, src):
    options()
    out = torch.zeros(n, dtype=dt, device=dev)
    ins = [_on(gen(f"{key}/{r}", src, dt, n, "bits"), dev) for r in range(ws)] if rank == src else None
    dist.scatter(out, ins, src=src)
    return _cpu([out])


# ---- reduce-scatter ---------------------------------------------------------------------------------

def reduce_scatter_tensor(dev, rank, ws, *, key, dt, opname, kind, m=777, codec="none"):
    options(codec=codec)
    x = _on(gen(key, rank, dt, m * ws, kind), dev)
    keep = x.clone()
    out = torch.zeros(m, dtype=dt, device=dev)
    dist.reduce_scatter_tensor(out, x, op=make_op(opname))
    return _cpu([out, x, keep])  # the input stays intact


def reduce_scatter_list(dev, rank, ws, *, key, dt, opname, kind, codec="none"):
    options(codec=codec)
    ins = [_on(gen(f"{key}/{r}", rank, dt, (40, 25), kind), dev) for r in range(ws)]
    out = torch.zeros(40, 25, dtype=dt, device=dev)
    dist.reduce_scatter(out, ins, op=make_op(opname))
    return _cpu([out])


def reduce_scatter_coalesced(dev, rank, ws, *, key):
    options()
    xs = [_on(gen(f"{key}{i}", rank, torch.float32, m * ws), dev) for i, m in enumerate([4, 1, 50])]
    outs = [torch.zeros(x.numel() // ws, device=dev) for x in xs]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, x in zip(outs, xs):
            dist.reduce_scatter_tensor(o, x)
    cm.wait()
    return _cpu(outs)


# ---- allgather --------------------------------------------------------------------------------------

def all_gather(dev, rank, ws, *, key, dt, n):
    options()
    x = _on(gen(key, rank, dt, n, "bits"), dev)
    outs = [torch.zeros(n, dtype=dt, device=dev) for _ in range(ws)]
    dist.all_gather(outs, x)
    return _cpu(outs)


def all_gather_into_tensor(dev, rank, ws, *, key, dt, n, alias=False):
    options()
    out = torch.zeros(ws * n, dtype=dt, device=dev)
    x = _on(gen(key, rank, dt, n, "bits"), dev)
    if alias:  # FSDP's pattern: the input is this rank's slot of the output
        out.narrow(0, rank * n, n).copy_(x)
        x = out.narrow(0, rank * n, n)
    dist.all_gather_into_tensor(out, x)
    return _cpu([out])


def all_gather_coalesced(dev, rank, ws, *, key, dt):
    options()
    xs = [_on(gen(f"{key}{i}", rank, dt, n, "bits"), dev) for i, n in enumerate([3, 0, 100])]
    outs = [[torch.zeros_like(x) for x in xs] for _ in range(ws)]
    dist.all_gather_coalesced(outs, xs)
    return _cpu([t for lst in outs for t in lst])


def all_gather_into_tensor_coalesced(dev, rank, ws, *, key):
    options()
    xs = [_on(gen(f"{key}{i}", rank, torch.float32, n), dev) for i, n in enumerate([4, 1, 50])]
    outs = [torch.zeros(ws * x.numel(), device=dev) for x in xs]
    with dist._coalescing_manager(async_ops=False):
        for o, x in zip(outs, xs):
            dist.all_gather_into_tensor(o, x)
    return _cpu(outs)


# ---- all-to-all -------------------------------------------------------------------------------------

def all_to_all_single(dev, rank, ws, *, key, dt, uneven):
    options()
    if uneven:  # rank r sends (r + 1) * (i + 1) rows of 3 to rank i
        send = [(rank + 1) * (i + 1) for i in range(ws)]
        recv = [(r + 1) * (rank + 1) for r in range(ws)]
    else:
        send = recv = None
    rows = sum(send) if uneven else 4 * ws
    x = _on(gen(key, rank, dt, (rows, 3), "bits"), dev)
    out = torch.zeros(sum(recv) if uneven else 4 * ws, 3, dtype=dt, device=dev)
    dist.all_to_all_single(out, x, output_split_sizes=recv, input_split_sizes=send)
    return _cpu([out, x])


def all_to_all(dev, rank, ws, *, key, dt):
    options()
    ins = [_on(gen(f"{key}/{i}", rank, dt, 10 + i + rank, "bits"), dev) for i in range(ws)]
    outs = [torch.zeros(10 + rank + r, dtype=dt, device=dev) for r in range(ws)]
    dist.all_to_all(outs, ins)
    return _cpu(outs)


# ---- point-to-point and barrier -----------------------------------------------------------------------

def send_recv(dev, rank, ws, *, key, dt):
    """Ranks 0 and 1 swap tensors (two messages each way, in one order on both sides)."""
    options()
    peer = 1 - rank
    a = _on(gen(f"{key}/a", rank, dt, 1000, "bits"), dev)
    b = _on(gen(f"{key}/b", rank, dt, (20, 30), "bits"), dev).t()  # not contiguous
    ra = torch.zeros(1000, dtype=dt, device=dev)
    rb = torch.zeros(30, 20, dtype=dt, device=dev)
    if rank == 0:
        dist.send(a, peer)
        dist.send(b, peer)
        dist.recv(ra, peer)
        dist.recv(rb, peer)
    else:
        dist.recv(ra, peer)
        dist.recv(rb, peer)
        dist.send(a, peer)
        dist.send(b, peer)
    return _cpu([ra, rb])


def barrier(dev, rank, ws):
    options()
    if dev == "cuda":
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()
    return []


# ---- the list -----------------------------------------------------------------------------------------

def cases(ws: int) -> dict:
    """name -> fn(dev, rank, ws), in a fixed order."""
    out = {}

    def add(name, fn, **kw):
        out[name] = functools.partial(fn, key=name, **kw) if fn is not barrier else fn

    for dt in ALL_DTYPES:
        for opname, kind in valid_ops(dt):
            if ws > 2 and (opname in ("AVG", "PREMUL_SUM") or kind == "normal"):
                continue  # order-dependent beyond two terms
            add(f"all_reduce/{opname}/{dname(dt)}/{kind}", all_reduce, dt=dt, opname=opname, kind=kind)
    add("all_reduce/n=0", all_reduce, dt=torch.float32, opname="SUM", kind="int", n=0)
    add("all_reduce/n=1", all_reduce, dt=torch.float32, opname="SUM", kind="int", n=1)
    add("all_reduce/noncontig", all_reduce, dt=torch.float32, opname="SUM", kind="int", noncontig=True)
    for algo in ("ring", "rd", "direct", "star", "sra", "hd", "tree"):
        add(f"all_reduce/{algo}/float32", all_reduce, dt=torch.float32, opname="SUM", kind="int", n=100_003, algo=algo)
        add(f"all_reduce/{algo}/int32/BXOR", all_reduce, dt=torch.int32, opname="BXOR", kind="bits", algo=algo)
    for codec in CODECS:
        for dt in (torch.float32, torch.bfloat16):
            add(f"all_reduce/{codec}/{dname(dt)}", all_reduce, dt=dt, opname="SUM", kind="normal", n=50_001, codec=codec)
    for algo in ("ring", "sra"):
        add(f"all_reduce/q4/{algo}", all_reduce, dt=torch.float32, opname="SUM", kind="normal", n=50_001, codec="q4",
            algo=algo)
    add("all_reduce/q4/AVG", all_reduce, dt=torch.float32, opname="AVG", kind="normal", n=50_001, codec="q4")
    add("all_reduce/q4/noncontig", all_reduce, dt=torch.float32, opname="SUM", kind="normal", n=9_001, codec="q4",
        noncontig=True)
    add("all_reduce/feedback/q4", all_reduce_feedback, codec="q4", algo="auto")
    add("all_reduce/feedback/q2/ring", all_reduce_feedback, codec="q2", algo="ring")
    add("all_reduce/feedback/topk", all_reduce_feedback, codec="topk:0.05", algo="auto")
    add("all_reduce_coalesced/float32/SUM", all_reduce_coalesced, dt=torch.float32, opname="SUM", kind="int")
    add("all_reduce_coalesced/int64/MAX", all_reduce_coalesced, dt=torch.int64, opname="MAX", kind="bits")
    add("all_reduce_coalesced/q8", all_reduce_coalesced, dt=torch.float32, opname="SUM", kind="normal", codec="q8")

    for dt in (torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool):
        for n in (0, 1000):
            add(f"broadcast/{dname(dt)}/n={n}", broadcast, dt=dt, n=n, src=ws - 1)
    for dt, opname, kind in [(torch.float32, "SUM", "int"), (torch.float32, "MAX", "normal"),
                             (torch.float64, "PREMUL_SUM", "normal"), (torch.int32, "BOR", "bits"),
                             (torch.bool, "SUM", "int")]:
        for dst in range(ws):
            add(f"reduce/{opname}/{dname(dt)}/dst={dst}", reduce, dt=dt, opname=opname, kind=kind, dst=dst)
    for dt in (torch.float32, torch.int8, torch.bool):
        for n in (0, 1000):
            add(f"gather/{dname(dt)}/n={n}", gather, dt=dt, n=n, dst=ws - 1)
            add(f"scatter/{dname(dt)}/n={n}", scatter, dt=dt, n=n, src=0)

    for dt, opname, kind in [(torch.float32, "SUM", "int"), (torch.float32, "AVG", "normal"),
                             (torch.bfloat16, "SUM", "normal"), (torch.float64, "PREMUL_SUM", "normal"),
                             (torch.float32, "MIN", "normal"), (torch.int64, "SUM", "int"),
                             (torch.int32, "BXOR", "bits"), (torch.bool, "MAX", "int")]:
        add(f"reduce_scatter_tensor/{opname}/{dname(dt)}/{kind}", reduce_scatter_tensor, dt=dt, opname=opname, kind=kind)
        add(f"reduce_scatter/{opname}/{dname(dt)}/{kind}", reduce_scatter_list, dt=dt, opname=opname, kind=kind)
    for codec in ("q8", "q4", "fp16", "topk:0.05"):
        add(f"reduce_scatter_tensor/{codec}", reduce_scatter_tensor, dt=torch.float32, opname="SUM", kind="normal",
            m=30_011, codec=codec)
    add("reduce_scatter/q4", reduce_scatter_list, dt=torch.float32, opname="AVG", kind="normal", codec="q4")
    add("reduce_scatter_tensor_coalesced", reduce_scatter_coalesced)

    for dt in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        for n in (0, 1, 1000):
            add(f"all_gather/{dname(dt)}/n={n}", all_gather, dt=dt, n=n)
            add(f"all_gather_into_tensor/{dname(dt)}/n={n}", all_gather_into_tensor, dt=dt, n=n)
    add("all_gather_into_tensor/alias", all_gather_into_tensor, dt=torch.float32, n=1000, alias=True)
    add("all_gather_coalesced/float32", all_gather_coalesced, dt=torch.float32)
    add("all_gather_coalesced/int64", all_gather_coalesced, dt=torch.int64)
    add("all_gather_into_tensor_coalesced", all_gather_into_tensor_coalesced)

    for dt in (torch.float32, torch.int32, torch.bool):
        add(f"all_to_all_single/{dname(dt)}/equal", all_to_all_single, dt=dt, uneven=False)
        add(f"all_to_all_single/{dname(dt)}/uneven", all_to_all_single, dt=dt, uneven=True)
        add(f"all_to_all/{dname(dt)}", all_to_all, dt=dt)
    if ws == 2:
        for dt in (torch.float32, torch.int64):
            add(f"send_recv/{dname(dt)}", send_recv, dt=dt)
    out["barrier"] = barrier
    return out


def run(name, fn, rank, ws) -> None:
    """The case on CPU tensors, then on CUDA tensors; equal bits or AssertionError."""
    expect = fn("cpu", rank, ws)
    got = fn("cuda", rank, ws)
    torch.cuda.synchronize()
    assert len(got) == len(expect), f"{name}: {len(got)} results on CUDA, {len(expect)} on CPU"
    for i, (g, e) in enumerate(zip(got, expect)):
        same(g, e, f"{name}[{i}] (CUDA path vs host path)")


__all__ = ["cases", "run", "options"]
