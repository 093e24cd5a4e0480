"""The schedules through the CUDA compute's branches, on the host: ringzip._C.loopback with
compute="device" runs the CPU kernels behind the branches collective/cuda_compute.cc takes (the
owner's SRA step unfused: decode-accumulate, then encode; no step reports a residual free of
NaN/Inf, so the algorithms run their finiteness scan, drop_nonfinite, on every error-feedback
call). In grouped (NCCL-like) mode with 2-5 ranks, bit for bit against the pure-torch reference,
as the loopback matrix checks the host compute (test_loopback_matrix.py)."""
from __future__ import annotations

import pytest
import torch

from ringzip import _C
from ringzip.reference import collectives as RC

from .test_loopback_matrix import (DENSE_CODECS, SEG, SPARSE_CODECS, check_reduce_scatter, dense_inputs, gen,
                                   reference_allreduce, same)

L = _C.loopback
WORLDS = (2, 3, 4, 5)
CODEC_ALGOS = [(c, a) for c in DENSE_CODECS for a in ("ring", "sra")] + [(c, "sparse") for c in SPARSE_CODECS]


def sizes(n):
    return (1, n - 1, 1001, 2 * SEG + 3)  # below the rank count, odd, several SRA segments


@pytest.mark.parametrize("n", WORLDS)
@pytest.mark.parametrize("codec,algo", CODEC_ALGOS)
def test_device_branches_compressed_allreduce(n, codec, algo):
    for size in sizes(n):
        for ef in (False, True):
            xs, res, (want, want_res), args = reference_allreduce(n, codec, algo, size, ef)
            out, new_res = L.compressed("allreduce", xs, codec, mode="grouped", algorithm=algo, residuals=res,
                                        compute="device", **args)
            what = f"{codec} {algo} all-reduce, {n} ranks, {size} elements, device branches"
            same(out, want, what)
            if ef:
                same(new_res, want_res, what + ", residual")


@pytest.mark.parametrize("n", WORLDS)
@pytest.mark.parametrize("codec", DENSE_CODECS + SPARSE_CODECS)
def test_device_branches_compressed_reduce_scatter(n, codec):
    for size in (n, 1001):
        for ef in (False, True):
            check_reduce_scatter("grouped", n, codec, size, ef, compute="device")


@pytest.mark.parametrize("codec,algo", CODEC_ALGOS)
def test_device_branches_nonfinite(codec, algo):
    # The device scan decides alone here (no step reports finiteness): a residual that met a NaN
    # or Inf is zeroed, the others keep their bits, as the reference says.
    xs, res = gen(5, 3, 1001), gen(6, 3, 1001, 0.05)
    xs[1][17], xs[2][500], res[0][900] = float("nan"), float("inf"), float("-inf")
    args = dict(seed=3, rng_seq=4, seq=2)
    want, want_res = RC.compressed_allreduce(xs, codec, algo, residuals=res, **args)
    out, new_res = L.compressed("allreduce", xs, codec, mode="grouped", algorithm=algo, residuals=res,
                                compute="device", **args)
    same(out, want, f"{codec} {algo} with NaN/Inf, device branches", nan=True)
    same(new_res, want_res, f"{codec} {algo} with NaN/Inf, device branches, residual", nan=True)


@pytest.mark.parametrize("n", WORLDS)
@pytest.mark.parametrize("algo", ("ring", "rd", "direct", "star", "sra", "hd", "tree"))
def test_device_branches_dense(n, algo):
    for dtype, op in ((torch.float32, "sum"), (torch.float16, "max"), (torch.int32, "bxor"), (torch.bool, "sum")):
        xs = dense_inputs(("device", n, algo, str(dtype), op), n, 1001, dtype, op)
        host = L.collective("allreduce", xs, mode="grouped", algorithm=algo, reduce_op=op)
        dev = L.collective("allreduce", xs, mode="grouped", algorithm=algo, reduce_op=op, compute="device")
        same(dev, host, f"{algo} {dtype} {op}, {n} ranks, device branches")


def test_device_branches_compute_is_checked():
    with pytest.raises(ValueError, match="compute must be 'host' or 'device'"):
        L.collective("allreduce", [torch.ones(3)] * 2, compute="gpu")
