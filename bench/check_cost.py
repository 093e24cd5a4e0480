#!/usr/bin/env python
"""Latency cost of ringzip's mismatch check (Options(check="on") vs "off").

Two (or --world) ranks, one process group per mode, all_reduce of float32 tensors of each size;
the two modes alternate in blocks so background load hits both alike. Prints the median time
per call and the added cost of the check.

    python bench/check_cost.py [--world 2] [--iters 300]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = [1, 256, 16384, 262144, 4194304]  # elements: 4 B .. 16 MB


def rank_main(rank, world, store, iters, out):
    import torch
    import torch.distributed as dist

    import ringzip

    torch.set_num_threads(1)
    dist.init_process_group("ringzip", init_method="file://" + store, rank=rank, world_size=world,
                            pg_options=ringzip.Options(check="on"))
    groups = {"on": None, "off": dist.new_group(backend="ringzip", pg_options=ringzip.Options(check="off"))}
    res = {}
    for n in SIZES:
        t = torch.ones(n)
        k = max(5, iters if n <= 16384 else iters // 10 if n <= 262144 else iters // 50)
        times = {"on": [], "off": []}
        for block in range(10):
            for mode in ("on", "off") if block % 2 == 0 else ("off", "on"):
                g = groups[mode]
                dist.all_reduce(t, group=g)
                for _ in range(max(1, k // 10)):
                    t0 = time.perf_counter()
                    dist.all_reduce(t, group=g)
                    times[mode].append(time.perf_counter() - t0)
        res[n] = {m: statistics.median(v) * 1e6 for m, v in times.items()}
    dist.destroy_process_group()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(res, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--rank", type=int)
    ap.add_argument("--store")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.rank is not None:
        rank_main(a.rank, a.world, a.store, a.iters, a.out)
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        ps = [subprocess.Popen([sys.executable, __file__, "--world", str(a.world), "--iters", str(a.iters),
                                "--rank", str(r), "--store", os.path.join(tmp, "s"), "--out", out],
                               env=dict(os.environ, OMP_NUM_THREADS="1")) for r in range(a.world)]
        for p in ps:
            p.wait(timeout=600)
        res = json.load(open(out))
    print(f"all_reduce, {a.world} ranks, median us per call")
    print(f"{'bytes':>10} {'check=off':>10} {'check=on':>10} {'added':>8} {'added %':>8}")
    for n, r in res.items():
        add = r["on"] - r["off"]
        print(f"{int(n) * 4:>10} {r['off']:>10.1f} {r['on']:>10.1f} {add:>8.1f} {100 * add / r['off']:>7.1f}%")


if __name__ == "__main__":
    main()
