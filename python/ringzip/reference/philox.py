"""Philox4x32-10 in plain torch integer ops (int64 tensors holding uint32 values).

Keying (same as csrc/codec/philox.h): key = (seed & 0xffffffff, seed >> 32); counter =
(q & 0xffffffff, q >> 32, seq, stream) for counter block q.
Random-k: element g (global index) uses word g % 4 of block g // 4 (philox_words).
Stochastic q8/q4/q2, codec version 2: element g uses byte g % 4 of word (g // 4) % 4 of block
g // 16 (philox_bytes), dither u = (byte + 0.5) / 256 (uniform_from_bytes).
"""
import torch

M32 = 0xFFFFFFFF
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85


def _mulhilo(a: torch.Tensor, m: int):
    """(hi, lo) 32-bit halves of a * m for uint32 a (int64 tensor) and a uint32 constant m."""
    ml, mh = m & 0xFFFF, m >> 16
    t1 = a * ml  # < 2**48
    t2 = a * mh  # < 2**48
    mid = t1 + ((t2 & 0xFFFF) << 16)  # < 2**49
    lo = mid & M32
    hi = (t2 >> 16) + (mid >> 32)
    return hi & M32, lo


def philox4x32_10(c0, c1, c2, c3, k0: int, k1: int):
    """Ten rounds on counter tensors (int64, broadcastable); returns four int64 word tensors."""
    for _ in range(10):
        hi0, lo0 = _mulhilo(c0, M0)
        hi1, lo1 = _mulhilo(c2, M1)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0, k1 = (k0 + W0) & M32, (k1 + W1) & M32
    return c0, c1, c2, c3


def _blocks(seed: int, seq: int, stream: int, q0: int, q1: int) -> torch.Tensor:
    """Words of counter blocks q0 .. q1 as an int64 tensor of shape (q1 - q0 + 1, 4)."""
    q = torch.arange(q0, q1 + 1, dtype=torch.int64)
    full = lambda v: torch.full_like(q, v)  # noqa: E731
    w = philox4x32_10(q & M32, q >> 32, full(seq & M32), full(stream & M32), seed & M32, (seed >> 32) & M32)
    return torch.stack(w, dim=1)


def philox_words(seed: int, seq: int, stream: int, g0: int, n: int) -> torch.Tensor:
    """Random uint32 words (as int64) of global elements g0 .. g0 + n - 1 (random-k)."""
    if n == 0:
        return torch.zeros(0, dtype=torch.int64)
    q0 = g0 // 4
    words = _blocks(seed, seq, stream, q0, (g0 + n - 1) // 4).reshape(-1)
    start = g0 - 4 * q0
    return words[start:start + n]


def philox_bytes(seed: int, seq: int, stream: int, g0: int, n: int) -> torch.Tensor:
    """Dither bytes (int64 in [0, 255]) of global elements g0 .. g0 + n - 1 (codec version 2):
    byte g % 4 of word (g // 4) % 4 of block g // 16."""
    if n == 0:
        return torch.zeros(0, dtype=torch.int64)
    q0 = g0 // 16
    words = _blocks(seed, seq, stream, q0, (g0 + n - 1) // 16)  # (blocks, 4)
    by = (words[:, :, None] >> torch.tensor([0, 8, 16, 24])) & 0xFF  # (blocks, word, byte)
    start = g0 - 16 * q0
    return by.reshape(-1)[start:start + n]


def uniform_from_words(w: torch.Tensor) -> torch.Tensor:
    """Exact float32 in [0, 1): top 24 bits times 2**-24 (codec version 1's dither; kept for tests)."""
    return (w >> 8).to(torch.float32) * (2.0 ** -24)


def uniform_from_bytes(b: torch.Tensor) -> torch.Tensor:
    """Dither u = (byte + 0.5) / 256, exact in float32: the centres of the 256 cells of [0, 1)."""
    return (b.to(torch.float32) + 0.5) * (1.0 / 256.0)
