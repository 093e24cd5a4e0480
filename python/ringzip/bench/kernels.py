"""Kernel throughput: `ringzip-bench kernels`.

`run_kernel_bench(...)` is the entry point the codec engineer's bench/kernels.py provides; this
module is its home inside the package (the merge replaces/extends the codec part). Until then it
times the baselines every codec is compared with: memcpy and the dense casts fp32 -> fp16/bf16
(encode) and back (decode), single rank, on the CPU.
"""
from __future__ import annotations

import statistics
import time

import torch

from .common import fmt_bytes, header_lines, parse_size, size_sweep, split_list

BASELINES = ("memcpy", "fp16", "bf16")


def _time(fn, iters: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _baseline_rows(name: str, x: torch.Tensor, iters: int, warmup: int) -> list[dict]:
    n = x.numel()
    rows = []
    if name == "memcpy":
        dst = torch.empty_like(x)
        t = _time(lambda: dst.copy_(x), iters, warmup)
        rows.append(("memcpy", t, x.nbytes, 1.0))
    else:
        dt = torch.float16 if name == "fp16" else torch.bfloat16
        enc = torch.empty(n, dtype=dt)
        dec = torch.empty_like(x)
        acc = torch.zeros_like(x)
        t_e = _time(lambda: enc.copy_(x), iters, warmup)
        t_d = _time(lambda: dec.copy_(enc), iters, warmup)
        t_da = _time(lambda: acc.add_(enc), iters, warmup)
        ratio = x.nbytes / enc.nbytes
        rows += [(f"{name} encode", t_e, x.nbytes, ratio), (f"{name} decode", t_d, x.nbytes, ratio),
                 (f"{name} decode+add", t_da, x.nbytes, ratio)]
    return [{"kernel": k, "numel": n, "bytes": b, "time_us": t * 1e6, "gbps": b / t / 1e9, "ratio": r}
            for k, t, b, r in rows]


def run_kernel_bench(sizes: list[int], codecs: list[str], iters: int = 20, warmup: int = 3,
                     dtype: torch.dtype = torch.float32, threads: int = 1, seed: int = 0) -> list[dict]:
    """Time each kernel at each size (bytes of the fp32 input); returns one dict per row.

    Codecs other than the baselines need the compiled codec kernels; until they are merged here
    those rows carry an "error" key instead of a time.
    """
    torch.set_num_threads(threads)
    rows = []
    for size in sizes:
        n = max(1, size // torch.empty(0, dtype=dtype).element_size())
        x = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float32).to(dtype)
        for c in codecs:
            if c in BASELINES:
                rows += _baseline_rows(c, x, iters, warmup)
            else:
                rows.append({"kernel": c, "numel": n, "bytes": x.nbytes, "time_us": None, "gbps": None,
                             "ratio": None, "error": "codec kernels not merged into ringzip.bench.kernels yet"})
    return rows


def add_arguments(p) -> None:
    p.add_argument("-b", "--minbytes", dest="begin", default="64K")
    p.add_argument("-e", "--maxbytes", dest="end", default="64M")
    p.add_argument("-f", "--stepfactor", dest="factor", type=float, default=16.0)
    p.add_argument("--codec", default="memcpy,fp16,bf16", help="kernels, comma list")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="write rows here")


def run(args) -> int:
    sizes = size_sweep(parse_size(args.begin), parse_size(args.end), args.factor)
    print("\n".join(header_lines(1, "n/a (single-rank kernels)", {"threads": args.threads})))
    rows = run_kernel_bench(sizes, split_list(args.codec), args.iters, args.warmup, threads=args.threads)
    print(f"{'size(B)':>10} {'kernel':>18} {'time(us)':>10} {'GB/s':>8} {'r':>5}")
    for r in rows:
        if r.get("error"):
            print(f"{fmt_bytes(r['bytes']):>10} {r['kernel']:>18}  ERROR: {r['error']}")
        else:
            print(f"{fmt_bytes(r['bytes']):>10} {r['kernel']:>18} {r['time_us']:10.1f} {r['gbps']:8.2f} {r['ratio']:5.2f}")
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0
