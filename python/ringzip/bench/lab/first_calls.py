"""What a new group's first calls cost: its creation, then all-reduces of 1 MiB and 64 MiB.

    python -m ringzip.bench.lab.first_calls --net 1gbit,50ms --link-gbit 1     # 4 emulated machines (root)
    python -m ringzip.bench.lab.first_calls --pause 1                           # a second's setup first

Each rank creates the group (and passes a barrier: the creation), waits --pause seconds (a job
building its model), then all-reduces 1 MiB five times and 64 MiB three times, a barrier before
every call but the first. Reported: the slowest rank's creation and each call, in milliseconds
(the first call includes whatever the group does at its first call: the cost model's probe and
agreement). Writes <out-dir>/first_calls[_net-...][_paced][_pause-S].{md,json}. Rank side:
python -m ringzip.bench.lab.first_calls rank SPEC.json.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

from ..common import cpu_model, log, parse_net, results_dir

CALLS = [("1 MiB", 1 << 18)] * 5 + [("64 MiB", 1 << 24)] * 3


def rank_main(spec: dict) -> None:
    import os

    import torch
    import torch.distributed as dist

    import ringzip

    torch.set_num_threads(1)
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    t0 = time.perf_counter()
    dist.init_process_group(spec["backend"], init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=rank, world_size=n,
                            pg_options=ringzip.Options(link_gbit=spec["link_gbit"]) if spec["backend"] == "ringzip" else None)
    dist.barrier()
    out = {"create": time.perf_counter() - t0, "calls": []}
    time.sleep(spec["pause"])
    for i, (_, numel) in enumerate(CALLS):
        x = torch.ones(numel)
        if i:
            dist.barrier()
        t = time.perf_counter()
        dist.all_reduce(x)
        out["calls"].append(time.perf_counter() - t)
    dist.destroy_process_group()
    Path(spec["out"]).with_suffix(f".rank{rank}.json").write_text(json.dumps(out))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "rank":
        rank_main(json.loads(Path(argv[1]).read_text()))
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--nproc", type=int, default=4)
    p.add_argument("--net", help="RATE[,DELAY[,LOSS]]: emulated machines (root); default: local ranks")
    p.add_argument("--backend", default="ringzip", help="ringzip or gloo")
    p.add_argument("--link-gbit", type=float, default=0.0, help="ringzip.Options(link_gbit=...): the link's rate")
    p.add_argument("--pause", type=float, default=0.0, help="seconds between the group's creation and its first call")
    p.add_argument("--runs", type=int, default=1, help="groups created one after another, each reported")
    p.add_argument("--out-dir", help="default <repo>/bench/results")
    args = p.parse_args(argv)
    from ..launch import Launcher
    from ..netem import open_env

    runs = []
    with tempfile.TemporaryDirectory(prefix="ringzip-first-") as tmp, \
            (open_env(args.nproc, parse_net(args.net), log=log) if args.net else contextlib.nullcontext()) as env:
        for k in range(args.runs):
            spec = {"backend": args.backend, "link_gbit": args.link_gbit, "pause": args.pause, "out": f"{tmp}/run{k}"}
            Path(f"{tmp}/spec.json").write_text(json.dumps(spec))
            res = Launcher(args.nproc, Path(tmp), env).run("ringzip.bench.lab.first_calls", ["rank", f"{tmp}/spec.json"],
                                                           None, 0, total_timeout=600)
            if not res.ok:
                raise SystemExit(f"first_calls: {res.reason}")
            ranks = [json.loads(Path(spec["out"]).with_suffix(f".rank{r}.json").read_text()) for r in range(args.nproc)]
            runs.append({"create_ms": max(r["create"] for r in ranks) * 1e3,
                         "calls_ms": [max(r["calls"][i] for r in ranks) * 1e3 for i in range(len(CALLS))]})
            log(f"[first_calls] run {k}: created in {runs[-1]['create_ms']:.0f} ms, calls "
                + ", ".join(f"{c:.0f}" for c in runs[-1]["calls_ms"]) + " ms")
    head = (f"{time.strftime('%Y-%m-%d')}, {cpu_model()}, {args.nproc} ranks "
            f"({'emulated machines, ' + args.net if args.net else 'one host'}), {args.backend}"
            + (f", link_gbit={args.link_gbit:g}" if args.link_gbit else "") + f", pause {args.pause:g} s; command: "
            f"python -m ringzip.bench.lab.first_calls {' '.join(argv)}")
    stem = ("first_calls" + (f"_net-{args.net.replace(',', '_')}" if args.net else "") + f"_{args.backend}"
            + ("_paced" if args.link_gbit else "") + (f"_pause-{args.pause:g}" if args.pause else ""))
    out_dir = results_dir(args.out_dir)
    (out_dir / f"{stem}.json").write_text(json.dumps({"header": head, "calls": [c for c, _ in CALLS], "runs": runs},
                                                     indent=1))
    lines = [f"# A group's first calls\n\n{head}\n", "The slowest rank's time, ms: the group's creation (with a "
             "barrier), then each call in order (a barrier before every call but the first).\n",
             "| run | creation | " + " | ".join(c for c, _ in CALLS) + " |", "|---|---:|" + "---:|" * len(CALLS)]
    for k, r in enumerate(runs):
        lines.append(f"| {k + 1} | {r['create_ms']:.0f} | " + " | ".join(f"{c:.0f}" for c in r["calls_ms"]) + " |")
    (out_dir / f"{stem}.md").write_text("\n".join(lines) + "\n")
    log(f"[first_calls] wrote {out_dir / stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
