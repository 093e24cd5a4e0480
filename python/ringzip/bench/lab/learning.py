"""What learning costs a new job: the first calls of one exact all-reduce size, call by call (root).

    python -m ringzip.bench.lab.learning --nproc 3 --net 1gbit --size 48M --calls 30
    python -m ringzip.bench.lab.learning --ddp 200 --rows ringzip,ringzip:ring,ringzip:tree

Each row is its own launch (fresh processes, as a user's script starts): every rank in its own
network namespace (ringzip.bench.netem), --calls SUM all-reduces of --size float32, each timed on
rank 0 between barriers. Rows (--rows): `gloo`; `ringzip` (default options: the tuner chooses);
`ringzip:ALGO` (a named algorithm: the fixed choices); `+CODEC` after either names the group's
codec (`ringzip+auto` against `ringzip+q4`: --tuned names the row compared). Rows alternate over
--repeat rounds. The report (<out-dir>/<stem>.{md,json}) gives every call's time and, per ringzip row, the calls above
1.5x gloo's median and what the calls above the row's steady state (its median over the last
third) added to the total. With --ddp STEPS a row is a DDP training run instead (the synthetic
MLP of `ringzip-bench train`, --hidden wide: its gradient buckets are the calls), each step timed
on rank 0; the report splits each run's time into steady state (its median step x steps) and the
rest, and compares the totals with the best fixed row's.
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

from ..common import cpu_model, log, parse_net, parse_size, results_dir
from ..rank import Events, join, leave, load_spec


def _row_options(row: str):
    """`backend[:algorithm][+codec]` -> (backend, ringzip.Options or None)."""
    import ringzip

    row, _, codec = row.partition("+")
    backend, _, algo = row.partition(":")
    kw = {k: v for k, v in (("algorithm", algo), ("codec", codec)) if v}
    return backend, (ringzip.Options(**kw) if kw else None)


def rank_main(spec_path: str) -> int:
    import torch
    import torch.distributed as dist

    import ringzip

    spec = load_spec(spec_path)
    rank, _, _ = join()
    backend, opts = _row_options(spec["row"])
    g = dist.new_group(backend=backend, pg_options=opts)
    if spec.get("ddp"):
        return _ddp_rank(spec, g, rank)
    x = torch.randn(spec["size"] // 4, generator=torch.Generator().manual_seed(rank))
    events = Events(spec["events"], rank)
    for i in range(spec["calls"]):
        buf = x.clone()
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buf, group=g)
        t = time.perf_counter() - t0
        fields = {}
        if backend == "ringzip":
            auto = ringzip.stats(g).get("auto", {})
            if auto.get("last"):
                fields = {"way": auto["last"]["way"], "tried": auto["last"]["tried"]}
        events.write("call", i=i, ms=t * 1e3, **fields)
    return leave(events)


def _ddp_rank(spec, g, rank) -> int:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .train import _data, _model

    steps, batch = spec["ddp"], 64
    x, y = _data(0, rank, steps * batch)
    model = DDP(_model(spec["hidden"], 0), process_group=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    events = Events(spec["events"], rank)
    dist.barrier()
    for s in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x[s * batch:(s + 1) * batch]), y[s * batch:(s + 1) * batch]).backward()
        opt.step()
        events.write("call", i=s, ms=(time.perf_counter() - t0) * 1e3)
    if "ringzip" in spec["row"]:
        import ringzip

        events.write("auto", **ringzip.stats(g).get("auto", {}))
    return leave(events)


LEARNING_CALLS = 30  # the first calls, where learning is expected; after them only re-measurement
TUNER_FIELDS = ("calls", "refreshes", "refresh_s", "explorations", "tours", "changes", "way_choices")


def summarize(run: list[dict], gloo_median: float | None) -> dict:
    calls = [c["ms"] for c in run]
    steady = statistics.median(calls[-max(1, len(calls) // 3):])
    out = {"total_ms": sum(calls), "steady_ms": steady, "median_ms": statistics.median(calls),
           "excess_over_steady": sum(max(0.0, c - steady) for c in calls) / sum(calls),
           "first_over_steady": calls[0] / steady}
    later = run[LEARNING_CALLS:]
    if later:  # what re-measurement costs once learned: calls run to be measured, and the slow calls
        out["later"] = {"calls": len(later), "tried": sum(bool(c.get("tried")) for c in later),
                        "above_1_2x_steady": sum(c["ms"] > 1.2 * steady for c in later),
                        "worst_over_steady": max(c["ms"] for c in later) / steady}
    if gloo_median:
        out["above_1_5x_gloo"] = sum(c > 1.5 * gloo_median for c in calls)
        out["worst_over_gloo"] = max(calls) / gloo_median
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--nproc", type=int, default=3)
    p.add_argument("--net", default="1gbit", help="emulated link RATE[,DELAY[,LOSS]][,LINK], one namespace per rank")
    p.add_argument("--size", default="48M")
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--rows", default="gloo,ringzip,ringzip:ring")
    p.add_argument("--tuned", default="ringzip", help="the row compared with the best of the other ringzip rows")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--ddp", type=int, default=0, metavar="STEPS", help="rows are DDP runs of this many steps")
    p.add_argument("--hidden", type=int, default=2048, help="--ddp: the MLP's width (2048: 17 MiB of gradients)")
    p.add_argument("--out-dir")
    p.add_argument("--stem", default="learning_n3_net-1gbit")
    p.add_argument("--report", metavar="JSON", help="write the report of a run's JSON again (its header kept)")
    args = p.parse_args(argv)
    if args.report:
        doc = json.loads(Path(args.report).read_text())
        return _report(args, list(doc["series"]), doc["series"], head=doc["header"], tuner=doc.get("tuner"))

    from ..launch import Launcher, log_tail
    from ..netem import open_env

    spec = parse_net(args.net)
    rate = spec.rate
    rows = args.rows.split(",")
    series: dict[str, list[list[dict]]] = {r: [] for r in rows}
    tuner: dict[str, list[dict]] = {}  # per ringzip row and run: the tuner's summary at the end (DDP rows)
    with open_env(args.nproc, spec, log=log) as net:
        for rnd in range(args.repeat):
            for row in rows:
                with tempfile.TemporaryDirectory(prefix="ringzip-learning-") as tmp:
                    spec = {"size": parse_size(args.size), "calls": args.calls, "row": row,
                            "events": f"{tmp}/events.jsonl", "ddp": args.ddp, "hidden": args.hidden}
                    Path(f"{tmp}/spec.json").write_text(json.dumps(spec))
                    calls = []

                    def on_event(ev, row=row):
                        if ev.get("event") == "call":
                            calls.append(ev)
                        elif ev.get("event") == "auto" and ev.get("calls") is not None:  # a tuned group
                            tuner.setdefault(row, []).append({k: ev.get(k) for k in TUNER_FIELDS})
                            log(f"[learning] {row} chose: {ev.get('way_choices')}, refreshes {ev.get('refreshes')}")

                    res = Launcher(args.nproc, Path(tmp), net).run(
                        "ringzip.bench.lab.learning", ["rank", f"{tmp}/spec.json"], Path(spec["events"]), 600.0, on_event)
                    if not res.ok:
                        log(f"[learning] {row} failed: {res.reason}\n{log_tail(res.logs)}")
                        return 1
                    series[row].append(calls)
                    log(f"[learning] round {rnd} {row}: " + " ".join(f"{c['ms']:.0f}" for c in calls))
    return _report(args, rows, series, tuner=tuner)


def _report(args, rows, series, head: str | None = None, tuner: dict | None = None) -> int:
    gloo = [c["ms"] for run in series.get("gloo", []) for c in run]
    gloo_median = statistics.median(gloo) if gloo else None
    what = (f"DDP training of the {args.hidden}-wide MLP, {args.ddp} steps of fresh processes" if args.ddp else
            f"SUM all-reduce of {args.size} float32, the first {args.calls} calls of fresh processes")
    cmd = (f"python -m ringzip.bench.lab.learning -n {args.nproc} --net {args.net} "
           + (f"--ddp {args.ddp} --hidden {args.hidden}" if args.ddp else f"--size {args.size} --calls {args.calls}")
           + f" --rows {args.rows} --repeat {args.repeat}"
           + (f" --tuned {args.tuned}" if getattr(args, "tuned", "ringzip") != "ringzip" else ""))
    head = head or (f"{time.strftime('%Y-%m-%d %H:%M')}; CPU {cpu_model()} x {os.cpu_count()}; {args.nproc} ranks, "
                    f"one per emulated machine, {args.net}; {what}; command: {cmd}")
    lines = ["# What learning costs: the first calls of a fresh job", "", head, "",
             f"gloo's median: {gloo_median:.0f} ms." if gloo_median else "", "",
             "| row | run | total (ms) | steady (ms) | calls > 1.5x gloo | worst / gloo | above steady / total "
             f"| first / steady | after call {LEARNING_CALLS}: run to measure / > 1.2x steady / worst over steady |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    summary = {}
    for row in rows:
        for k, run in enumerate(series[row]):
            s = summarize(run, gloo_median)
            summary.setdefault(row, []).append(s)
            later = s.get("later")
            lines.append(f"| {row} | {k} | {s['total_ms']:.0f} | {s['steady_ms']:.0f} | {s.get('above_1_5x_gloo', '')} | "
                         + (f"{s['worst_over_gloo']:.2f}" if gloo_median else "")
                         + f" | {100 * s['excess_over_steady']:.1f} % | "
                         f"{s['first_over_steady']:.2f} | " + (f"{later['tried']} / {later['above_1_2x_steady']} of "
                                                              f"{later['calls']} / {later['worst_over_steady']:.2f}"
                                                              if later else "") + " |")
    tuned = getattr(args, "tuned", "ringzip")
    fixed = {r: statistics.median(x["total_ms"] for x in summary[r]) for r in rows
             if r.startswith("ringzip") and r != tuned}
    if tuned in summary and fixed:
        best = min(fixed, key=fixed.get)
        auto = statistics.median(x["total_ms"] for x in summary[tuned])
        summary["auto_over_best_fixed"] = {"best_fixed": best, "ratio": auto / fixed[best]}
        lines += ["", f"{tuned} (the tuner) over the best fixed row ({best}), median totals: "
                  f"{auto / fixed[best]:.3f}."]
        # The rows alternate within a round (one load, one link for both): the per-round ratios.
        pairs = list(zip(summary[tuned], summary[best]))
        if pairs:
            total = [a["total_ms"] / b["total_ms"] for a, b in pairs]
            step = [a["median_ms"] / b["median_ms"] for a, b in pairs]
            summary["auto_over_best_fixed"].update(per_round=total, per_round_median=statistics.median(total),
                                                   median_step_per_round=step)
            lines.append(f"Per round (the rows alternate): totals {', '.join(f'{r:.3f}' for r in total)} (median "
                         f"{statistics.median(total):.3f}); median steps {', '.join(f'{r:.3f}' for r in step)}.")
    if tuner:
        lines += ["", "The tuner at the end of each run:", ""]
    for row, runs in (tuner or {}).items():
        for k, t in enumerate(runs):
            if t.get("calls") is None:  # a named algorithm: no tuner
                continue
            took = f" (the last took {1e3 * t['refresh_s']:.2f} ms)" if t.get("refresh_s") is not None else ""
            lines.append(f"- {row} run {k}: the tuner ran {t.get('calls')} calls, {t.get('refreshes')} agreements"
                         f"{took}, {t.get('explorations')} explorations, {t.get('tours')} tours; "
                         f"ways {t.get('way_choices')}")
    lines += ["", "Per call (ms; `*`: run to be measured, not chosen by price):", ""]
    for row in rows:
        for k, run in enumerate(series[row]):
            lines.append(f"- {row} run {k}: " + ", ".join(
                f"{c['ms']:.0f}{'*' if c.get('tried') else ''}{'' if 'way' not in c else ' ' + c['way']}" for c in run))
    out_dir = results_dir(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{args.stem}.md").write_text("\n".join(lines) + "\n")
    (out_dir / f"{args.stem}.json").write_text(json.dumps(
        {"header": head, "gloo_median_ms": gloo_median, "summary": summary, "series": series, "tuner": tuner or {}},
        indent=1))
    log(f"[learning] wrote {out_dir / args.stem}.md/.json")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["rank"]:
        sys.exit(rank_main(sys.argv[2]))
    sys.exit(main())
