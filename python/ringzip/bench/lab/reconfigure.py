"""What a membership change costs the calls after it (ringzip.torchft.ProcessGroupRingzip).

    python -m ringzip.bench.lab.reconfigure                       # 3 local ranks
    python -m ringzip.bench.lab.reconfigure --net 1gbit,10ms      # 3 emulated machines (root)

The ranks configure the process group as torchft's Manager does at each quorum (a new store
prefix each time, the same members), --quorums times, and all-reduce --size float32 --calls
times in each. Two ways per codec, in turn: the new group seeded with the figures the members
carried ("carried", what ringzip does), and measuring its link anew ("anew": the first call
probes and agrees). Reported per codec and way: the first call after a change over the steady
state (the median of the later half of every group's calls), median and worst over the changes,
and what configure() took. Writes <out-dir>/reconfigure.{md,json}.
Rank side: python -m ringzip.bench.lab.reconfigure rank SPEC.json (started by the launcher).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ..common import cpu_model, log, parse_net, parse_size, results_dir


def rank_main(spec: dict) -> None:
    import torch
    import torch.distributed as dist

    import ringzip
    from ringzip import _C
    from ringzip.torchft import ProcessGroupRingzip

    torch.set_num_threads(1)
    if spec["way"] == "anew":
        _C.RingzipBackend.seed_tuner = lambda *a, **k: None  # every group measures its link again
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    store = dist.TCPStore(addr, port, n, is_master=rank == 0, wait_for_workers=False)
    codec = spec["codec"]
    pg = ProcessGroupRingzip(ringzip.Options(codec=codec, error_feedback=codec != "none"))
    x = torch.randn(spec["numel"])
    groups = []
    for q in range(spec["quorums"]):
        t0 = time.perf_counter()
        pg.configure(f"{addr}:{port}/{spec['way']}/{codec}/{q}", f"r{rank}", rank, n)
        configure, configured_at = time.perf_counter() - t0, time.time()
        times = []
        for _ in range(spec["calls"]):
            t0 = time.perf_counter()
            pg.allreduce([x], dist.AllreduceOptions()).wait()
            times.append(time.perf_counter() - t0)
        groups.append({"configure_s": configure, "configured_at": configured_at, "times_s": times})
    pg.shutdown()
    Path(spec["out"]).with_suffix(f".rank{rank}.json").write_text(json.dumps(groups))
    store.set(f"done{rank}", "1")
    if rank == 0:  # the store's host stays until every rank is through
        store.wait([f"done{r}" for r in range(n)])


def summarize(per_rank: list[list[dict]]) -> dict:
    """The first call of every group after the first, over the steady state. A group's first
    call runs from the moment the last rank finished configuring to the moment the last rank
    has its result (as the benchmark's slowest rank after aligned starts): a rank's own time
    also holds the wait for the others' configure (rank 0, which hosts the store, is through
    seconds earlier on a long link; its figure is kept beside), or misses the others' part (the
    last rank finds their data there). The steady state is the median of every rank's later half
    of every group's calls after the first; the second call is its slowest rank's."""
    later = range(1, len(per_rank[0]))
    steady = statistics.median(t for groups in per_rank for q in later
                               for t in groups[q]["times_s"][len(groups[q]["times_s"]) // 2:])
    first = [(max(g[q]["configured_at"] + g[q]["times_s"][0] for g in per_rank)
              - max(g[q]["configured_at"] for g in per_rank)) / steady for q in later]
    second = [max(g[q]["times_s"][1] for g in per_rank) / steady for q in later]
    r0 = [per_rank[0][q] for q in later]
    return {"steady_ms": round(steady * 1e3, 2), "first_over_steady_median": round(statistics.median(first), 2),
            "first_over_steady_worst": round(max(first), 2),
            "second_over_steady_median": round(statistics.median(second), 2),
            "rank0_first_over_steady_median": round(statistics.median(g["times_s"][0] / steady for g in r0), 2),
            "configure_ms_median": round(statistics.median(max(g[q]["configure_s"] for g in per_rank)
                                                           for q in later) * 1e3, 1),
            "first_group_first_over_steady": round(per_rank[0][0]["times_s"][0] / steady, 2)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["rank"]:
        rank_main(json.loads(Path(argv[1]).read_text()))
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--nproc", type=int, default=3)
    p.add_argument("--net", help="RATE[,DELAY[,LOSS]]: emulated machines (root); default: local ranks")
    p.add_argument("--codecs", default="none,q4")
    p.add_argument("--size", default="1M", help="all-reduce size (float32 elements)")
    p.add_argument("--quorums", type=int, default=9, help="groups built in turn (the first is the job's start)")
    p.add_argument("--calls", type=int, default=12, help="all-reduces per group")
    p.add_argument("--ways", default="carried,anew", help="carried (what ringzip does), anew (measured again)")
    p.add_argument("--out-dir", help="default <repo>/bench/results")
    args = p.parse_args(argv)
    from ..launch import Launcher
    from ..netem import open_env

    rows = []
    with tempfile.TemporaryDirectory(prefix="ringzip-reconfigure-") as tmp, \
            (open_env(args.nproc, parse_net(args.net), log=log) if args.net else contextlib.nullcontext()) as env:
        for codec in args.codecs.split(","):
            for way in args.ways.split(","):
                spec = {"codec": codec, "way": way, "numel": parse_size(args.size), "quorums": args.quorums,
                        "calls": args.calls, "out": f"{tmp}/{codec}-{way}"}
                Path(f"{tmp}/spec.json").write_text(json.dumps(spec))
                res = Launcher(args.nproc, Path(tmp), env).run(
                    "ringzip.bench.lab.reconfigure", ["rank", f"{tmp}/spec.json"], None, 0, total_timeout=900)
                if not res.ok:
                    raise SystemExit(f"reconfigure {codec} {way}: {res.reason}")
                per_rank = [json.loads(Path(spec["out"]).with_suffix(f".rank{r}.json").read_text())
                            for r in range(args.nproc)]
                rows.append({"codec": codec, "way": way, **summarize(per_rank)})
                log(f"[reconfigure] {rows[-1]}")
    head = (f"{time.strftime('%Y-%m-%d')}, {cpu_model()}, {args.nproc} ranks "
            f"({'emulated machines, ' + args.net if args.net else 'one host'}), all-reduce of {args.size} float32, "
            f"{args.quorums} groups x {args.calls} calls; command: python -m ringzip.bench.lab.reconfigure "
            f"{' '.join(argv)}")
    out_dir = results_dir(args.out_dir)
    stem = "reconfigure" + (f"_net-{args.net.replace(',', '_')}" if args.net else "")
    (out_dir / f"{stem}.json").write_text(json.dumps({"header": head, "rows": rows}, indent=1))
    lines = [f"# First calls after a membership change\n\n{head}\n",
             "| codec | figures | steady (ms) | 1st call / steady, median | worst | 2nd / steady | "
             "rank 0's 1st call / steady | configure (ms) | job's first call / steady |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['codec']} | {r['way']} | {r['steady_ms']} | {r['first_over_steady_median']} | "
                     f"{r['first_over_steady_worst']} | {r['second_over_steady_median']} | "
                     f"{r['rank0_first_over_steady_median']} | {r['configure_ms_median']} | "
                     f"{r['first_group_first_over_steady']} |")
    (out_dir / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
