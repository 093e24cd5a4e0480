"""Per-element error bounds of compressed all-reduce / reduce-scatter, derived from the codec
bounds of docs/wire-format.md and the algorithm steps of csrc/collective/compressed/.

Everything is computed in float64 from the inputs of *all* ranks (every rank can regenerate
them, see ``gen``), so each rank checks its own output without extra communication.

Codec bound of one encode of a chunk, per element (``enc_err``), given ``a`` >= |value encoded|
elementwise (an upper bound is enough: every bound below is monotone in ``a``):

* none: 0;  fp16: 2^-11 a + 2^-25 (subnormals);  bf16: 2^-8 a (+ a denormal floor)
* q8/q4/q2 (s = 2^(b-1)-1, bucket scale m = max a over the element's bucket):
  stochastic m/s, nearest m/(2s)   (+ 2^-20 m for the float32 arithmetic of t = x*inv, t+u, decode)
* q1: a + mean(a) over the bucket   (|x - sign(x) mean|x|| <= |x| + mean|x|)

Buckets are chunk-local: an algorithm encodes the part ``[begin[i], begin[i+1])`` of the
tensor with ``even_parts`` (first ``count % n`` parts one element longer), and the buckets of
``bucket`` elements start at each part's first element.

Algorithms (S = exact sum, x_r = rank r's input, o = owner of the element's part):

* sra: phase 1 every rank r != o encodes x_r once (owner's own part exact):
  E1 = sum_{r != o} enc(|x_r|); the owner encodes its sum S' once, |S'| <= |S| + E1:
  E = E1 + enc(|S| + E1).
* ring: part p is encoded first by rank p+1 (its own data), then every following rank decodes,
  adds its data and re-encodes the partial sum P_k = x_{p+1} + ... + x_{p+k}; the owner p adds
  its data exactly and encodes the full sum for the all-gather:
  E_k = E_{k-1} + enc(|P_k| + E_{k-1}), k = 1..n-1;  E = E_{n-1} + enc(|S| + E_{n-1}).
* reduce-scatter (phase 1 only): E = E1.

Plus float32 slack for the additions: (n + 3) 2^-23 (sum_r |x_r| + E).
"""
from __future__ import annotations

import zlib

import torch

QBITS = {"q8": 8, "q4": 4, "q2": 2}
TIGHTNESS: dict = {}  # check name -> max err / bound seen (diagnostics: how sharp the bounds are)


def gen(key: str, rank: int, shape, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    """Deterministic N(0, scale^2) input of ``rank`` for check ``key`` (any rank can rebuild it)."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    g = torch.Generator().manual_seed(zlib.crc32(f"{key}|{rank}".encode()))
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def even_parts(count: int, n: int) -> list[int]:
    return [count // n * i + min(i, count % n) for i in range(n + 1)]


def owner_of(count: int, n: int) -> torch.Tensor:
    b = even_parts(count, n)
    own = torch.empty(count, dtype=torch.int64)
    for i in range(n):
        own[b[i]:b[i + 1]] = i
    return own


def bucket_reduce(a: torch.Tensor, begin: list[int], bucket: int, how: str) -> torch.Tensor:
    """max or mean of ``a`` over each element's (chunk-local) bucket, broadcast to the elements."""
    out = torch.zeros_like(a)
    for i in range(len(begin) - 1):
        seg = a[begin[i]:begin[i + 1]]
        m = seg.numel()
        if m == 0:
            continue
        nb = -(-m // bucket)
        pad = torch.zeros(nb * bucket, dtype=a.dtype)
        pad[:m] = seg
        v = pad.view(nb, bucket)
        if how == "max":
            r = v.amax(1)
        else:
            cnt = torch.full((nb,), float(bucket), dtype=a.dtype)
            cnt[-1] = m - (nb - 1) * bucket
            r = v.sum(1) / cnt
        out[begin[i]:begin[i + 1]] = r.repeat_interleave(bucket)[:m]
    return out


def enc_err(codec: str, a: torch.Tensor, begin: list[int], bucket: int = 512, rounding: str = "stochastic") -> torch.Tensor:
    """Max |x - decode(encode(x))| per element for any x with |x| <= a (see module doc)."""
    if codec == "none":
        return torch.zeros_like(a)
    if codec == "fp16":
        return a * 2.0**-11 + 2.0**-25
    if codec == "bf16":
        return a * 2.0**-8 + 1e-37
    if codec in QBITS:
        s = 2 ** (QBITS[codec] - 1) - 1
        m = bucket_reduce(a, begin, bucket, "max")
        return m * ((1.0 if rounding == "stochastic" else 0.5) / s + 2.0**-20)
    if codec == "q1":
        return a + bucket_reduce(a, begin, bucket, "mean") * (1 + 2.0**-20)
    raise ValueError(f"no dense bound for codec {codec!r}")


def _slack(xs, e):
    n = len(xs)
    return (n + 3) * 2.0**-23 * (sum(x.abs() for x in xs) + e)


def sra_bound(codec: str, xs: list[torch.Tensor], bucket=512, rounding="stochastic", phase2=True) -> torch.Tensor:
    n, count = len(xs), xs[0].numel()
    begin, own = even_parts(count, n), owner_of(count, n)
    e1 = torch.zeros(count, dtype=torch.float64)
    for r, x in enumerate(xs):
        e = enc_err(codec, x.abs(), begin, bucket, rounding)
        e[own == r] = 0
        e1 += e
    if not phase2:
        return e1 + _slack(xs, e1)
    s = sum(xs)
    e = e1 + enc_err(codec, s.abs() + e1, begin, bucket, rounding)
    return e + _slack(xs, e)


def ring_bound(codec: str, xs: list[torch.Tensor], bucket=512, rounding="stochastic") -> torch.Tensor:
    n, count = len(xs), xs[0].numel()
    begin, own = even_parts(count, n), owner_of(count, n)
    X = torch.stack(xs)
    p = torch.zeros(count, dtype=torch.float64)
    e = torch.zeros(count, dtype=torch.float64)
    for k in range(1, n):
        p = p + X.gather(0, ((own + k) % n).unsqueeze(0)).squeeze(0)
        e = e + enc_err(codec, p.abs() + e, begin, bucket, rounding)
    e = e + enc_err(codec, sum(xs).abs() + e, begin, bucket, rounding)
    return e + _slack(xs, e)


def check_within(out: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor, what: str) -> None:
    """Every element of ``out`` within ``bound`` of the fp64 reference (NaN fails)."""
    err = (out.double().reshape(-1) - ref.reshape(-1)).abs()
    bound = bound.reshape(-1)
    TIGHTNESS[what] = (err / bound.clamp_min(1e-300)).max().item() if err.numel() else 0.0
    bad = ~(err <= bound)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())}/{err.numel()} elements outside the error bound; first at {i}: "
            f"got {out.reshape(-1)[i].item()!r}, exact {ref.reshape(-1)[i].item()!r}, "
            f"|err| {err[i].item():.4g} > bound {bound[i].item():.4g}; max err/bound "
            f"{(err / bound.clamp_min(1e-300)).max().item():.3g}"
        )
