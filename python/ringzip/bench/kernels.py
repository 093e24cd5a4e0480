"""`ringzip-bench kernels`: codec kernel throughput in GB/s of float32 input.

For each codec: encode, decode_accumulate, decode_add_encode and the error-feedback pass
(encode_feedback; top-k: topk_feedback, the one pass that adds the residual, selects and clears)
of the compiled kernels, next to
memcpy (copy_ into a warm buffer of the same size, measured in the same run) and the pure-torch
reference encode (ringzip.reference, the test oracle); each kernel also as a fraction of that
memcpy, and the header names the CPU model and the SIMD level the kernels dispatch to. Medians of `iters` repetitions, single thread by default.
Outputs go to reused buffers, as in the collectives, so allocation and page faults stay out.
"""
from __future__ import annotations

import statistics
import time

import torch

from .common import fmt_bytes, header_lines, parse_size, size_sweep, split_list

DEFAULT_CODECS = "fp16,bf16,q8,q4,q2,q1,topk:0.01,randomk:0.01"


def _median_s(fn, iters: int, warmup: int, setup=None) -> float:
    """Median seconds of fn(); setup() (untimed) runs before every call."""
    for _ in range(max(1, warmup)):
        setup and setup()
        fn()
    ts = []
    for _ in range(max(1, iters)):
        setup and setup()
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def run_kernel_bench(sizes, codecs, iters: int = 7, warmup: int = 1, threads: int = 1, seed: int = 0,
                     reference: bool = True) -> list[dict]:
    """One dict per (size, codec): GB/s of each kernel, memcpy, reference encode, ratio."""
    import ringzip
    from ringzip import reference as R

    C = ringzip._C.codec
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(seed)
    rows = []
    for size in sizes:
        n = max(1, size // 4)
        x, local = torch.randn(n, generator=g), torch.randn(n, generator=g)
        acc, dst = torch.zeros(n), torch.empty(n)
        r0 = 0.1 * torch.randn(n, generator=g)  # an error-feedback residual
        xf, rf = torch.empty(n), torch.empty(n)  # the feedback passes write them: restored before each call
        gbs = lambda s: 4 * n / s / 1e9  # noqa: E731
        memcpy = gbs(_median_s(lambda: dst.copy_(x), iters, warmup))
        for spec in codecs:
            p = C.encode(spec, x, 1, 2, 3)
            out = torch.empty_like(p)  # reused, as the collectives reuse theirs: times the kernel, not page faults
            row = {"codec": spec, "numel": n, "bytes": 4 * n, "ratio": 4 * n / max(1, p.numel()),
                   "memcpy_gbps": memcpy,
                   "encode_gbps": gbs(_median_s(lambda: C.encode(spec, x, 1, 2, 3, out=out), iters, warmup)),
                   "decode_acc_gbps": gbs(_median_s(lambda: C.decode_accumulate(spec, p, acc, 1, 2, 3), iters, warmup)),
                   "decode_add_encode_gbps": gbs(_median_s(lambda: C.decode_add_encode(spec, p, local, 1, 2, 3, 4, out=out),
                                                           iters, warmup))}
            feedback = (lambda: C.topk_feedback(spec, xf, rf)) if spec.startswith("topk") else \
                (lambda: C.encode_feedback(spec, xf, rf, 1, 2, 3))
            row["feedback_gbps"] = gbs(_median_s(feedback, iters, warmup, setup=lambda: (xf.copy_(x), rf.copy_(r0))))
            for k in ("encode", "decode_acc", "decode_add_encode", "feedback"):
                row[f"{k}_vs_memcpy"] = row[f"{k}_gbps"] / memcpy
            if reference:
                row["reference_encode_gbps"] = gbs(_median_s(lambda: R.encode(spec, x, 1, 2, 3), max(1, iters // 3), 0))
                row["encode_vs_reference"] = row["encode_gbps"] / row["reference_encode_gbps"]
            rows.append(row)
    return rows


def format_table(rows) -> str:
    lines = ["| size | codec | r | encode (x memcpy) | decode_acc (x memcpy) | decode_add_encode (x memcpy) "
             "| feedback (x memcpy) | memcpy | reference encode | encode/ref |",
             "|" + "---:|" * 10]
    for r in rows:
        lines.append(f"| {fmt_bytes(r['bytes'])} | {r['codec']} | {r['ratio']:.1f} "
                     f"| {r['encode_gbps']:.2f} ({r['encode_vs_memcpy']:.2f}) "
                     f"| {r['decode_acc_gbps']:.2f} ({r['decode_acc_vs_memcpy']:.2f}) "
                     f"| {r['decode_add_encode_gbps']:.2f} ({r['decode_add_encode_vs_memcpy']:.2f}) "
                     f"| {r['feedback_gbps']:.2f} ({r['feedback_vs_memcpy']:.2f}) | {r['memcpy_gbps']:.2f} "
                     f"| {r.get('reference_encode_gbps', float('nan')):.3f} | {r.get('encode_vs_reference', float('nan')):.0f}x |")
    return "\n".join(lines)


def add_arguments(p) -> None:
    p.add_argument("-b", "--minbytes", dest="begin", default="16M")
    p.add_argument("-e", "--maxbytes", dest="end", default="16M")
    p.add_argument("-f", "--stepfactor", dest="factor", type=float, default=4.0)
    p.add_argument("--codec", default=DEFAULT_CODECS, help="codecs, comma list")
    p.add_argument("--iters", type=int, default=7)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-reference", action="store_true", help="skip the (slow) pure-torch reference")
    p.add_argument("--json", help="write rows here")


def run(args) -> int:
    sizes = size_sweep(parse_size(args.begin), parse_size(args.end), args.factor)
    print("\n".join(header_lines(1, "n/a (single-rank kernels)", {"threads": args.threads})))
    print(f"# GB/s of float32 input, {args.threads} thread(s), median of {args.iters}")
    rows = run_kernel_bench(sizes, split_list(args.codec), args.iters, args.warmup, threads=args.threads,
                            reference=not args.no_reference)
    print(format_table(rows))
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0
