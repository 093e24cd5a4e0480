"""C++ codec kernels vs the pure-torch reference (bit for bit), and the codecs' numerics.

Unbiasedness is checked two ways on 2000 independent stochastic encodes of a fixed vector:
aggregated (the summed error over all elements lies within 4 standard errors) and per element
(every element whose flip probability p has p(1-p) >= 0.05 has its mean within 6 exact binomial
standard errors; 4 would fail by chance on ~6% of runs with 1024 elements). Codec version 2 draws
the dither u from one Philox byte, u = (byte + 0.5) / 256, so the expectation is exact only up to
the bias bound step / 512 (docs/wire-format.md, "Stochastic rounding"):
test_stochastic_rounding_bias_bound checks that bound exactly and on the mean of 2000 calls with
different sequence numbers.
"""
import math

import pytest
import torch

import ringzip
from ringzip import reference as R

C = ringzip._C.codec
SEED, SEQ, STREAM = 0x1234_5678_9ABC_DEF0, 7, (3 << 8) | 1
QUANT = ["q8", "q4", "q2", "q1"]
ALL = ["none", "fp16", "bf16", *QUANT, "topk:0.01", "topk:0.3", "randomk:0.01", "randomk:0.3"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
B = 512
SIZES = [0, 1, 7, B - 1, B, B + 1, 3 * B + 129, 10_007]


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def sample(n: int, dtype=torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * torch.exp(torch.randn(n, generator=g))  # varied magnitudes
    if n > 40:
        x[5:25] = 0.0  # ties and zeros
        x[30] = -0.0
    return x.to(dtype)


def levels(spec: str) -> int:
    return (1 << (int(spec[1:]) - 1)) - 1


# --- Philox -------------------------------------------------------------------------------------

def test_philox_known_answers():
    """Random123's published Philox4x32-10 test vectors."""
    t = lambda v: torch.tensor([v], dtype=torch.int64)  # noqa: E731
    cases = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
             ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
             ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
              (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for ctr, key, want in cases:
        got = R.philox4x32_10(*map(t, ctr), *key)
        assert tuple(int(w) for w in got) == want


def test_codec_version():
    assert C.codec_version == R.CODEC_VERSION == 2


def test_dither_bytes():
    """Codec version 2: element g's dither byte is byte g % 4 of word (g // 4) % 4 of Philox block
    g // 16 (the word stream that random-k reads, 4 bytes per word), and u = (byte + 0.5) / 256."""
    for g0, n in [(0, 40), (3, 37), (15, 18), ((1 << 33) + 5, 29)]:
        b = R.philox_bytes(SEED, SEQ, STREAM, g0, n)
        for j in range(n):
            g = g0 + j
            w = int(R.philox_words(SEED, SEQ, STREAM, 4 * (g >> 4) + ((g >> 2) & 3), 1)[0])
            assert int(b[j]) == (w >> (8 * (g & 3))) & 0xFF, (g0, j)
    # any split of a range gives the same bytes
    whole = R.philox_bytes(SEED, SEQ, STREAM, 7, 100)
    assert torch.equal(torch.cat([R.philox_bytes(SEED, SEQ, STREAM, 7, 9), R.philox_bytes(SEED, SEQ, STREAM, 16, 91)]), whole)
    u = R.uniform_from_bytes(torch.arange(256))
    assert torch.equal(u.double(), (torch.arange(256, dtype=torch.float64) + 0.5) / 256)


# --- bit-for-bit against the reference -----------------------------------------------------------

@pytest.mark.parametrize("spec", ALL)
@pytest.mark.parametrize("dtype", DTYPES)
def test_encode_decode_match_reference(spec, dtype):
    for n in SIZES:
        x = sample(n, dtype, seed=n)
        for stochastic in ([True, False] if spec in QUANT else [True]):
            for off in (0, 3, 1 << 33):
                args = (SEED, SEQ, STREAM, off, B, stochastic)
                p = C.encode(spec, x, *args)
                assert p.numel() == C.encoded_bytes(spec, n, B) == R.encoded_bytes(spec, n, B)
                assert torch.equal(p, R.encode(spec, x, *args)), (spec, dtype, n, stochastic, off)
                y = C.decode(spec, p, n, SEED, SEQ, STREAM, off, B)
                assert bits_equal(y, R.decode(spec, p, n, SEED, SEQ, STREAM, off, B)), (spec, n)


@pytest.mark.parametrize("spec", ["q4", "q1", "fp16", "bf16", "topk:0.01", "randomk:0.01"])
def test_large_match_reference(spec):
    n = 1_000_003
    x = sample(n, seed=1)
    p = C.encode(spec, x, SEED, SEQ, STREAM)
    assert torch.equal(p, R.encode(spec, x, SEED, SEQ, STREAM))
    assert bits_equal(C.decode(spec, p, n, SEED, SEQ, STREAM), R.decode(spec, p, n, SEED, SEQ, STREAM))


def test_topk_sampled_selection_is_exact():
    """n > 2^16 takes the sampled-threshold path; it must equal the exact selection."""
    n = (1 << 20) + 4097
    for seed, ratio in [(2, "0.001"), (3, "0.05")]:
        x = sample(n, seed=seed)
        x[:: 7] = 1.0  # many ties
        spec = "topk:" + ratio
        assert torch.equal(C.encode(spec, x, 0, 0, 0), R.encode(spec, x, 0, 0, 0))


@pytest.mark.parametrize("spec", ALL)
def test_residual_is_x_minus_decode(spec):
    """codec.residual (error feedback, the oracle of the CUDA twin's parity test): r = x -
    decode(payload), and whether r is known to be finite (top-k: not scanned, says False)."""
    for n in (0, 1, 1000, 10_007):
        x = sample(n, seed=9)
        p = C.encode(spec, x, 3, 5, 2, 11)
        r, finite = C.residual(spec, p, x, 3, 5, 2, 11)
        want = x - C.decode(spec, p, n, 3, 5, 2, 11)
        assert bits_equal(r, want), (spec, n)
        if not spec.startswith("topk") and n:
            assert finite == bool(torch.isfinite(want).all())


@pytest.mark.parametrize("spec,stochastic", [("q8", True), ("q4", False), ("q2", True), ("q1", True), ("fp16", True)])
@pytest.mark.parametrize("n,bucket", [(0, 512), (1, 8), (1000, 64), (70_001, 512)])
def test_encode_feedback_matches_add_encode_residual(spec, stochastic, n, bucket):
    """Error feedback fused into the encode (bucket by bucket) gives the pure-torch reference's
    bytes for encode(x + r) and r = x + r - decode, leaves x alone, and says whether r is
    finite (partial last bucket, offset RNG counters, a NaN bucket)."""
    x, r = sample(n, seed=7), sample(n, seed=8) * 0.1
    args = (3, 5, 2, 40, bucket)  # seed, seq, stream, elem_offset, bucket
    for nonfinite in ([False, True] if n > 100 else [False]):
        if nonfinite:
            x[n // 2] = float("nan")
        s = x + r
        want = R.encode(spec, s, *args, stochastic=stochastic)
        want_r = s - R.decode(spec, want, n, *args)
        x0, rr = x.clone(), r.clone()
        p, finite = C.encode_feedback(spec, x, rr, *args, stochastic=stochastic)
        assert torch.equal(p, want)
        nan = torch.isnan(want_r)  # which NaN a NaN - NaN returns is the instruction's choice
        assert torch.equal(torch.isnan(rr), nan) and bits_equal(rr[~nan], want_r[~nan])
        assert bits_equal(x, x0)
        assert finite == bool(torch.isfinite(want_r).all()) and finite != nonfinite


@pytest.mark.parametrize("n,ratio", [(0, "0.01"), (1, "0.5"), (1000, "0.01"), (1000, "1"), (70_001, "0.01"),
                                     ((1 << 20) + 4097, "0.001")])
def test_topk_feedback_matches_add_encode_residual(n, ratio):
    """The fused error-feedback pass gives the bytes and residual of the unfused steps (exact and
    sampled selection, k = n, ties, NaN/Inf)."""
    spec = "topk:" + ratio
    x, r = sample(n, seed=5), sample(n, seed=6) * 0.1
    if n > 100:
        x[::11] = 0.5  # ties after adding r
        r[::11] = 0.25
        x[7], r[8] = float("nan"), float("inf")
    s = x + r
    want = R.encode(spec, s, 0, 0, 0)
    want_r = s - R.decode(spec, want, n, 0, 0, 0)
    p = C.topk_feedback(spec, x, r)
    assert torch.equal(p, want)
    assert bits_equal(r, want_r)
    assert torch.equal(x, torch.zeros(n))


def test_casts_edge_values():
    special = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, 1e6, -1e6, 2.0 ** -14, 2.0 ** -24,
               2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -26, 1e-30, 1e-45, 3.4e38, float("inf"), float("-inf"),
               float("nan"), -float("nan"), 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1.0 + 2.0 ** -8]
    x = torch.cat([torch.tensor(special), sample(5000) * 1e3, sample(5000) * 1e-6])
    for spec in ["fp16", "bf16"]:
        p = C.encode(spec, x, 0, 0, 0)
        assert torch.equal(p, R.encode(spec, x, 0, 0, 0)), spec
        y = C.decode(spec, p, x.numel(), 0, 0, 0)
        want = x.to(torch.float16 if spec == "fp16" else torch.bfloat16).float()
        fin = torch.isfinite(want)
        assert bits_equal(y[fin], want[fin])  # matches torch's own RNE cast
        assert torch.equal(torch.isnan(y), torch.isnan(want)) and torch.equal(torch.isinf(y), torch.isinf(want))


# --- fused operations ----------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ALL)
def test_decode_accumulate_and_decode_add_encode(spec):
    for n in [0, 1, B + 1, 5000]:
        x, local = sample(n, seed=10), sample(n, seed=11)
        p = C.encode(spec, x, SEED, SEQ, 1, 5)
        acc = local.clone()
        C.decode_accumulate(spec, p, acc, SEED, SEQ, 1, 5)
        # equal values (sparse codecs leave unselected elements untouched, so -0.0 stays -0.0)
        torch.testing.assert_close(acc, local + C.decode(spec, p, n, SEED, SEQ, 1, 5), rtol=0, atol=0, equal_nan=True)
        for stochastic in [True, False]:
            fused = C.decode_add_encode(spec, p, local, SEED, SEQ, 1, 2, 5, B, stochastic)
            plain = C.encode(spec, C.decode(spec, p, n, SEED, SEQ, 1, 5) + local, SEED, SEQ, 2, 5, B, stochastic)
            assert torch.equal(fused, plain), (spec, n)
            assert torch.equal(fused, R.decode_add_encode(spec, p, local, SEED, SEQ, 1, 2, 5, B, stochastic))


@pytest.mark.parametrize("spec", ["q8", "q4", "q2"])
def test_bucket_shapes_match_reference(spec):
    """Buckets of 8 .. 520 elements (whole and partial 64-element groups of the fused AVX-512
    kernels), partial last buckets and unaligned RNG offsets: encode and decode_add_encode give
    the reference's bytes."""
    for bucket in [8, 24, 64, 72, 520]:
        for n in [1, 63, 65, 200, 1031]:
            x, local = sample(n, seed=n + bucket), sample(n, seed=n + bucket + 1)
            for off in [0, 13]:
                for stochastic in [True, False]:
                    args = (SEED, SEQ, STREAM, off, bucket, stochastic)
                    p = C.encode(spec, x, *args)
                    assert torch.equal(p, R.encode(spec, x, *args)), (bucket, n, off, stochastic)
                    dae = (SEED, SEQ, 1, 2, off, bucket, stochastic)
                    assert torch.equal(C.decode_add_encode(spec, p, local, *dae),
                                       R.decode_add_encode(spec, p, local, *dae)), (bucket, n, off, stochastic)


# --- numerics ------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["q8", "q4", "q2", "q1", "fp16", "bf16", "none", "topk:1", "randomk:1"])
def test_round_trip(spec):
    x = sample(3000, seed=4)
    y = C.decode(spec, C.encode(spec, x, 1, 2, 3), x.numel(), 1, 2, 3)
    if spec in ("none", "topk:1", "randomk:1"):
        assert bits_equal(x, y)
    elif spec in ("fp16", "bf16"):
        assert torch.allclose(y, x, rtol=2 ** -8 if spec == "bf16" else 2 ** -11, atol=1e-7)
    elif spec == "q1":
        xb = x.view(-1)
        for b in range(0, 3000, B):
            xs, ys = xb[b:b + B], y[b:b + B]
            scale = xs.abs().mean()
            assert torch.allclose(ys.abs(), scale.expand_as(ys), rtol=1e-5)
            assert torch.equal(ys >= 0, xs >= 0)
    else:
        s = levels(spec)
        for stochastic, bound in [(True, 1.0), (False, 0.5)]:
            y = C.decode(spec, C.encode(spec, x, 1, 2, 3, 0, B, stochastic), x.numel(), 1, 2, 3)
            for b in range(0, 3000, B):
                scale = x[b:b + B].abs().max()
                err = (x[b:b + B] - y[b:b + B]).abs()
                assert (err <= bound * scale / s * (1 + 1e-5)).all(), (spec, stochastic, b)


@pytest.mark.parametrize("spec", ["q8", "q4", "q2"])
def test_stochastic_rounding_unbiased(spec):
    n, reps = 2 * B, 2000
    x = sample(n, seed=5)
    # One encode of the vector tiled 2000 times: each copy has its own Philox counters.
    big = x.repeat(reps)
    y = C.decode(spec, C.encode(spec, big, 9, 1, 0), big.numel(), 9, 1, 0).view(reps, n).double()
    mean, var = y.mean(0), y.var(0)
    err = mean - x.double()
    se_total = math.sqrt(var.sum().item() / reps)
    assert abs(err.sum().item()) <= 4 * se_total + 1e-6
    live = var > 0
    # per element: z against the exact binomial standard error step * sqrt(p (1 - p) / reps),
    # where p is the fractional position of x between its two levels; only where p (1 - p)
    # >= 0.05 (>= ~100 expected flips, so the normal approximation holds)
    step = torch.stack([x[:B].abs().max(), x[B:].abs().max()]).double().repeat_interleave(B) / levels(spec)
    t = x.double() / step
    p = t - t.floor()
    pq = p * (1 - p)
    ok = pq >= 0.05
    z = err[ok] / (step[ok] * (pq[ok] / reps).sqrt())
    assert ok.sum() > 100 and z.abs().max().item() < 6
    # never-flipped elements lie within 1% of a step from their level (else a flip was ~certain)
    assert (err[~live].abs() <= 0.01 * step[~live]).all()


@pytest.mark.parametrize("spec", ["q8", "q4", "q2"])
def test_stochastic_rounding_bias_bound(spec):
    """|E[decode(encode(x))] - x| <= step / 512 per element (codec version 2; step = scale / s).

    Exactly: with t = fl(x * inv), the code's expectation over the 256 equally likely dither
    values is E = mean_k floor(fl(t + (k + 0.5) / 256)), and |E - t| <= 1/512 for every element.
    Statistically: the mean of 2000 independent calls (sequence numbers 1..2000, one tensor each)
    lies within 6 binomial standard errors of E * step, hence within step / 512 + 6 SE of x. The
    vector holds elements right below a grid cell's edge, where the bias is close to the bound."""
    s = levels(spec)
    n, reps = 2 * B, 2000
    x = sample(n, seed=11)
    scale = torch.stack([x[:B].abs().max(), x[B:].abs().max()]).repeat_interleave(B)
    inv = torch.tensor(float(s), dtype=torch.float32) / scale
    # put 64 elements of each bucket just below 1/512 and just above 1/2 - 1/512 of a step
    # beyond a level (the largest |bias| the grid allows), keeping each bucket's max
    for b0 in (0, B):
        top = int(x[b0:b0 + B].abs().argmax())
        idx = torch.arange(b0 + 40, b0 + 104) if not 40 <= top < 104 else torch.arange(b0 + 200, b0 + 264)
        lvl = torch.randint(-s, s, (64,), generator=torch.Generator().manual_seed(b0)).double()
        frac = torch.where(torch.arange(64) % 2 == 0, torch.tensor(0.99 / 512), torch.tensor(0.5 + 0.99 / 512)).double()
        x[idx] = ((lvl + frac) / inv[idx].double()).float()
    assert torch.equal(torch.stack([x[:B].abs().max(), x[B:].abs().max()]).repeat_interleave(B), scale)
    t = (x * inv).double()  # fl(x * inv), as the encoder computes it
    k = (torch.arange(256, dtype=torch.float32) + 0.5) / 256
    E = torch.floor((x * inv)[:, None] + k[None, :]).clamp(-s, s).double().mean(1)  # exact expectation
    assert ((E - t).abs() <= 1 / 512 + 1e-6).all(), (E - t).abs().max().item() * 512
    assert (E - t).abs().max() > 0.9 / 512  # the vector does reach close to the bound
    acc = torch.zeros(n, dtype=torch.float64)
    for seq in range(1, reps + 1):
        acc += C.decode(spec, C.encode(spec, x, 9, seq, 0), n, 9, seq, 0).double()
    mean = acc / reps
    step = scale.double() / s
    pg = E - torch.floor(E)  # the flip probability on the grid
    se = step * (pg * (1 - pg) / reps).sqrt()
    fl = 1e-5 * step * s  # float rounding of t = x * inv and of step
    assert ((mean - E * step).abs() <= 6 * se + fl).all()
    assert ((mean - x.double()).abs() <= step / 512 + 6 * se + fl).all()


def test_biased_flags():
    assert not C.biased("q4") and C.biased("q4", False) and C.biased("q1")
    assert C.biased("topk:0.1") and C.biased("randomk:0.1") and not C.biased("none")


@pytest.mark.parametrize("spec", ALL)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nonfinite_propagates(spec, bad):
    n = 3 * B + 5
    for pos in [0, B + 17, n - 1]:
        x = sample(n, seed=6)
        x[pos] = bad
        p = C.encode(spec, x, SEED, SEQ, STREAM)
        assert torch.equal(p, R.encode(spec, x, SEED, SEQ, STREAM))
        y = C.decode(spec, p, n, SEED, SEQ, STREAM)
        assert not torch.isfinite(y).all(), (spec, bad, pos)
        if spec in QUANT:  # the whole bucket becomes NaN
            b = pos // B
            assert torch.isnan(y[b * B:(b + 1) * B]).all()
        # a fused hop keeps it: the non-finite value arrives through `local`
        out = C.decode_add_encode(spec, C.encode(spec, sample(n), SEED, SEQ, 0), x, SEED, SEQ, 0, 1)
        assert not torch.isfinite(C.decode(spec, out, n, SEED, SEQ, 1)).all()


def test_zero_bucket():
    x = torch.zeros(1000)
    for spec in QUANT:
        assert bits_equal(C.decode(spec, C.encode(spec, x, 1, 1, 1), 1000, 1, 1, 1).abs(), x)


@pytest.mark.parametrize("spec", ["q8", "q4", "q2"])
@pytest.mark.parametrize("stochastic", [True, False])
def test_tiny_bucket_decodes_to_zero_not_flipped(spec, stochastic):
    # max|x| = 1e-39 < s / FLT_MAX: s / scale overflows; the codes must be zero (as the
    # reference), not the clamps (which decoded 1e-39 as -1e-39)
    x = torch.full((B,), 1e-39)
    x[1::2] = -1e-39
    x[7] = 0.0
    args = (SEED, SEQ, STREAM, 0, B, stochastic)
    p = C.encode(spec, x, *args)
    assert torch.equal(p, R.encode(spec, x, *args))
    assert bits_equal(C.decode(spec, p, B, SEED, SEQ, STREAM, 0, B).abs(), torch.zeros(B))


# --- validation ----------------------------------------------------------------------------------

@pytest.mark.parametrize("big", [1e36, 3.4e38])
def test_q1_scale_of_a_bucket_whose_sum_overflows(big):
    """512 values near 10^36 and up sum past FLT_MAX although their mean is finite: the scale comes
    from the rescaled sums (docs/wire-format.md), equal to the reference's, and the payload decodes
    to +-mean|x| instead of being rejected as corrupt (as a +Inf scale was)."""
    x = sample(3 * B + 5, seed=7)
    x[B:2 * B] = torch.where(torch.arange(B) % 3 == 0, -big, big * 0.75)  # bucket 1 overflows
    p = C.encode("q1", x, SEED, SEQ, STREAM)
    assert torch.equal(p, R.encode("q1", x, SEED, SEQ, STREAM))
    d = C.decode("q1", p, x.numel(), SEED, SEQ, STREAM)
    mean = x[B:2 * B].abs().double().mean().item()
    got = d[B:2 * B].abs()
    assert torch.isfinite(d).all() and torch.all(got == got[0])
    assert abs(got[0].item() - mean) <= 1e-5 * mean
    assert bits_equal(d[:B], R.decode("q1", p, x.numel(), SEED, SEQ, STREAM)[:B])


@pytest.mark.parametrize("spec", ALL)
def test_decoders_reject_wrong_length(spec):
    n = 1000
    p = C.encode(spec, sample(n), 1, 1, 1)
    for q in [p[:-1], torch.cat([p, torch.zeros(1, dtype=torch.uint8)]), p[:0]]:
        with pytest.raises(RuntimeError, match="expected"):
            C.decode(spec, q, n, 1, 1, 1)
        with pytest.raises(RuntimeError):
            C.decode_accumulate(spec, q, torch.zeros(n), 1, 1, 1)
        with pytest.raises(RuntimeError):
            C.decode_add_encode(spec, q, torch.zeros(n), 1, 1, 1, 2)


def i32(v):
    return torch.tensor([v], dtype=torch.int32).view(torch.uint8)


def test_decoders_reject_corrupt_headers():
    n = 1000
    x = sample(n)
    p = C.encode("topk:0.01", x, 1, 1, 1)
    k = C.k_for("topk:0.01", n)
    bad = [torch.cat([i32(k + 1), p[4:]]),                      # count
           torch.cat([p[:4], i32(n), p[8:]]),                   # index out of range
           torch.cat([p[:4], i32(-1), p[8:]]),                  # negative index
           torch.cat([p[:8], p[4:8], p[12:]])]                  # not ascending (duplicate)
    for q in bad:
        with pytest.raises(RuntimeError, match="corrupt topk"):
            C.decode("topk:0.01", q, n, 1, 1, 1)
    p = C.encode("randomk:0.01", x, 1, 1, 1)
    for q in [torch.cat([i32(0), p[4:]]), torch.cat([p[:4], i32(2), p[8:]])]:
        with pytest.raises(RuntimeError, match="corrupt randomk"):
            C.decode("randomk:0.01", q, n, 1, 1, 1)
    for spec in QUANT:
        p = C.encode(spec, x, 1, 1, 1)
        for scale in [-1.0, float("inf"), -float("nan")]:
            q = p.clone()
            q[:4] = torch.tensor([scale]).view(torch.uint8)
            with pytest.raises(RuntimeError, match="corrupt"):
                C.decode(spec, q, n, 1, 1, 1)
    for spec in ["q8", "q4", "q2"]:
        q = C.encode(spec, x, 1, 1, 1).clone()
        q[8] = 0xFF  # code 2^b - 1 > 2s
        with pytest.raises(RuntimeError, match="out of range"):
            C.decode(spec, q, n, 1, 1, 1)
        for at in [8 + 100, q.numel() - 1]:  # a whole 64-code group, the last bucket's tail
            q = C.encode(spec, x, 1, 1, 1).clone()
            q[at] = 0xFF
            with pytest.raises(RuntimeError, match="out of range in bucket"):
                C.decode_add_encode(spec, q, x, 1, 1, 1, 2)


@pytest.mark.parametrize("spec", ALL)
def test_decoders_survive_random_bytes(spec):
    g = torch.Generator().manual_seed(0)
    n = 777
    size = C.encoded_bytes(spec, n)
    for _ in range(50):
        q = torch.randint(0, 256, (size,), dtype=torch.uint8, generator=g)
        try:
            C.decode(spec, q, n, 1, 1, 1)
        except RuntimeError:
            pass


def test_bad_arguments():
    x = torch.randn(100)
    for spec in ["q3", "topk", "topk:0", "topk:1.5", "topk:abc", "q4:2", "", "randomk:-1"]:
        with pytest.raises(ValueError, match="spec"):
            C.encode(spec, x, 1, 1, 1)
    with pytest.raises(ValueError, match="bucket"):
        C.encode("q4", x, 1, 1, 1, 0, 100)
    with pytest.raises(ValueError, match="dtype"):
        C.encode("q4", torch.arange(10), 1, 1, 1)
    with pytest.raises(ValueError, match="contiguous"):
        C.encode("q4", torch.randn(10, 10).t(), 1, 1, 1)
    with pytest.raises(ValueError, match="uint8"):
        C.decode("q4", torch.zeros(10), 10, 1, 1, 1)
    with pytest.raises(ValueError, match="float32"):
        C.decode_accumulate("q4", C.encode("q4", x, 1, 1, 1), torch.zeros(100, dtype=torch.float64), 1, 1, 1)


def test_randomk_indices_shared_across_ranks():
    """Different ranks (streams) must select the same indices so values can be summed."""
    n = 4000
    a, b = torch.rand(n) + 1, torch.rand(n) + 1  # no zeros
    ya = C.decode("randomk:0.05", C.encode("randomk:0.05", a, 5, 9, 1 << 8), n, 5, 9, 2 << 8)
    yb = C.decode("randomk:0.05", C.encode("randomk:0.05", b, 5, 9, 2 << 8), n, 5, 9, 1 << 8)
    assert torch.equal(ya != 0, yb != 0)
    assert (ya != 0).sum() == C.k_for("randomk:0.05", n)
