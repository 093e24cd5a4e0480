"""`ringzip-bench grid`: how close codec="auto" and algorithm="auto" come to the best fixed choice.

    ringzip-bench grid                     the full grid (also: ringzip-bench collective --preset auto_grid)
    ringzip-bench grid --sizes 64K,1M --links loopback --nproc 3 --repeat 1    a quick one
    ringzip-bench grid --sizes 1M,4M,16M,64M --links loopback,tcp,10gbit,1gbit --dense ''   auto against exact

For every link and world size the ranks (grid_worker.py) run side by side, one ringzip group
each: exact (algorithm auto), the fixed codecs, codec "auto", the forced dense algorithms, and
twins of exact, auto, q4 and the forced ring (a second group of each: the same work twice, the
cells' own noise; auto over exact is the median over both pairs' rounds). Links: `loopback` (one
host, the default transport between its ranks: shared memory), `tcp` (one host, transport="gloo":
TCP over loopback) and emulated rates such as `1gbit` (one network namespace per rank, root). Per size every configuration runs
once per round, in turn, so load on a shared machine hits all alike: --warmup rounds (auto
measures and explores), then rounds until every group's last 3 calls ran by price (at most 40,
and no longer than the warm-up took), then timed rounds until the time budget is spent, at least
--repeat;
a configuration's time is the median round (slowest rank per call). Writes
<out-dir>/<stem>.{md,json,png} (grid_report.py): auto's time over exact's and over the best fixed
codec's per cell, the dense table (algorithm auto vs each forced one) and the cost model's
predictions against the measured times.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from . import grid_report
from ..common import (NetSpec, cpu_model, fmt_bytes, header_lines, log, parse_rate_bits, parse_size, results_dir,
                      split_list, versions)
from ..plan import configs

DEFAULTS = dict(sizes="64K,1M,4M,16M,64M", links="loopback,10gbit,3gbit,1gbit", nproc="3,4", repeat=3,
                codecs="none,bf16,q8,q4,auto", dense="ring,rd,star,hd,tree", time_budget=0.5, iters=15, warmup=20)


TWINS = (("none", "auto"), ("auto", "auto"), ("q4", "auto"), ("none", "ring"))
LOCAL_LINKS = grid_report.LOCAL_LINKS


def add_arguments(p) -> None:
    p.add_argument("--sizes", default=DEFAULTS["sizes"], help="all-reduce sizes (float32)")
    p.add_argument("--links", default=DEFAULTS["links"],
                   help="loopback (shared memory), tcp (loopback over TCP) and/or emulated rates (need root)")
    p.add_argument("--nproc", default=DEFAULTS["nproc"], help="world sizes, comma list")
    p.add_argument("--repeat", type=int, default=DEFAULTS["repeat"], help="timed rounds per size, at least")
    p.add_argument("--codecs", default=DEFAULTS["codecs"], help="ringzip codecs side by side ('auto' = auto:q4)")
    p.add_argument("--dense", default=DEFAULTS["dense"], help="forced dense algorithms beside algorithm=auto ('' = none)")
    p.add_argument("--time-budget", type=float, default=DEFAULTS["time_budget"],
                   help="seconds of timed rounds per configuration and size (beyond --repeat rounds)")
    p.add_argument("--iters", type=int, default=DEFAULTS["iters"], help="timed rounds per size, at most")
    p.add_argument("--warmup", type=int, default=DEFAULTS["warmup"], help="untimed rounds per size")
    p.add_argument("--no-twins", dest="twins", action="store_false",
                   help="leave out the twin groups (a second q4 and a second forced ring: the same work twice)")
    p.add_argument("--out-dir", help="default <repo>/bench/results")
    p.add_argument("--stem", default="auto_grid", help="output file stem")
    p.add_argument("--row-timeout", type=float, default=1200.0, help="kill the ranks after this long without progress")
    p.add_argument("-q", "--quiet", action="store_true")


def _spec(args, sizes, link) -> dict:
    cfgs = configs(["ringzip"], split_list(args.codecs), ["auto"])
    cfgs += [c for c in configs(["ringzip"], ["none"], split_list(args.dense)) if c["algorithm"] != "auto"]
    # Twins: a second group of the same configuration, measured like the others: how far the same
    # work lies from itself bounds what a cell's ratio can tell, and auto over exact is taken over
    # both pairs (auto/exact and their twins), not one.
    cfgs += [dict(c, key=c["key"] + "#twin", twin=True) for c in list(cfgs)
             if args.twins and (c["codec"], c["algorithm"]) in TWINS]
    # min_numel=0 (grid_worker.py): every fixed codec compresses at every size, so auto has something to beat.
    return {"sizes": sizes, "configs": cfgs, "transport": LOCAL_LINKS.get(link), "repeat": max(1, args.repeat),
            "iters": max(args.iters, args.repeat),
            "warmup": args.warmup, "time_budget_s": args.time_budget}


def run(args) -> int:
    sizes = [parse_size(s) for s in split_list(args.sizes)]
    links = split_list(args.links)
    nprocs = [int(n) for n in split_list(args.nproc)]
    out_dir = results_dir(args.out_dir)
    load = os.getloadavg()[0]
    header = {"versions": versions(), "cpu": cpu_model(), "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M"),
              "load_before": load, "argv": getattr(args, "argv", None), "sizes": sizes, "links": links,
              "nproc": nprocs, "repeat": args.repeat, "codecs": split_list(args.codecs),
              "dense": split_list(args.dense)}
    print("\n".join(header_lines(max(nprocs), ", ".join(links), {"grid": f"sizes {args.sizes}  nproc {args.nproc}  "
                                                                  f"repeat {args.repeat}  load before {load:.2f}"})))
    header["cpu_lscpu"] = _lscpu()
    rows: list[dict] = []
    t0 = time.monotonic()
    try:
        for link in links:
            rate = None if link in LOCAL_LINKS else parse_rate_bits(link)
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


def _lscpu() -> str:
    import subprocess

    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    keep = ("Model name", "CPU(s):", "Thread(s) per core", "L2 cache", "L3 cache", "CPU max MHz")
    return "; ".join(" ".join(ln.split()) for ln in out.splitlines() if ln.strip().startswith(keep))


def _cell_rows(args, sizes, rate, n, link) -> list[dict]:
    from ..launch import Launcher, log_tail

    spec = _spec(args, sizes, link)
    rows: list[dict] = []
    net_ctx = None
    if rate:
        from ..netem import open_env

        net_ctx = open_env(n, NetSpec(rate), log=log)
    with tempfile.TemporaryDirectory(prefix="ringzip-grid-") as tmp:
        spec["events"] = f"{tmp}/events.jsonl"
        Path(f"{tmp}/spec.json").write_text(json.dumps(spec))

        def on_event(ev):
            if ev.get("event") != "row":
                return
            r = dict(ev["row"], link=link, link_gbit=rate / 1e9 if rate else None)
            rows.append(r)
            if not args.quiet:
                log(f"[grid]   {fmt_bytes(r['size_bytes']):>4} {r['codec']:>5} {r['algorithm']:>5} {r['time_us']:10.0f} us"
                    + (f"  chose {r['auto_choice']}" if r.get("auto_choice") else ""))

        if net_ctx is not None:
            net_ctx.__enter__()
        try:
            res = Launcher(n, Path(tmp), net_ctx).run("ringzip.bench.lab.grid_worker", [f"{tmp}/spec.json"],
                                                      Path(spec["events"]), args.row_timeout, on_event)
        finally:
            if net_ctx is not None:
                net_ctx.__exit__(None, None, None)
        if not res.ok:
            log(f"[grid] {link}, {n} ranks failed: {res.reason}\n{log_tail(res.logs, 6)}")
    return rows
