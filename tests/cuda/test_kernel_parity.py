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
