"""Shared-memory transport vs Gloo over loopback TCP, side by side in one run.

    PYTHONPATH=python python -m ringzip.bench.lab.shm_vs_gloo [--ranks 2,4] [--reps 7]
        [--out bench/results/shm_vs_gloo.json]

Each scenario starts its ranks as processes on this host, each holding both a torch
ProcessGroupGloo (127.0.0.1) and a ringzip ShmTransport built on the same store; every
repetition runs the Gloo and the shm variant back to back (so the machine's load hits both) and
the tables quote medians over repetitions:

  * ping-pong latency, 2 ranks, 4 B .. 4 KiB: one-way time = round trip / 2
    (Gloo: dist.send / dist.recv; shm: ShmTransport.send / recv), both from Python;
  * bandwidth, 2 ranks, 64 MiB: one-way time of a 64 MiB ping-pong;
  * exact 64 MiB float32 SUM all-reduce on each rank count of --ranks: Gloo's own all_reduce,
    ringzip's ring over the Gloo transport (the ringzip backend, algorithm ring) and ringzip's
    ring over the shm transport (_C.shm_allreduce); time = slowest rank.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ..common import cpu_model
from ..launch import run_once

PP_SIZES = [4, 64, 512, 4096]
BIG = 64 << 20


# ---- worker (one process per rank) ---------------------------------------------------------


def _timed(fn, n=1):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def worker(rank: int, size: int, tmp: str, reps: int) -> None:
    os.environ["RINGZIP_ALGORITHM"] = "ring"
    import torch
    import torch.distributed as dist

    import ringzip  # noqa: F401 - registers the backend
    from ringzip import _C

    torch.set_num_threads(1)
    store = dist.FileStore(os.path.join(tmp, "store"), size)
    dist.init_process_group("gloo", store=dist.PrefixStore("gloo/", store), rank=rank, world_size=size)
    rz = dist.new_group(backend="ringzip", pg_options=ringzip.Options(transport="gloo"))  # Gloo only
    shm = _C.ShmTransport(dist.PrefixStore("shm/", store), rank, size, 120.0)
    res: dict = {"pingpong_us": {}, "bandwidth_gbs": {}, "allreduce_ms": {}}
    peer = 1 - rank

    def pingpong(kind, buf, n):
        def gloo():
            if rank == 0:
                dist.send(buf, peer, tag=3)
                dist.recv(buf, peer, tag=3)
            else:
                dist.recv(buf, peer, tag=3)
                dist.send(buf, peer, tag=3)

        def sh():
            if rank == 0:
                shm.send(buf, peer, 3)
                shm.recv(buf, peer, 3)
            else:
                shm.recv(buf, peer, 3)
                shm.send(buf, peer, 3)

        fn = gloo if kind == "gloo" else sh
        dist.barrier()
        return _timed(fn, n) / 2

    if size == 2:
        for nbytes in PP_SIZES:
            buf = torch.zeros(nbytes, dtype=torch.uint8)
            for kind in ("gloo", "shm"):
                pingpong(kind, buf, 200)  # warm up
            times = {"gloo": [], "shm": []}
            for _ in range(reps):
                for kind in ("gloo", "shm"):
                    times[kind].append(pingpong(kind, buf, 1000) * 1e6)
            res["pingpong_us"][nbytes] = {k: statistics.median(v) for k, v in times.items()}
        buf = torch.zeros(BIG, dtype=torch.uint8)
        times = {"gloo": [], "shm": []}
        for i in range(reps + 1):
            for kind in ("gloo", "shm"):
                t = pingpong(kind, buf, 2)
                if i:
                    times[kind].append(BIG / t / 1e9)
        res["bandwidth_gbs"] = {k: statistics.median(v) for k, v in times.items()}

    x = torch.empty(BIG // 4, dtype=torch.float32)
    expect = float(sum(range(1, size + 1)))

    def allreduce(kind):
        x.fill_(rank + 1)
        dist.barrier()
        t0 = time.perf_counter()
        if kind == "gloo":
            dist.all_reduce(x)
        elif kind == "ringzip-gloo":
            dist.all_reduce(x, group=rz)
        else:
            _C.shm_allreduce(shm, x, "ring")
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        assert bool((x == expect).all()), f"{kind} all-reduce gave wrong sums"
        return float(t) * 1e3

    kinds = ("gloo", "ringzip-gloo", "shm")
    times = {k: [] for k in kinds}
    for i in range(reps + 1):
        for kind in kinds:
            t = allreduce(kind)
            if i:
                times[kind].append(t)
    res["allreduce_ms"] = {k: statistics.median(v) for k, v in times.items()}
    shm.close()
    if rank == 0:
        with open(os.path.join(tmp, "result.json"), "w") as f:
            json.dump(res, f)
    dist.destroy_process_group()


# ---- driver ---------------------------------------------------------------------------------


def launch(size: int, reps: int, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="shm_bench_") as tmp:
        run_once(size, Path(tmp), "ringzip.bench.lab.shm_vs_gloo", ["--worker", tmp, str(reps)], timeout)
        return json.loads((Path(tmp) / "result.json").read_text())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), sys.argv[2], int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="2,4", help="rank counts for the all-reduce (2 also runs ping-pong)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per launch")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.ranks.split(",")]
    if 2 not in sizes:
        sizes.insert(0, 2)
    cpu = f"{cpu_model()}, {os.cpu_count()} CPUs"
    print(f"# shm vs gloo (loopback TCP) -- {cpu}; medians of {args.reps} repetitions; "
          f"load average {os.getloadavg()[0]:.1f} (other users' work skews both, the ratios less)")
    print(f"# command: {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
    out = {"cpu": cpu, "command": " ".join(sys.argv), "reps": args.reps, "load_before": os.getloadavg()[0], "runs": {}}
    for size in sizes:
        r = launch(size, args.reps, args.timeout)
        out["runs"][str(size)] = r
        if r["pingpong_us"]:
            print("\nping-pong, 2 ranks, one-way latency (us)")
            print(f"{'bytes':>8} {'gloo':>9} {'shm':>9} {'speed-up':>9}")
            for n, v in r["pingpong_us"].items():
                print(f"{n:>8} {v['gloo']:9.1f} {v['shm']:9.1f} {v['gloo'] / v['shm']:8.1f}x")
            b = r["bandwidth_gbs"]
            print(f"\nbandwidth, 2 ranks, 64 MiB: gloo {b['gloo']:.2f} GB/s, shm {b['shm']:.2f} GB/s "
                  f"({b['shm'] / b['gloo']:.1f}x)")
        a = r["allreduce_ms"]
        print(f"\nexact 64 MiB float32 all-reduce, {size} ranks (ms): gloo {a['gloo']:.1f}, "
              f"ringzip ring on gloo {a['ringzip-gloo']:.1f}, ringzip ring on shm {a['shm']:.1f} "
              f"(shm vs gloo {a['gloo'] / a['shm']:.1f}x, vs ringzip-on-gloo {a['ringzip-gloo'] / a['shm']:.1f}x)")
        sys.stdout.flush()
    out["load_after"] = os.getloadavg()[0]
    print(f"# load average at the end {out['load_after']:.1f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
