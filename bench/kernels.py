"""Single-thread throughput of the codec kernels, in GB/s of float32 input.

For each codec: encode, decode_accumulate and decode_add_encode of the C++ kernels, next to a
torch clone of the same tensor (memcpy) and the pure-torch reference encode. Medians of `reps`.
Run: PYTHONPATH=python python bench/kernels.py [--sizes 4194304] [--reps 7]
"""
import argparse
import statistics
import time

import torch

import ringzip
from ringzip import reference as R

C = ringzip._C.codec
DEFAULT_CODECS = ("fp16", "bf16", "q8", "q4", "q2", "q1", "topk:0.01", "randomk:0.01")


def _median_s(fn, reps: int) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def run_kernel_bench(sizes=(1 << 22,), codecs=DEFAULT_CODECS, device="cpu", reps: int = 7,
                     reference: bool = True) -> list:
    if device != "cpu":
        raise ValueError("only the CPU kernels exist so far")
    torch.set_num_threads(1)
    rows = []
    for n in sizes:
        x = torch.randn(n)
        local = torch.randn(n)
        acc = torch.zeros(n)
        gbs = lambda s: 4 * n / s / 1e9  # noqa: E731
        memcpy = gbs(_median_s(lambda: x.clone(), reps))  # includes allocation + first-touch faults
        dst = torch.empty_like(x)
        copy = gbs(_median_s(lambda: dst.copy_(x), reps))  # into a warm buffer
        for spec in codecs:
            p = C.encode(spec, x, 1, 2, 3)
            row = dict(codec=spec, n=n, ratio=4 * n / p.numel(), memcpy_gbs=memcpy, copy_gbs=copy,
                       encode_gbs=gbs(_median_s(lambda: C.encode(spec, x, 1, 2, 3), reps)),
                       decode_acc_gbs=gbs(_median_s(lambda: C.decode_accumulate(spec, p, acc, 1, 2, 3), reps)),
                       dae_gbs=gbs(_median_s(lambda: C.decode_add_encode(spec, p, local, 1, 2, 3, 4), reps)))
            if reference:
                row["ref_encode_gbs"] = gbs(_median_s(lambda: R.encode(spec, x, 1, 2, 3), max(1, reps // 3)))
                row["speedup_vs_ref"] = row["encode_gbs"] / row["ref_encode_gbs"]
            rows.append(row)
    return rows


def format_table(rows) -> str:
    head = ("| codec | n | ratio | encode | decode_acc | decode_add_encode | memcpy (clone) | copy_ (warm) | reference encode "
            "| encode / reference |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(f"| {r['codec']} | {r['n']} | {r['ratio']:.1f} | {r['encode_gbs']:.2f} | {r['decode_acc_gbs']:.2f} "
                     f"| {r['dae_gbs']:.2f} | {r['memcpy_gbs']:.2f} | {r['copy_gbs']:.2f} | {r.get('ref_encode_gbs', float('nan')):.3f} "
                     f"| {r.get('speedup_vs_ref', float('nan')):.0f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1 << 22])
    ap.add_argument("--codecs", nargs="+", default=list(DEFAULT_CODECS))
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    print("GB/s of float32 input, single thread, median of", a.reps)
    print(format_table(run_kernel_bench(tuple(a.sizes), tuple(a.codecs), reps=a.reps)))
