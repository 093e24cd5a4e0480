"""Shared helpers for the backend tests: deterministic inputs, exact and float-bound comparisons.

Comparison rule (used by every test that compares ringzip with gloo):

* Integer and bool results, and every result that involves no floating-point arithmetic
  (broadcast, gathers, scatter, all-to-all, p2p, MIN/MAX), must be bit-for-bit equal to gloo's
  (NaNs compare equal to NaNs).
* Floating SUM/PRODUCT on *integer-valued* inputs small enough that every partial result is
  representable in the dtype (|x| <= 3 for sums, x in {-2,-1,1,2} for products, <= 4 ranks) is
  exact whatever the summation order, so it must be bit-for-bit equal to gloo too.
* Floating SUM of random normal data, AVG and PREMUL_SUM are order-dependent. They are compared
  with an fp64 reference computed through gloo (gloo SUM of the fp64 inputs, premultiplied by the
  factor, 1/world_size for AVG): every element must satisfy
      |out - ref64| <= (n + 1) * (u + 2^-53) * sum_r |f * x_r| + tiny
  with n the number of ranks, u the unit roundoff of the dtype (2^-24 f32, 2^-53 f64, 2^-11 f16,
  2^-8 bf16): the worst-case bound of any summation order plus premultiply/divide and final
  rounding, plus the same bound for the fp64 reference's own rounding. gloo's own result is checked against the same bound (so the bound is one gloo
  reaches), and for floating all-reduce results all ranks must also hold bitwise-identical values.
"""
from __future__ import annotations

import zlib

import torch
import torch.distributed as dist

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
ALL_DTYPES = FLOATS + INTS + [torch.bool]
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.float64: 2.0**-53, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
TINY = {torch.float32: 1e-37, torch.float64: 1e-300, torch.float16: 1e-7, torch.bfloat16: 1e-37}
PREMUL_FACTOR = 0.37


def dname(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def gen(key: str, rank: int, dtype: torch.dtype, n, kind: str = "int") -> torch.Tensor:
    """Deterministic input of shape ``n`` for ``rank``; the same (key, rank) gives the same tensor.

    kind: "int" small integer values (exact sums), "prod" values in {-2,-1,1,2} ({1,2} unsigned),
    "normal" N(0,1) floats (ints: like "int"), "bits" full-range integers.
    """
    shape = (n,) if isinstance(n, int) else tuple(n)
    g = torch.Generator().manual_seed(zlib.crc32(f"{key}|{rank}".encode()))
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) < 0.5
    unsigned = dtype == torch.uint8
    if kind == "normal" and dtype in FLOATS:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    if kind == "bits" and dtype in INTS:
        info = torch.iinfo(dtype)
        return torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64).to(dtype)
    if kind == "prod":
        vals = torch.tensor([1, 2] if unsigned else [-2, -1, 1, 2], dtype=torch.int64)
        return vals[torch.randint(0, len(vals), shape, generator=g)].to(dtype)
    lo, hi = (0, 4) if unsigned else (-3, 4)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def same(actual: torch.Tensor, expected: torch.Tensor, what: str = "") -> None:
    """Bit-for-bit equality (NaN == NaN), same dtype and shape."""
    assert isinstance(actual, torch.Tensor), f"{what}: got {type(actual).__name__}, not a tensor"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != expected {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}"
    if actual.dtype.is_floating_point:
        an, en = torch.isnan(actual), torch.isnan(expected)
        assert torch.equal(an, en), f"{what}: NaN positions differ ({int((an != en).sum())} elements)"
        a = actual.masked_fill(an, 0)
        e = expected.masked_fill(en, 0)
        if not torch.equal(a, e):
            diff = (a.double() - e.double()).abs()
            idx = int(diff.reshape(-1).argmax())
            raise AssertionError(
                f"{what}: {int((a != e).sum())}/{a.numel()} elements differ; worst at flat index {idx}: "
                f"{a.reshape(-1)[idx].item()!r} vs expected {e.reshape(-1)[idx].item()!r}"
            )
    elif not torch.equal(actual, expected):
        ne = actual != expected
        idx = int(ne.reshape(-1).nonzero()[0])
        raise AssertionError(
            f"{what}: {int(ne.sum())}/{actual.numel()} elements differ; first at flat index {idx}: "
            f"{actual.reshape(-1)[idx].item()!r} vs expected {expected.reshape(-1)[idx].item()!r}"
        )


def within_bound(actual: torch.Tensor, ref64: torch.Tensor, abs64: torch.Tensor, nranks: int, what: str = "") -> None:
    """Float-error rule of the module docstring."""
    assert actual.shape == ref64.shape, f"{what}: shape {tuple(actual.shape)} != expected {tuple(ref64.shape)}"
    u = UNIT_ROUNDOFF[actual.dtype]
    # + the same bound at fp64 for the reference's own rounding (matters for float64 inputs)
    bound = (nranks + 1) * (u + 2.0**-53) * abs64 + TINY[actual.dtype]
    err = (actual.double() - ref64).abs()
    bad = ~(err <= bound)  # NaN counts as bad
    if bool(bad.any()):
        idx = int(bad.reshape(-1).nonzero()[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())}/{actual.numel()} elements outside the fp64 error bound; first at flat index {idx}: "
            f"got {actual.reshape(-1)[idx].item()!r}, fp64 reference {ref64.reshape(-1)[idx].item()!r}, "
            f"bound {bound.reshape(-1)[idx].item():.3g}"
        )


def make_op(name: str):
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return getattr(dist.ReduceOp, name)


def op_factor(name: str, world_size: int) -> float:
    return {"AVG": 1.0 / world_size, "PREMUL_SUM": PREMUL_FACTOR}.get(name, 1.0)


def valid_ops(dtype: torch.dtype) -> list[tuple[str, str]]:
    """(op, input kind) pairs that are meaningful for ``dtype``."""
    if dtype == torch.bool:
        return [(o, "int") for o in ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")]
    if dtype in INTS:
        return [("SUM", "int"), ("PRODUCT", "prod"), ("MIN", "bits"), ("MAX", "bits"),
                ("BAND", "bits"), ("BOR", "bits"), ("BXOR", "bits")]
    return [("SUM", "int"), ("SUM", "normal"), ("AVG", "int"), ("AVG", "normal"), ("PREMUL_SUM", "normal"),
            ("PRODUCT", "prod"), ("MIN", "normal"), ("MAX", "normal")]


def exact(opname: str, kind: str) -> bool:
    return opname not in ("AVG", "PREMUL_SUM") and not (opname == "SUM" and kind == "normal")


def backend_options(backend: str, **kw):
    """pg_options for the backend under test (None for gloo, used only to validate the harness)."""
    if backend != "ringzip":
        return None
    import ringzip

    return ringzip.Options(**kw)


def init_world(ctx, backend: str, **options):
    """Default group over ``backend``; returns the same ranks over gloo as the reference."""
    torch.set_num_threads(1)
    if backend == "ringzip":
        import ringzip  # noqa: F401  (registers the backend)
    dist.init_process_group(
        backend, rank=ctx.rank, world_size=ctx.world_size, init_method=ctx.init_method,
        pg_options=backend_options(backend, **options) if options else None,
    )
    return dist.new_group(backend="gloo")


def work_exception(w):
    """w.exception(), or None where torch's own binding cannot return it (torch 2.11 binds it as a
    std::exception_ptr without a converter: a TypeError for every backend, gloo's too)."""
    try:
        return w.exception()
    except TypeError as e:
        if "Unable to convert function return value" not in str(e):
            raise
        return None
