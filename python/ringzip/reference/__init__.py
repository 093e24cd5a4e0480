"""Pure-torch reference codecs: the test oracle of the C++/CUDA kernels (bit for bit).

Clarity over speed. Same signatures as ringzip._C.codec (tensors in, uint8 payload out).
"""
from dataclasses import dataclass

import torch

from . import cast, quantize, sparse
from .philox import philox4x32_10, philox_bytes, philox_words, uniform_from_bytes, uniform_from_words  # noqa: F401

CODEC_VERSION = 2  # csrc/codec/codec.h's kCodecVersion: the bits these functions define
BUCKET = 512  # the q-codecs' default bucket (codec.h's kBucketSize, which the tests compare)
TOPK_BLOCK = 1 << 20  # top-k's default selection block (codec.h's kTopkBlock)

_BITS = {"q8": 8, "q4": 4, "q2": 2, "q1": 1}


@dataclass
class Spec:
    kind: str
    ratio: float = 1.0
    bucket: int = BUCKET
    stochastic: bool = True


def parse(spec: str, bucket: int = BUCKET, stochastic: bool = True) -> Spec:
    head, _, arg = spec.partition(":")
    if head in ("none", "fp16", "bf16") or head in _BITS:
        if arg:
            raise ValueError(f"codec {head!r} takes no argument")
        if head in _BITS and (bucket < 8 or bucket % 8 or bucket > 1 << 24):
            raise ValueError(f"bucket {bucket} must be a multiple of 8 in [8, 2^24]")
        return Spec(head, 1.0, bucket, stochastic)
    if head in ("topk", "randomk"):
        r = float(arg)
        if not 0 < r <= 1:
            raise ValueError(f"ratio {r} not in (0, 1]")
        return Spec(head, r, bucket, stochastic)
    raise ValueError(f"unknown codec {spec!r}")


def k_for(spec: str, n: int) -> int:
    return sparse.k_for(parse(spec).ratio, n)


def encoded_bytes(spec: str, n: int, bucket: int = BUCKET) -> int:
    sp = parse(spec, bucket)
    if sp.kind == "none":
        return 4 * n
    if sp.kind in ("fp16", "bf16"):
        return 2 * n
    if sp.kind in _BITS:
        return quantize.encoded_bytes(_BITS[sp.kind], bucket, n)
    k = sparse.k_for(sp.ratio, n)
    return 4 + 8 * k if sp.kind == "topk" else 8 + 4 * k


def encode(spec: str, x: torch.Tensor, seed: int, seq: int, stream: int, elem_offset: int = 0, bucket: int = BUCKET,
           stochastic: bool = True) -> torch.Tensor:
    sp = parse(spec, bucket, stochastic)
    x = x.reshape(-1)
    if sp.kind in ("none", "fp16", "bf16"):
        return cast.encode(sp.kind, x)
    if sp.kind in _BITS:
        return quantize.encode(_BITS[sp.kind], x, bucket, stochastic, seed, seq, stream, elem_offset)
    if sp.kind == "topk":
        return sparse.topk_encode(sp.ratio, x)
    return sparse.randomk_encode(sp.ratio, x, seed, seq, elem_offset)


def decode(spec: str, payload: torch.Tensor, n: int, seed: int, seq: int, stream: int, elem_offset: int = 0,
           bucket: int = BUCKET) -> torch.Tensor:
    sp = parse(spec, bucket)
    if payload.numel() != encoded_bytes(spec, n, bucket):
        raise RuntimeError(f"payload of {payload.numel()} bytes, expected {encoded_bytes(spec, n, bucket)}")
    if sp.kind in ("none", "fp16", "bf16"):
        return cast.decode(sp.kind, payload, n)
    if sp.kind in _BITS:
        return quantize.decode(_BITS[sp.kind], payload, n, bucket)
    if sp.kind == "topk":
        return sparse.topk_decode(sp.ratio, payload, n)
    return sparse.randomk_decode(sp.ratio, payload, n, seed, seq, elem_offset)


def decode_accumulate(spec, payload, acc, seed, seq, stream, elem_offset=0, bucket=BUCKET) -> None:
    acc += decode(spec, payload, acc.numel(), seed, seq, stream, elem_offset, bucket)


def decode_add_encode(spec, payload, local, seed, seq, dec_stream, enc_stream, elem_offset=0, bucket=BUCKET,
                      stochastic=True) -> torch.Tensor:
    s = decode(spec, payload, local.numel(), seed, seq, dec_stream, elem_offset, bucket) + local
    return encode(spec, s, seed, seq, enc_stream, elem_offset, bucket, stochastic)
