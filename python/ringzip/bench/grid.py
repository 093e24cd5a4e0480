"""`ringzip-bench grid`: how close codec="auto" and algorithm="auto" come to the best fixed choice.

    ringzip-bench grid                     the full grid (also: ringzip-bench collective --preset auto_grid)
    ringzip-bench grid --sizes 64K,1M --links loopback --nproc 3 --repeat 1    a quick one

For every link (loopback, or an emulated --net rate in network namespaces, root) and world size,
one `collective` sweep runs side by side: ringzip exact (algorithm auto), the fixed codecs, codec
"auto", and the forced dense algorithms; every size runs each configuration in turn `--repeat`
times. Writes <out-dir>/<stem>.{md,json,png} (grid_report.py): auto's time over exact's and over
the best fixed codec's per cell, the dense table (algorithm auto vs each forced one) and the cost
model's predictions against the measured times.
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from . import grid_report
from .collective import sweep
from .common import (cpu_model, default_results_dir, fmt_bytes, header_lines, log, parse_rate_bits, parse_size,
                     split_list, versions)
from .plan import configs

DEFAULTS = dict(sizes="64K,1M,4M,16M,64M", links="loopback,10gbit,3gbit,1gbit", nproc="3,4", repeat=3,
                codecs="none,bf16,q8,q4,auto", dense="ring,rd,star,hd,tree", time_budget=1.0, iters=10, warmup=2)


def add_arguments(p) -> None:
    p.add_argument("--sizes", default=DEFAULTS["sizes"], help="all-reduce sizes (float32)")
    p.add_argument("--links", default=DEFAULTS["links"], help="loopback and/or emulated rates (need root)")
    p.add_argument("--nproc", default=DEFAULTS["nproc"], help="world sizes, comma list")
    p.add_argument("--repeat", type=int, default=DEFAULTS["repeat"], help="rounds of every configuration per size")
    p.add_argument("--codecs", default=DEFAULTS["codecs"], help="ringzip codecs side by side ('auto' = auto:q4)")
    p.add_argument("--dense", default=DEFAULTS["dense"], help="forced dense algorithms beside algorithm=auto ('' = none)")
    p.add_argument("--time-budget", type=float, default=DEFAULTS["time_budget"], help="seconds per row")
    p.add_argument("--iters", type=int, default=DEFAULTS["iters"], help="timed iterations per row, upper bound")
    p.add_argument("--warmup", type=int, default=DEFAULTS["warmup"], help="warm-up iterations, upper bound")
    p.add_argument("--out-dir", help="default <repo>/bench/results")
    p.add_argument("--stem", default="auto_grid", help="output file stem")
    p.add_argument("--row-timeout", type=float, default=300.0, help="kill the ranks after this long without progress")
    p.add_argument("-q", "--quiet", action="store_true")


def _spec(args, sizes, rate_bits) -> dict:
    cfgs = configs(["ringzip"], split_list(args.codecs), ["auto"])
    cfgs += [c for c in configs(["ringzip"], ["none"], split_list(args.dense)) if c["algorithm"] != "auto"]
    # min_numel=0: every fixed codec compresses at every size, so auto has something to beat.
    return {"op": "allreduce", "dtype": "float32", "sizes": sizes, "configs": cfgs, "seed": 0,
            "iters": args.iters, "warmup": args.warmup, "min_iters": 3, "time_budget_s": args.time_budget,
            "threads": 1, "ringzip_options": {"min_numel": 0}, "timeout_s": max(120.0, args.row_timeout),
            "repeat": max(1, args.repeat), "link_gbit": rate_bits / 1e9 if rate_bits else None}


def run(args) -> int:
    sizes = [parse_size(s) for s in split_list(args.sizes)]
    links = split_list(args.links)
    nprocs = [int(n) for n in split_list(args.nproc)]
    out_dir = Path(args.out_dir) if args.out_dir else default_results_dir()
    load = os.getloadavg()[0]
    header = {"versions": versions(), "cpu": cpu_model(), "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M"),
              "load_before": load, "argv": getattr(args, "argv", None), "sizes": sizes, "links": links,
              "nproc": nprocs, "repeat": args.repeat, "codecs": split_list(args.codecs),
              "dense": split_list(args.dense)}
    print("\n".join(header_lines(max(nprocs), ", ".join(links), {"grid": f"sizes {args.sizes}  nproc {args.nproc}  "
                                                                  f"repeat {args.repeat}  load before {load:.2f}"})))
    rows: list[dict] = []
    t0 = time.monotonic()
    try:
        for link in links:
            rate = None if link == "loopback" else parse_rate_bits(link)
            for n in nprocs:
                log(f"[grid] {link}, {n} ranks ({time.monotonic() - t0:.0f} s so far)")
                rows += _cell_rows(args, sizes, rate, n, link)
    except KeyboardInterrupt:
        log("[grid] interrupted; writing what was measured")
    header["load_after"] = os.getloadavg()[0]
    header["minutes"] = (time.monotonic() - t0) / 60
    paths = grid_report.write(out_dir, args.stem, header, rows)
    log("[grid] wrote " + ", ".join(str(p) for p in paths))
    return 0


def _cell_rows(args, sizes, rate, n, link) -> list[dict]:
    from .report import median_of_repeats

    spec = _spec(args, sizes, rate)
    net_ctx = None
    if rate:
        from .netem import open_env

        net_ctx = open_env(n, rate, 0.0, log=log)
    with tempfile.TemporaryDirectory(prefix="ringzip-grid-") as tmp:
        if net_ctx is not None:
            net_ctx.__enter__()
        try:
            got = sweep(spec, n, net_ctx, Path(tmp), args.row_timeout, quiet=args.quiet)
        finally:
            if net_ctx is not None:
                net_ctx.__exit__(None, None, None)
    got = median_of_repeats(got)
    for r in got:
        r["link"] = link
        if not args.quiet and r.get("time_us"):
            log(f"[grid]   {fmt_bytes(r['size_bytes']):>4} {r['codec']:>5} {r['algorithm']:>5} {r['time_us']:10.0f} us"
                + (f"  chose {r['auto_choice']}" if r.get("auto_choice") else ""))
    return got
