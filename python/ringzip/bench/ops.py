"""Collective definitions for the bench: sizes, bus factors, inputs, fp64 references, one call.

Size conventions follow nccl-tests: `size` is the bytes of the largest buffer one rank holds
(all-reduce/broadcast/all-to-all: the buffer; all-gather: the gathered output; reduce-scatter:
the input), and busbw = algbw * bus_factor(op, n), so that busbw is comparable to the link rate.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

OPS = ("allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall")

DTYPES = {
    "float32": torch.float32, "float": torch.float32, "fp32": torch.float32,
    "float16": torch.float16, "half": torch.float16, "fp16": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float64": torch.float64, "double": torch.float64, "fp64": torch.float64,
    "int32": torch.int32, "int": torch.int32,
}


def canonical_dtype(name: str) -> str:
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose from {sorted(set(DTYPES))}")
    return str(DTYPES[name]).replace("torch.", "")


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw: bytes each rank must move over its link, per byte of `size`."""
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("allgather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    if op == "broadcast":
        return 1.0
    raise ValueError(op)


def redop(op: str) -> str:
    return "sum" if op in ("allreduce", "reduce_scatter") else "none"


def element_count(op: str, size_bytes: int, elem: int, n: int) -> int:
    """Elements of the `size` buffer; a multiple of n where the op splits it (at least n)."""
    count = max(1, size_bytes // elem)
    if op in ("allgather", "reduce_scatter", "alltoall"):
        count = max(n, count - count % n)
    return count


def make_input(seed: int, rank: int, numel: int, dtype: torch.dtype) -> torch.Tensor:
    """Rank `rank`'s input: a pure function of (seed, rank, numel), so every rank can rebuild it."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + rank * 7919 + numel) % (2**63))
    if dtype.is_floating_point:
        return torch.randn(numel, generator=g, dtype=torch.float32).to(dtype)
    return torch.randint(-1000, 1000, (numel,), generator=g, dtype=torch.int64).to(dtype)


class OpCase:
    """Buffers and the fp64 reference for one (op, count, dtype) on one rank."""

    def __init__(self, op: str, count: int, dtype: torch.dtype, rank: int, n: int, seed: int):
        self.op, self.count, self.dtype, self.rank, self.n = op, count, dtype, rank, n
        per_rank_in = count // n if op == "allgather" else count
        inputs = [make_input(seed, r, per_rank_in, dtype) for r in range(n)]
        self.input = inputs[rank].clone()
        if op == "allreduce":
            ref = torch.zeros(count, dtype=torch.float64)
            for x in inputs:
                ref += x.double()
            self.out = torch.empty_like(self.input)
        elif op == "reduce_scatter":
            acc = torch.zeros(count, dtype=torch.float64)
            for x in inputs:
                acc += x.double()
            ref = acc.view(n, -1)[rank].clone()
            self.out = torch.empty(count // n, dtype=dtype)
        elif op == "allgather":
            ref = torch.cat([x.double() for x in inputs])
            self.out = torch.empty(count, dtype=dtype)
        elif op == "broadcast":
            ref = inputs[0].double()
            self.out = torch.empty_like(self.input)
        elif op == "alltoall":
            ref = torch.cat([x.view(n, -1)[rank].double() for x in inputs])
            self.out = torch.empty(count, dtype=dtype)
        else:
            raise ValueError(f"unknown op {op!r}")
        self.ref = ref
        self.ref_norm = float(torch.linalg.vector_norm(ref)) or 1.0
        del inputs

    def prepare(self) -> None:
        """Untimed: restore in-place buffers so every iteration reduces the same data."""
        if self.op in ("allreduce", "broadcast"):
            self.out.copy_(self.input)

    def run(self, group) -> None:
        op = self.op
        if op == "allreduce":
            dist.all_reduce(self.out, op=dist.ReduceOp.SUM, group=group)
        elif op == "reduce_scatter":
            dist.reduce_scatter_tensor(self.out, self.input, op=dist.ReduceOp.SUM, group=group)
        elif op == "allgather":
            dist.all_gather_into_tensor(self.out, self.input, group=group)
        elif op == "broadcast":
            dist.broadcast(self.out, src=0, group=group)
        elif op == "alltoall":
            dist.all_to_all_single(self.out, self.input, group=group)

    def errors(self) -> tuple[float, float]:
        """(max abs error, relative L2 error) of the current output against the fp64 reference."""
        d = self.out.double() - self.ref
        max_abs = float(d.abs().max()) if d.numel() else 0.0
        rel = float(torch.linalg.vector_norm(d)) / self.ref_norm
        return max_abs, rel

    def same_on_all_ranks(self) -> bool:
        """Whether every rank is expected to hold the identical output."""
        return self.op in ("allreduce", "allgather", "broadcast")
