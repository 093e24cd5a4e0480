"""What each rank's clock says in a loop of all-reduces without barriers (root).

    python -m ringzip.bench.lab.skew -n 3 --net 2gbit --size 48M --codecs topk:0.01,q4,gloo

Users time `dist.all_reduce` in a plain loop, each rank on its own clock. There a call's time is
not the collective's: a rank that enters late finds the others' data already delivered and
leaves first, so it enters the next call first and waits for the others in it. Its times can
alternate between a short and a long call although the collective's duration is steady. Each
row (--codecs, comma-separated; `gloo` for gloo) runs twice in fresh processes, one namespace
per rank: `loop` (a copy of the input, then the call, no barrier) and `barrier` (the same with a
barrier before each call). Reported per rank and mode: the calls' median, the medians of even and
odd calls, the lag-1 autocorrelation (an every-other-call pattern is near -1) and the loop's
wall time per iteration, which says whether the alternation costs anything.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ..common import cpu_model, log, parse_net, parse_size, results_dir


def rank_main(mode: str, codec: str, count: int, calls: int) -> int:
    import torch
    import torch.distributed as dist

    import ringzip

    from ..rank import join

    rank, _, _ = join()
    g = dist.new_group(backend="gloo") if codec == "gloo" else \
        dist.new_group(backend="ringzip", pg_options=ringzip.Options(codec=codec))
    x = torch.randn(count, generator=torch.Generator().manual_seed(rank))
    times = []
    dist.barrier()
    t_loop = time.perf_counter()
    for _ in range(calls):
        buf = x.clone()
        if mode == "barrier":
            dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buf, group=g)
        times.append((time.perf_counter() - t0) * 1e3)
    dist.barrier()
    per_iter = (time.perf_counter() - t_loop) * 1e3 / calls
    print("SKEW " + json.dumps({"rank": rank, "ms": times, "per_iter_ms": per_iter}), flush=True)
    dist.destroy_process_group()
    return 0


def lag1(xs: list[float]) -> float:
    m = statistics.fmean(xs)
    num = sum((a - m) * (b - m) for a, b in zip(xs, xs[1:]))
    den = sum((a - m) ** 2 for a in xs)
    return num / den if den else 0.0


def summary(ms: list[float]) -> dict:
    return {"median_ms": statistics.median(ms), "even_ms": statistics.median(ms[0::2]),
            "odd_ms": statistics.median(ms[1::2]), "lag1": lag1(ms)}


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "rank":
        return rank_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--nproc", type=int, default=3)
    p.add_argument("--net", default="2gbit")
    p.add_argument("--size", default="48M")
    p.add_argument("--codecs", default="topk:0.01,q4,gloo")
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--out-dir")
    p.add_argument("--stem", default="skew_n3_net-2gbit")
    args = p.parse_args(argv)

    from ..launch import Launcher, log_tail
    from ..netem import open_env

    spec = parse_net(args.net)
    rate = spec.rate
    count = parse_size(args.size) // 4
    rows = []
    with open_env(args.nproc, spec, log=log) as net:
        for codec in args.codecs.split(","):
            for mode in ("loop", "barrier"):
                with tempfile.TemporaryDirectory(prefix="ringzip-skew-") as tmp:
                    res = Launcher(args.nproc, Path(tmp), net).run(
                        "ringzip.bench.lab.skew", ["rank", mode, codec, str(count), str(args.calls)], None, 0,
                        total_timeout=600.0)
                    if not res.ok:
                        log(f"[skew] {codec} {mode} failed: {res.reason}\n{log_tail(res.logs)}")
                        return 1
                    for path in res.logs:
                        for line in Path(path).read_text(errors="replace").splitlines():
                            if line.startswith("SKEW "):
                                r = json.loads(line[5:])
                                rows.append({"codec": codec, "mode": mode, "rank": r["rank"], "ms": r["ms"],
                                             "per_iter_ms": r["per_iter_ms"], **summary(r["ms"])})
                log(f"[skew] {codec} {mode}: " + ", ".join(
                    f"rank {r['rank']} lag1 {r['lag1']:+.2f}" for r in rows if r["codec"] == codec and r["mode"] == mode))
    cmd = (f"python -m ringzip.bench.lab.skew -n {args.nproc} --net {args.net} --size {args.size} "
           f"--codecs {args.codecs} --calls {args.calls}")
    head = (f"{time.strftime('%Y-%m-%d %H:%M')}; CPU {cpu_model()}; {args.nproc} ranks, one per emulated machine, "
            f"{args.net}; SUM all-reduce of {args.size} float32, {args.calls} calls; command: {cmd}")
    lines = ["# Each rank's clock in a loop without barriers", "", head, "",
             "| codec | mode | rank | median ms | even calls | odd calls | lag-1 autocorrelation | wall per iteration ms |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (r["codec"], r["mode"] != "loop", r["rank"])):
        lines.append(f"| {r['codec']} | {r['mode']} | {r['rank']} | {r['median_ms']:.1f} | {r['even_ms']:.1f} | "
                     f"{r['odd_ms']:.1f} | {r['lag1']:+.2f} | {r['per_iter_ms']:.1f} |")
    lines += ["", "Per call (ms), rank 0:", ""]
    for r in rows:
        if r["rank"] == 0:
            lines.append(f"- {r['codec']} {r['mode']}: " + " ".join(f"{m:.0f}" for m in r["ms"]))
    out = results_dir(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.stem}.md").write_text("\n".join(lines) + "\n")
    (out / f"{args.stem}.json").write_text(json.dumps({"header": head, "rows": rows}, indent=1))
    print("\n".join(lines[:len(rows) + 6]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
