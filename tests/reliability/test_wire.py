"""Wire validation: every decoder entry point (decode, decode_accumulate, decode_add_encode)
given a payload whose length or header does not match what the receiver expects must raise,
never read or write out of bounds. Valid payloads are truncated, extended, given to a decoder
expecting a different element count, bit-flipped and replaced by random bytes. Without a
sanitizer this proves "raises or decodes"; under ASan (docs/reliability.md) it also proves no
out-of-bounds access."""
from __future__ import annotations

import os

import pytest
import torch

import ringzip

C = ringzip._C.codec
SPECS = ["none", "fp16", "bf16", "q8", "q4", "q2", "q1", "topk:0.01", "topk:0.5", "randomk:0.01", "randomk:0.5"]
SIZES = [1, 7, 511, 512, 513, 3000]
ROUNDS = int(os.environ.get("RINGZIP_FUZZ_ROUNDS", "30"))


def _payload(spec, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g)
    return C.encode(spec, x, 1, 2, 3)


def _decoders(spec, n):
    def dec(p):
        return C.decode(spec, p, n, 1, 2, 3)

    def acc(p):
        a = torch.zeros(n)
        C.decode_accumulate(spec, p, a, 1, 2, 3)
        return a

    def dae(p):
        return C.decode_add_encode(spec, p, torch.ones(n), 1, 2, 3, 4)

    return [dec, acc, dae]


@pytest.mark.parametrize("spec", SPECS)
def test_wrong_lengths_are_rejected(spec):
    tried = 0
    for n in SIZES:
        p = _payload(spec, n)
        size = p.numel()
        assert size == C.encoded_bytes(spec, n, 512)
        cuts = sorted({0, 1, 3, 4, size // 2, size - 1, size + 1, size + 8, 2 * size})
        for f in _decoders(spec, n):
            for m in cuts:
                if m == size:
                    continue
                q = torch.cat([p, torch.zeros(max(0, m - size), dtype=torch.uint8)])[:m].clone()
                with pytest.raises((RuntimeError, ValueError)):
                    f(q)
                tried += 1
            # a payload of n elements given to a decoder expecting n +- 1 elements
            for other in (n - 1, n + 1):
                if other < 0 or C.encoded_bytes(spec, other, 512) == size:
                    continue
                with pytest.raises((RuntimeError, ValueError)):
                    _decoders(spec, other)[0](p)
                tried += 1
    assert tried > 0


@pytest.mark.parametrize("spec", SPECS)
def test_mutated_payloads_raise_or_decode(spec):
    g = torch.Generator().manual_seed(1)
    for n in (7, 513, 3000):
        p = _payload(spec, n, seed=n)
        fs = _decoders(spec, n)
        for i in range(ROUNDS):
            q = p.clone()
            if i % 3 == 0:  # random bytes
                q = torch.randint(0, 256, (p.numel(),), dtype=torch.uint8, generator=g)
            else:  # flip a few bytes, headers included
                idx = torch.randint(0, p.numel(), (1 + i % 4,), generator=g)
                q[idx] = torch.randint(0, 256, (idx.numel(),), dtype=torch.uint8, generator=g)
                q[: min(8, p.numel())] ^= (i & 0xFF)  # header bytes
            for f in fs:
                try:
                    out = f(q)
                except (RuntimeError, ValueError):
                    continue
                assert out.numel() > 0 or n == 0
