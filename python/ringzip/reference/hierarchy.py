"""Pure-torch oracle of the node-aware collectives (csrc/collective/hierarchy/), bit for bit:
the flat reference collectives composed in the order of the C++ steps -- a ring reduce-scatter
inside every node, the inter-node step on every local shard among the ranks of that local rank
(seed ``seed ^ local << 48 ^ chunk << 40`` for compressed shards, residual offsets those of the
shard), and a ring all-gather inside every node. All-reduce runs these steps per chunk of about
8 MiB (at most 8 chunks, ``chunks``), as the C++ pipeline does. ``nodes[r]`` is any label of
rank r's node."""
from __future__ import annotations

import torch

from . import BUCKET, TOPK_BLOCK
from .collectives import (allreduce as flat_allreduce, compressed_allreduce as flat_compressed_allreduce,
                          compressed_reduce_scatter as flat_compressed_reduce_scatter, even_parts,
                          ring_allgather, ring_reduce_scatter)


def members(nodes: list) -> list[list[int]]:
    """Ranks of every node, nodes in order of their lowest rank."""
    out: dict = {}
    for r, label in enumerate(nodes):
        out.setdefault(label, []).append(r)
    return list(out.values())


def _flat(xs):
    return [x.contiguous().reshape(-1).clone() for x in xs]


CHUNK_BYTES = 8 << 20  # csrc/collective/hierarchy/hierarchy.cc kChunkBytes, kMaxChunks
MAX_CHUNKS = 8


def chunks(count: int, elem_bytes: int) -> list[int]:
    return even_parts(count, max(1, min(MAX_CHUNKS, count * elem_bytes // CHUNK_BYTES)))


def _shard_seed(seed: int, local: int, chunk: int = 0) -> int:
    return seed ^ (local << 48) ^ (chunk << 40)


def _by_node(d, nodes, op, inter, parts_of):
    """Intra-node ring reduce-scatter of every rank's buffer d[r] cut by parts_of(count, per),
    then inter(local, ranks, shards, offset) -> new shards."""
    groups = members(nodes)
    per = len(groups[0])
    parts = parts_of(d[0].numel(), per)
    for m in groups:
        for r, v in zip(m, ring_reduce_scatter([d[r] for r in m], op, parts)):
            d[r] = v
    for local in range(per):
        ranks = [m[local] for m in groups]
        sl = slice(parts[local], parts[local + 1])
        for r, v in zip(ranks, inter(local, ranks, [d[r][sl] for r in ranks], parts[local])):
            d[r][sl] = v
    return groups, parts


def _allreduce_chunks(d, nodes, op, inter):
    """inter(local, ranks, shards, offset, chunk) -> new shards; d: float buffers, in place."""
    at = chunks(d[0].numel(), d[0].element_size())
    for i in range(len(at) - 1):
        sl = slice(at[i], at[i + 1])
        part = [x[sl].clone() for x in d]
        groups, parts = _by_node(part, nodes, op, lambda l, r, sh, o, i=i, base=at[i]: inter(l, r, sh, base + o, i),
                                 even_parts)
        for m in groups:
            for r, v in zip(m, ring_allgather([part[r] for r in m], parts)):
                d[r][sl] = v
    return d


def allreduce(xs, nodes, op="sum", algo="auto", seq=0):
    return _allreduce_chunks(_flat(xs), nodes, op, lambda _l, _r, shards, _o, _i: flat_allreduce(shards, op, algo, seq))


def compressed_allreduce(xs, nodes, codec, algorithm="auto", seed=0, rng_seq=0, seq=0, topk_block=TOPK_BLOCK,
                         bucket=BUCKET, stochastic=True, residuals=None):
    d = [x.float().contiguous().reshape(-1).clone() for x in xs]
    res = None if residuals is None else [r.float().contiguous().reshape(-1).clone() for r in residuals]

    def inter(local, ranks, shards, off, chunk):
        sub = None if res is None else [res[r][off:off + shards[0].numel()] for r in ranks]
        out, new = flat_compressed_allreduce(shards, codec, algorithm, _shard_seed(seed, local, chunk), rng_seq, seq,
                                             topk_block, bucket, stochastic, sub)
        if res is not None:
            for r, v in zip(ranks, new):
                res[r][off:off + v.numel()] = v
        return out

    return _allreduce_chunks(d, nodes, "sum", inter), res


def _staged(d, groups, n):
    """Parts reordered so that local rank l's shard holds, node by node, the parts of the ranks
    of local rank l; returns the staged buffers and the slot of every rank's part."""
    part = d[0].numel() // n
    slot = {r: local * len(groups) + node for node, m in enumerate(groups) for local, r in enumerate(m)}
    staged = []
    for x in d:
        s = torch.empty_like(x)
        for r in range(n):
            s[slot[r] * part:(slot[r] + 1) * part] = x[r * part:(r + 1) * part]
        staged.append(s)
    return staged, slot, part


def reduce_scatter(xs, nodes, op="sum"):
    """Every rank's own part (rank r: part r of the n equal parts) of the reduction."""
    d = _flat(xs)
    n = len(d)
    staged, slot, part = _staged(d, members(nodes), n)
    _by_node(staged, nodes, op, lambda _l, _r, shards, _o: ring_reduce_scatter(shards, op), even_parts)
    return [staged[r][slot[r] * part:(slot[r] + 1) * part] for r in range(n)]


def compressed_reduce_scatter(xs, nodes, codec, seed=0, rng_seq=0, bucket=BUCKET, stochastic=True, residuals=None):
    """(every rank's own part, new residuals in the staged order of the C++ side)."""
    d = [x.float().contiguous().reshape(-1).clone() for x in xs]
    res = None if residuals is None else [r.float().contiguous().reshape(-1).clone() for r in residuals]
    n = len(d)
    staged, slot, part = _staged(d, members(nodes), n)

    def inter(local, ranks, shards, off):
        sub = None if res is None else [res[r][off:off + shards[0].numel()] for r in ranks]
        out, new = flat_compressed_reduce_scatter(shards, codec, _shard_seed(seed, local), rng_seq, bucket,
                                                  stochastic, sub)
        if res is not None:
            for r, v in zip(ranks, new):
                res[r][off:off + v.numel()] = v
        return out

    _by_node(staged, nodes, "sum", inter, even_parts)
    return [staged[r][slot[r] * part:(slot[r] + 1) * part] for r in range(n)], res
