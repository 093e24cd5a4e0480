"""top-k / random-k reference (see docs/wire-format.md and csrc/codec/sparse_math.h).

topk:    int32 k | k int32 indices ascending | k float32 values. Ranking: |x| as ordered bits
         (NaN > Inf > finite), larger first, ties to the lower index.
randomk: int32 k | uint32 flags (bit 0: the chunk held a NaN/Inf) | k float32 values. Indices:
         the k smallest (philox word, index) pairs under (seed, seq, stream 0) of global elements
         elem_offset .. elem_offset + n - 1; decode regenerates them. Values are not rescaled.
"""
import math

import torch

from .philox import philox_words

M32 = 0xFFFFFFFF


def k_for(ratio: float, n: int) -> int:
    if n <= 0:
        return 0
    return min(n, max(1, math.ceil(ratio * n)))


def _i32(v) -> torch.Tensor:
    return torch.tensor([v], dtype=torch.int64).to(torch.int32).view(torch.uint8)


def topk_indices(x: torch.Tensor, k: int) -> torch.Tensor:
    n = x.numel()
    key = x.view(torch.int32).to(torch.int64) & 0x7FFFFFFF
    comp = (key << 32) | (M32 - torch.arange(n, dtype=torch.int64))
    return torch.topk(comp, k, largest=True).indices.sort().values


def randomk_indices(n: int, k: int, seed: int, seq: int, elem_offset: int) -> torch.Tensor:
    w = philox_words(seed, seq, 0, elem_offset, n)
    comp = (w << 31) | torch.arange(n, dtype=torch.int64)  # same order as (w << 32 | i); i < 2**31
    return torch.topk(comp, k, largest=False).indices.sort().values


def topk_encode(ratio: float, x: torch.Tensor) -> torch.Tensor:
    x = x.float().reshape(-1)
    k = k_for(ratio, x.numel())
    idx = topk_indices(x, k) if k else torch.zeros(0, dtype=torch.int64)
    return torch.cat([_i32(k), idx.to(torch.int32).view(torch.uint8), x[idx].contiguous().view(torch.uint8)])


def topk_decode(ratio: float, payload: torch.Tensor, n: int) -> torch.Tensor:
    k = k_for(ratio, n)
    if payload.numel() != 4 + 8 * k:
        raise RuntimeError("payload size mismatch")
    body = payload.clone()
    if int(body[:4].view(torch.int32)[0]) != k:
        raise RuntimeError("bad count")
    idx = body[4:4 + 4 * k].view(torch.int32).long()
    val = body[4 + 4 * k:].view(torch.float32)
    out = torch.zeros(n)
    out[idx] = val
    return out


def randomk_encode(ratio: float, x: torch.Tensor, seed: int, seq: int, elem_offset: int) -> torch.Tensor:
    x = x.float().reshape(-1)
    n = x.numel()
    k = k_for(ratio, n)
    flags = int(bool((~torch.isfinite(x)).any())) if n else 0
    idx = randomk_indices(n, k, seed, seq, elem_offset) if k else torch.zeros(0, dtype=torch.int64)
    return torch.cat([_i32(k), _i32(flags), x[idx].contiguous().view(torch.uint8)])


def randomk_decode(ratio: float, payload: torch.Tensor, n: int, seed: int, seq: int, elem_offset: int) -> torch.Tensor:
    k = k_for(ratio, n)
    if payload.numel() != 8 + 4 * k:
        raise RuntimeError("payload size mismatch")
    body = payload.clone()
    head = body[:8].view(torch.int32)
    if int(head[0]) != k or int(head[1]) not in (0, 1):
        raise RuntimeError("bad header")
    if int(head[1]) == 1:
        return torch.full((n,), float("nan"))
    out = torch.zeros(n)
    if k:
        out[randomk_indices(n, k, seed, seq, elem_offset)] = body[8:].view(torch.float32)
    return out
