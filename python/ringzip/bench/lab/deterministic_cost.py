"""What reproducible codec="auto" costs: auto with and without torch.use_deterministic_algorithms,
side by side in one run, against exact and the named codec (q4).

Every configuration is its own ringzip group (so each tuner learns on its own); the groups run
in turn, round after round, each round starting one configuration later; per size, 15 untimed
rounds let auto learn, then 25 timed ones. A call's time is the slowest rank's (barrier-aligned
starts); the table gives medians and each configuration's time over exact's.

    python -m ringzip.bench.lab.deterministic_cost --nproc 3
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ..common import cpu_model
from ..launch import run_once

CONFIGS = ("none", "q4", "auto", "auto+deterministic")
SIZES = (1 << 18, 1 << 20, 1 << 22, 1 << 24)  # float32 elements: 1, 4, 16, 64 MiB


def rank_main(warm: int, rounds: int, out_path: Path) -> None:
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
        out_path.write_text(json.dumps(out))
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=3)
    p.add_argument("--warm", type=int, default=15)
    p.add_argument("--rounds", type=int, default=25)
    p.add_argument("--as-rank", metavar="FILE", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.as_rank:
        rank_main(args.warm, args.rounds, Path(args.as_rank))
        return 0
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        run_once(args.nproc, Path(tmp), "ringzip.bench.lab.deterministic_cost",
                 ["--warm", str(args.warm), "--rounds", str(args.rounds), "--as-rank", str(out)], 1800)
        medians = json.loads(out.read_text())
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, {cpu_model()}, torch {torch.__version__}, {args.nproc} ranks over "
          f"shared memory, {args.warm} untimed + {args.rounds} timed rounds per size, medians of the slowest rank")
    print("| MiB | " + " | ".join(CONFIGS) + " | auto / exact | auto+det / exact |")
    print("|---" * (len(CONFIGS) + 3) + "|")
    for size, med in medians.items():
        ms = [1e3 * med[c] for c in CONFIGS]
        print(f"| {4 * int(size) / 2**20:g} | " + " | ".join(f"{m:.2f} ms" for m in ms)
              + f" | {ms[2] / ms[0]:.2f} | {ms[3] / ms[0]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
