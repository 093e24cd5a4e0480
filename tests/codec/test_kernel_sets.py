"""Every set of fused q8/q4/q2/q1 kernels this CPU runs (AVX-512, AVX2) against the portable passes,
byte for byte, in subprocesses that pick a set with RINGZIP_QUANT_KERNELS. A machine with
AVX-512 checks both sets; one with AVX2 only, the AVX2 set. Shapes cover every group remainder
(the fused kernels work in groups of 32 or 64 elements), tiny buckets, mixed magnitudes, zeros
and ties, subnormal buckets (steps of 0), stochastic and nearest rounding, decode and
decode_accumulate, decode_add_encode (the fused decode + add), encode_feedback (payload and
residual) and SRA all-reduces over loopback ranks (each owner's reduce + encode, with residuals)."""
import os
import subprocess
import sys


PROBE = r"""
import hashlib, sys, torch, ringzip
C = ringzip._C.codec
L = ringzip._C.loopback
h = hashlib.sha256()
g = torch.Generator().manual_seed(11)
for n in [1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100, 511, 512, 513, 1000, 4097, 20011]:
    for bucket in [8, 24, 64, 512, 2048]:
        x = torch.randn(n, generator=g) * torch.exp(3 * torch.randn(n, generator=g))
        x[: n // 5] = 0.0
        x[n // 5: n // 5 + 600] = 2e36  # q1 buckets whose lane sums overflow
        # subnormal buckets: steps that underflow to 0, so decoded values of either sign of 0
        x[n // 5 + 600: n // 5 + 900] = 1e-45 * torch.randn(n, generator=g)[n // 5 + 600: n // 5 + 900].sign()
        local = torch.randn(n, generator=g)
        for spec in ["q8", "q4", "q2", "q1"]:
            for st in [True, False]:
                p = C.encode(spec, x, 1, 2, 3, 5, bucket, st)
                q = C.decode_add_encode(spec, p, local, 1, 2, 3, 4, 5, bucket, st)
                r = local.clone()
                f, _ = C.encode_feedback(spec, x, r, 1, 2, 3, 5, bucket, st)
                acc = local.clone()
                C.decode_accumulate(spec, p, acc, 1, 2, 3, 5, bucket)
                for t in (p, q, C.decode(spec, q, n, 1, 2, 4, 5, bucket), C.decode(spec, p, n, 1, 2, 3, 5, bucket),
                          acc, f, r):
                    h.update(t.numpy().tobytes())
                if n in (65, 4097, 20011) and bucket in (24, 512):  # SRA: the reduce + encode of every owner
                    outs, res = L.compressed("allreduce", [x, local, -x], spec, algorithm="sra", bucket=bucket,
                                             rounding="stochastic" if st else "nearest",
                                             residuals=[local.clone() for _ in range(3)])
                    for t in list(outs) + list(res):
                        h.update(t.numpy().tobytes())
for spec in ["q8", "q4"]:  # a step of 0 with codes below the middle: values of -0 (no encoder writes these)
    p = C.encode(spec, torch.zeros(100), 1, 2, 3)
    p[:4] = torch.tensor([1e-45]).view(torch.uint8)
    p[4:] = 0
    h.update(C.decode(spec, p, 100, 1, 2, 3).numpy().tobytes())
print(C.quant_kernels(), h.hexdigest())
"""


def run(kernels: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, RINGZIP_QUANT_KERNELS=kernels)
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)


def test_fused_kernel_sets_match_portable_bytes():
    portable = run("portable")
    assert portable.returncode == 0, portable.stderr
    name, want = portable.stdout.split()
    assert name == "portable"
    compared = []
    for kernels in ("avx512", "avx2"):
        got = run(kernels)
        if got.returncode != 0:
            assert "cannot run those kernels" in got.stderr, got.stderr  # not on this CPU
            continue
        assert got.stdout.split() == [kernels, want], f"{kernels} kernels differ from the portable passes"
        compared.append(kernels)
    default = run("auto")
    assert default.returncode == 0 and default.stdout.split() == [compared[0] if compared else "portable", want]


def test_unknown_kernel_set_is_a_clear_error():
    got = subprocess.run([sys.executable, "-c", "import torch, ringzip; ringzip._C.codec.encode('q4', torch.ones(64), 1, 2, 3)"],
                         env=dict(os.environ, RINGZIP_QUANT_KERNELS="sse9"), capture_output=True, text=True, timeout=120)
    assert got.returncode != 0
    assert "RINGZIP_QUANT_KERNELS=sse9: unknown" in got.stderr
