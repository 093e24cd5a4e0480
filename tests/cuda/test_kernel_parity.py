"""CPU and CUDA codec kernels give the same bytes (invariant 3) for every codec, size, dtype,
rounding mode and element offset; decoded values are equal bit for bit (NaNs compared as NaN:
GPU arithmetic produces the canonical NaN payload)."""
import pytest
import torch

import ringzip

pytestmark = pytest.mark.cuda

CPU = ringzip._C.codec
GPU = getattr(ringzip._C, "cuda", None)
SEED, SEQ, STREAM, STREAM2 = 0x1234_5678_9ABC_DEF0, 7, (3 << 8) | 1, (2 << 8) | 2
QUANT = ["q8", "q4", "q2", "q1"]
ALL = ["none", "fp16", "bf16", *QUANT, "topk:0.01", "topk:0.3", "randomk:0.01", "randomk:0.3"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SIZES = [0, 1, 7, 511, 512, 513, 3 * 512 + 129, 10_007, 100_003]


def sample(n, dtype=torch.float32, seed=0, special=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * torch.exp(torch.randn(n, generator=g))
    if n > 40:
        x[5:25] = 0.0
        x[30] = -0.0
        x[31:35] = x[36]  # ties
    if special and n > 2000:
        x[1000] = float("nan")
        x[1700] = float("inf")
        x[1800:1810] = 1e-42  # denormals
    return x.to(dtype)


def same_floats(a, b):
    a, b = a.cpu(), b.cpu()
    if a.shape != b.shape:
        return False
    na, nb = torch.isnan(a), torch.isnan(b)
    if not torch.equal(na, nb):
        return False
    return torch.equal(a[~na].view(torch.int32), b[~nb].view(torch.int32))


def modes(spec):
    return [True, False] if spec in QUANT else [True]


@pytest.mark.parametrize("spec", ALL)
@pytest.mark.parametrize("dtype", DTYPES)
def test_encode_decode_parity(spec, dtype):
    for n in SIZES:
        for special in (False, True):
            x = sample(n, dtype, seed=n, special=special)
            xd = x.cuda()
            for stochastic in modes(spec):
                for off in (0, 3, 1 << 33):
                    args = (SEED, SEQ, STREAM, off, 512, stochastic)
                    p = CPU.encode(spec, x, *args)
                    q = GPU.encode(spec, xd, *args)
                    assert torch.equal(p, q.cpu()), (spec, dtype, n, stochastic, off, special)
                    y = CPU.decode(spec, p, n, SEED, SEQ, STREAM, off, 512)
                    z = GPU.decode(spec, q, n, SEED, SEQ, STREAM, off, 512)
                    assert same_floats(y, z), (spec, dtype, n, off)


@pytest.mark.parametrize("spec", ALL)
@pytest.mark.parametrize("bucket", [8, 512, 4096])
def test_accumulate_and_fused_parity(spec, bucket):
    for n in [1, 9, 1000, 65_537]:
        x, loc = sample(n, seed=1), sample(n, seed=2)
        acc = sample(n, seed=3)
        for stochastic in modes(spec):
            for off in (0, 5):
                p = CPU.encode(spec, x, SEED, SEQ, STREAM, off, bucket, stochastic)
                a1, a2 = acc.clone(), acc.cuda()
                CPU.decode_accumulate(spec, p, a1, SEED, SEQ, STREAM, off, bucket)
                GPU.decode_accumulate(spec, p.cuda(), a2, SEED, SEQ, STREAM, off, bucket)
                assert same_floats(a1, a2), (spec, n, bucket, off)
                f1 = CPU.decode_add_encode(spec, p, loc, SEED, SEQ, STREAM, STREAM2, off, bucket, stochastic)
                f2 = GPU.decode_add_encode(spec, p.cuda(), loc.cuda(), SEED, SEQ, STREAM, STREAM2, off, bucket, stochastic)
                assert torch.equal(f1, f2.cpu()), (spec, n, bucket, stochastic, off)


def test_unaligned_payloads():
    """Payload parts start at any byte inside a collective's wire buffer."""
    for spec in ["q4", "q2", "q1", "fp16", "none"]:
        x = sample(3000, seed=9)
        p = CPU.encode(spec, x, SEED, SEQ, STREAM, 17)
        buf = torch.zeros(p.numel() + 3, dtype=torch.uint8, device="cuda")
        buf[3:] = p.cuda()
        y = GPU.decode(spec, buf[3:], 3000, SEED, SEQ, STREAM, 17)
        assert same_floats(CPU.decode(spec, p, 3000, SEED, SEQ, STREAM, 17), y), spec


@pytest.mark.parametrize("spec", ["q4", "q1", "topk:0.01", "randomk:0.01", "topk:0.001"])
def test_large_parity(spec):
    n = 3_000_017
    x = sample(n, seed=4)
    p = CPU.encode(spec, x, SEED, SEQ, STREAM)
    q = GPU.encode(spec, x.cuda(), SEED, SEQ, STREAM)
    assert torch.equal(p, q.cpu())


def test_topk_indices_rule():
    """Largest |x|, NaN > Inf > finite, ties to the lower index, ascending."""
    x = torch.tensor([1.0, -3.0, 3.0, float("nan"), 2.0, float("-inf"), 3.0, 0.5])
    idx = GPU.topk_indices(x.cuda(), 4).cpu().tolist()
    assert idx == [1, 2, 3, 5]
    big = sample(1_000_000, seed=5)
    k = 10_000
    got = GPU.topk_indices(big.cuda(), k).cpu()
    ref = torch.topk(big.abs(), k).indices.sort().values.to(torch.int32)
    assert torch.equal(got, ref)


# ---- error feedback: the fused ops of the CUDA path's Compute (collective/cuda_compute.cc) --------------
# ringzip._C.cuda.{residual, encode_feedback, topk_feedback} run through the Compute the CUDA
# collectives use, on the current stream. They never report a finite residual (that would need a
# host sync): the collectives then scan it on the device.

FEEDBACK = ["none", "fp16", "bf16", *QUANT, "topk:0.01", "topk:0.3", "randomk:0.05"]
FB_SIZES = [0, 1, 9, 1000, 65_537]


def same_topk_payload(p, q, n, spec):
    """Top-k payloads: count and indices byte for byte, values as floats (NaN payload bits aside)."""
    p, q = p.cpu(), q.cpu()
    k = CPU.k_for(spec, n)
    head = 4 + 4 * k
    return p.numel() == q.numel() and torch.equal(p[:head], q[:head]) and \
        same_floats(p[head:].view(torch.float32), q[head:].view(torch.float32))


@pytest.mark.parametrize("spec", FEEDBACK)
def test_residual_parity(spec):
    for n in FB_SIZES:
        for special in (False, True):
            x = sample(n, seed=n + 1, special=special)
            for stochastic in modes(spec):
                for off in (0, 3):
                    p = CPU.encode(spec, x, SEED, SEQ, STREAM, off, 512, stochastic)
                    r1, _ = CPU.residual(spec, p, x, SEED, SEQ, STREAM, off, 512)
                    r2, finite = GPU.residual(spec, p.cuda(), x.cuda(), SEED, SEQ, STREAM, off, 512)
                    assert finite is False
                    assert same_floats(r1, r2), (spec, n, special, stochastic, off)


@pytest.mark.parametrize("spec", FEEDBACK)
@pytest.mark.parametrize("bucket", [8, 512, 4096])
def test_encode_feedback_parity(spec, bucket):
    for n in FB_SIZES:
        # NaN/Inf: the q-codecs' payload of a non-finite bucket is fixed (NaN scale, zero codes);
        # other codecs carry the sum's NaN, whose payload bits GPU arithmetic canonicalizes.
        for special in (False, True) if spec in QUANT else (False,):
            x = sample(n, seed=7, special=special)
            r = sample(n, seed=8) * 0.25
            for stochastic in modes(spec):
                for off in (0, 5):
                    r1, r2 = r.clone(), r.cuda()
                    p1, _ = CPU.encode_feedback(spec, x, r1, SEED, SEQ, STREAM, off, bucket, stochastic)
                    p2, finite = GPU.encode_feedback(spec, x.cuda(), r2, SEED, SEQ, STREAM, off, bucket, stochastic)
                    assert finite is False
                    assert torch.equal(p1, p2.cpu()), (spec, n, bucket, special, stochastic, off)
                    assert same_floats(r1, r2), (spec, n, bucket, special, stochastic, off)


@pytest.mark.parametrize("spec", ["topk:0.01", "topk:0.3", "topk:1"])
def test_topk_feedback_parity(spec):
    for n in [0, 1, 7, 1000, 70_000, 1_000_003]:
        for special in (False, True):
            x = sample(n, seed=11, special=special)
            r = sample(n, seed=12) * 0.5
            x1, r1, x2, r2 = x.clone(), r.clone(), x.cuda(), r.cuda()
            p1 = CPU.topk_feedback(spec, x1, r1)
            p2 = GPU.topk_feedback(spec, x2, r2)
            if special:
                assert same_topk_payload(p1, p2, n, spec), (spec, n)
            else:
                assert torch.equal(p1, p2.cpu()), (spec, n)
            assert same_floats(r1, r2), (spec, n, special)
            assert torch.equal(x1, x2.cpu()), (spec, n, special)  # cleared for the sparse sum


def test_feedback_ops_keep_other_inputs():
    """encode_feedback leaves x alone; residual leaves x alone (only r and the payload change)."""
    x = sample(10_007, seed=21)
    xd = x.cuda()
    r = torch.zeros_like(xd)
    GPU.encode_feedback("q4", xd, r, SEED, SEQ, STREAM)
    p = GPU.encode("q4", xd, SEED, SEQ, STREAM)
    GPU.residual("q4", p, xd, SEED, SEQ, STREAM)
    assert torch.equal(xd.cpu(), x)
