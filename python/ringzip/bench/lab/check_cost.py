"""Cost of ringzip's mismatch check: Options(check="off" / "auto" / "on") side by side, gloo too.

--world ranks, one process group per mode, all_reduce of float32 tensors of each size (4 B to
64 MiB); the modes take turns in blocks (order rotating) so background load hits all alike.
Prints the median time per call and each mode's cost over check="off".

    python -m ringzip.bench.lab.check_cost [--world 4] [--iters 300]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from ..common import cpu_model
from ..launch import run_once

SIZES = [1, 256, 16384, 262144, 1 << 20, 1 << 22, 1 << 24]  # elements: 4 B .. 64 MiB
MODES = ("off", "auto", "on", "gloo")


def rank_main(rank, world, store, iters, out):
    import torch
    import torch.distributed as dist

    import ringzip

    torch.set_num_threads(1)
    dist.init_process_group("ringzip", init_method="file://" + store, rank=rank, world_size=world,
                            pg_options=ringzip.Options(check="off"))
    groups = {"off": None, "gloo": dist.new_group(backend="gloo")}
    for mode in ("auto", "on"):
        groups[mode] = dist.new_group(backend="ringzip", pg_options=ringzip.Options(check=mode))
    res = {}
    for n in SIZES:
        t = torch.ones(n)
        k = max(5, iters if n <= 16384 else iters // 10 if n <= 262144 else iters // 50 if n <= 1 << 20 else 10)
        times = {m: [] for m in MODES}
        for block in range(10):
            for i in range(len(MODES)):
                mode = MODES[(block + i) % len(MODES)]
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
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--as-rank", metavar="DIR", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.as_rank:
        rank_main(int(os.environ["RANK"]), a.world, os.path.join(a.as_rank, "s"), a.iters,
                  os.path.join(a.as_rank, "out.json"))
        return
    with tempfile.TemporaryDirectory() as tmp:
        run_once(a.world, Path(tmp), "ringzip.bench.lab.check_cost",
                 ["--world", str(a.world), "--iters", str(a.iters), "--as-rank", tmp], 600)
        res = json.loads((Path(tmp) / "out.json").read_text())
    print(f"all_reduce float32, {a.world} ranks, loopback, median us per call; CPU: {cpu_model()}")
    print(f"{'bytes':>10} {'gloo':>10} {'off':>10} {'auto':>10} {'on':>10} {'auto/off':>9} {'on/off':>8}")
    for n, r in res.items():
        print(f"{int(n) * 4:>10} {r['gloo']:>10.1f} {r['off']:>10.1f} {r['auto']:>10.1f} {r['on']:>10.1f} "
              f"{r['auto'] / r['off']:>9.3f} {r['on'] / r['off']:>8.3f}")


if __name__ == "__main__":
    main()
