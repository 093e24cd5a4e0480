"""What reproducible codec="auto" costs: auto with and without torch.use_deterministic_algorithms,
side by side in one run, against exact and the named codec (q4).

Every configuration is its own ringzip group (so each tuner learns on its own); the groups run
in turn, round after round, each round starting one configuration later; per size, 15 untimed
rounds let auto learn, then 25 timed ones. A call's time is the slowest rank's (barrier-aligned
starts); the table gives medians and each configuration's time over exact's.

    python bench/deterministic_cost.py --nproc 3
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

CONFIGS = ("none", "q4", "auto", "auto+deterministic")
SIZES = (1 << 18, 1 << 20, 1 << 22, 1 << 24)  # float32 elements: 1, 4, 16, 64 MiB


def rank_main(warm: int, rounds: int) -> None:
    import torch
    import torch.distributed as dist

    import ringzip

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    groups = {c: dist.new_group(backend="ringzip", pg_options=ringzip.Options(codec=c.split("+")[0]))
              for c in CONFIGS}
    out = {}
    for size in SIZES:
        x = torch.randn(size, generator=torch.Generator().manual_seed(rank))
        times = {c: [] for c in CONFIGS}
        for r in range(warm + rounds):
            for k in range(len(CONFIGS)):
                c = CONFIGS[(r + k) % len(CONFIGS)]
                t = x.clone()
                torch.use_deterministic_algorithms(c.endswith("deterministic"))
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(t, group=groups[c])
                dt = torch.tensor([time.perf_counter() - t0])
                torch.use_deterministic_algorithms(False)
                dist.all_reduce(dt, op=dist.ReduceOp.MAX)
                if r >= warm:
                    times[c].append(float(dt))
        out[size] = {c: statistics.median(v) for c, v in times.items()}
    if rank == 0:
        print("size_mib " + " ".join(f"{c}_ms" for c in CONFIGS))
        for size, med in out.items():
            print(f"{4 * size / 2**20:g} " + " ".join(f"{1e3 * med[c]:.2f}" for c in CONFIGS), flush=True)
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=3)
    p.add_argument("--warm", type=int, default=15)
    p.add_argument("--rounds", type=int, default=25)
    p.add_argument("--as-rank", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.as_rank:
        rank_main(args.warm, args.rounds)
        return 0
    import socket

    import torch

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, __file__, "--as-rank", "--warm", str(args.warm), "--rounds",
                               str(args.rounds)],
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.nproc), MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=str(port), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(args.nproc),
                                       OMP_NUM_THREADS="1"),
                              stdout=subprocess.PIPE, text=True) for r in range(args.nproc)]
    outs = [pr.communicate(timeout=1800)[0] for pr in procs]
    if any(pr.returncode for pr in procs):
        raise SystemExit("a rank failed")
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               platform.processor())
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, {cpu}, torch {torch.__version__}, {args.nproc} ranks over shared "
          f"memory, {args.warm} untimed + {args.rounds} timed rounds per size, medians of the slowest rank")
    lines = outs[0].strip().splitlines()
    print("| MiB | " + " | ".join(CONFIGS) + " | auto / exact | auto+det / exact |")
    print("|---" * (len(CONFIGS) + 3) + "|")
    for ln in lines[1:]:
        v = ln.split()
        ms = [float(x) for x in v[1:]]
        print(f"| {v[0]} | " + " | ".join(f"{m:.2f} ms" for m in ms) + f" | {ms[2] / ms[0]:.2f} | {ms[3] / ms[0]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
