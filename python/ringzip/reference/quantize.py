"""q8 / q4 / q2 / q1 reference (see docs/wire-format.md and csrc/codec/quantize_math.h).

Layout: ceil(n / bucket) float32 scales, then codes packed LSB-first (element i at bit i * b of
the code area). q8/q4/q2: scale = max|x|, s = 2**(b-1) - 1, inv = fl(s / scale) (0 for a zero or overflowing
bucket), t = fl(x * inv), code = clamp(floor(fl(t + u)), -s, s) (stochastic; codec version 2:
u = (byte + 0.5) / 256 from element g's Philox byte, see philox.py) or clamp(rne(t)) (nearest),
stored as code + s; value = fl(code * fl(scale / s)). q1: scale = fl(sum|x| / count),
sum in 8 lanes (lane j % 8 accumulates element j of the bucket in order; lanes combined as
((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))), bit = x >= 0, value = bit ? scale : -scale.
A bucket with NaN/Inf: scale = NaN (0x7fc00000), codes 0.
"""
import math

import torch

from .philox import philox_bytes, uniform_from_bytes

NAN_BITS = 0x7FC00000
LANES = 8


def levels(bits: int) -> int:
    return (1 << (bits - 1)) - 1


def _f32(v: float) -> torch.Tensor:
    return torch.tensor(v, dtype=torch.float32)


def _pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    per = 8 // bits
    n = codes.numel()
    pad = (-n) % per
    c = torch.cat([codes.to(torch.int32), torch.zeros(pad, dtype=torch.int32)]).view(-1, per)
    shifts = torch.arange(per, dtype=torch.int32) * bits
    return (c << shifts).sum(dim=1).to(torch.uint8)


def _unpack(data: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    per = 8 // bits
    shifts = torch.arange(per, dtype=torch.int32) * bits
    c = (data.to(torch.int32)[:, None] >> shifts) & ((1 << bits) - 1)
    return c.reshape(-1)[:n]


def encoded_bytes(bits: int, bucket: int, n: int) -> int:
    return 4 * math.ceil(n / bucket) + math.ceil(n * bits / 8)


FLT_MAX = 3.4028234663852886e38


def _q1_lane_sum(a: torch.Tensor, nb: int, bucket: int) -> torch.Tensor:
    """Per bucket: element j adds into lane j % 8 in order, lanes combined in the fixed tree."""
    a = a.view(nb, bucket // LANES, LANES)
    lane = torch.zeros(nb, LANES)
    for t in range(bucket // LANES):
        lane = lane + a[:, t, :]
    l = [lane[:, i] for i in range(LANES)]  # noqa: E741
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))


def encode(bits: int, x: torch.Tensor, bucket: int, stochastic: bool, seed: int, seq: int, stream: int,
           elem_offset: int) -> torch.Tensor:
    x = x.float().reshape(-1)
    n = x.numel()
    if n == 0:
        return torch.zeros(0, dtype=torch.uint8)
    nb = math.ceil(n / bucket)
    xp = torch.cat([x, torch.zeros(nb * bucket - n)]).view(nb, bucket)
    amax = (xp.view(torch.int32) & 0x7FFFFFFF).max(dim=1).values
    nonfinite = amax >= 0x7F800000
    if bits == 1:
        count = torch.full((nb,), float(bucket))
        count[-1] = float(n - (nb - 1) * bucket)
        scale = _q1_lane_sum(xp.abs(), nb, bucket) / count
        # A finite bucket whose sum overflows: the sums of |x| * 2^-64, the mean scaled back up,
        # capped at FLT_MAX (quantize_math.h's q1_rescaled).
        over = ~torch.isfinite(scale) & ~nonfinite
        if bool(over.any()):
            down = _q1_lane_sum(xp.abs() * _f32(2.0 ** -64), nb, bucket)
            scale = torch.where(over, torch.clamp((down / count) * _f32(2.0 ** 64), max=FLT_MAX), scale)
        codes = (xp >= 0).to(torch.int32)
    else:
        s = levels(bits)
        scale = amax.view(torch.float32)
        inv = torch.where(scale > 0, _f32(float(s)) / scale, _f32(0.0))
        inv = torch.where(torch.isfinite(inv), inv, _f32(0.0))  # max|x| < s / FLT_MAX: all codes zero
        t = xp * inv[:, None]
        if stochastic:
            u = uniform_from_bytes(philox_bytes(seed, seq, stream, elem_offset, nb * bucket)).view(nb, bucket)
            c = torch.floor(t + u)
        else:
            c = torch.round(t)  # half to even
        c = torch.nan_to_num(c, nan=0.0, posinf=0.0, neginf=0.0)  # non-finite buckets are zeroed below
        codes = c.clamp(-s, s).to(torch.int32) + s
    scale = torch.where(nonfinite, torch.tensor(NAN_BITS, dtype=torch.int32).view(torch.float32), scale)
    codes = torch.where(nonfinite[:, None], 0, codes)
    return torch.cat([scale.contiguous().view(torch.uint8), _pack(codes.reshape(-1)[:n], bits)])


def decode(bits: int, payload: torch.Tensor, n: int, bucket: int) -> torch.Tensor:
    if payload.numel() != encoded_bytes(bits, bucket, n):
        raise RuntimeError("payload size mismatch")
    if n == 0:
        return torch.zeros(0)
    nb = math.ceil(n / bucket)
    scale = payload[: 4 * nb].clone().view(torch.float32)
    codes = _unpack(payload[4 * nb:], bits, n)
    per_elem = scale.repeat_interleave(bucket)[:n]
    if bits == 1:
        return torch.where(codes == 1, per_elem, -per_elem)
    s = levels(bits)
    step = (scale / _f32(float(s))).repeat_interleave(bucket)[:n]
    return (codes - s).to(torch.float32) * step
