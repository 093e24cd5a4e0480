"""What an idle link costs the next call (DiLoCo's outer steps come minutes apart).

    python -m ringzip.bench.lab.idle --net 1gbit,50ms            # 4 emulated machines (root)
    python -m ringzip.bench.lab.idle --gaps 1,10,60 --codecs none,q4 --size 16M

The ranks all-reduce --size float32 --warm times (the steady state: the median of the later
half), then, for each gap in --gaps seconds, leave the link idle that long and time the next
call and --after more. A second run makes the same calls without the gaps (the control): the
cost model explores and refreshes at set call counts, so a call's time depends on its place in
the sequence. Reported per codec and gap, on the slowest rank (the call is over when every rank
is): the first call after the gap over the control's call at the same place, and over the
steady state.
Writes <out-dir>/idle[_net-...].{md,json}. Rank side: python -m ringzip.bench.lab.idle rank SPEC.json.
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

    torch.set_num_threads(1)
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("ringzip", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=rank, world_size=n,
                            pg_options=ringzip.Options(codec=spec["codec"], transport=spec["transport"],
                                                       link_gbit=spec.get("link_gbit", 0.0)))
    x = torch.randn(spec["numel"])

    ways = []

    def call() -> float:
        y = x.clone()
        t0 = time.perf_counter()
        dist.all_reduce(y)
        took = time.perf_counter() - t0
        last = ringzip.stats()["auto"].get("last", {})
        ways.append(f"{last.get('way', '?')}{' (tried)' if last.get('tried') else ''}")
        return took

    out = {"warm": [call() for _ in range(spec["warm"])], "sleeps": spec["gaps"], "gaps": []}
    for gap in spec["gaps"]:
        time.sleep(gap)  # every rank left the last call within milliseconds of the others
        out["gaps"].append([call() for _ in range(1 + spec["after"])])
    out["ways"] = ways  # what the cost model ran at each call, in order: the same on every rank
    dist.destroy_process_group()
    Path(spec["out"]).with_suffix(f".rank{rank}.json").write_text(json.dumps(out))


def _slowest(per_rank: list[dict]) -> tuple[list[float], list[list[float]]]:
    """The slowest rank's time of every call: the warm ones, then each gap's."""
    warm = [max(r["warm"][i] for r in per_rank) for i in range(len(per_rank[0]["warm"]))]
    gaps = [[max(r["gaps"][g][i] for r in per_rank) for i in range(len(per_rank[0]["gaps"][g]))]
            for g in range(len(per_rank[0]["gaps"]))]
    return warm, gaps


def summarize(per_rank: list[dict], control: list[dict] | None = None) -> dict:
    """The steady state and each gap's ratios (over the control's call at the same place, if given)."""
    warm, calls = _slowest(per_rank)
    steady = statistics.median(warm[len(warm) // 2:])
    same_place = _slowest(control)[1] if control else None
    gaps = {}
    for k, gap in enumerate(per_rank[0]["sleeps"]):
        c = calls[k]
        g = gaps[f"{gap:g}"] = {"first_over_steady": c[0] / steady, "after_over_steady": [x / steady for x in c[1:]],
                                "first_s": c[0]}
        if same_place:
            g["first_over_control"], g["control_s"] = c[0] / same_place[k][0], same_place[k][0]
        at = len(warm) + sum(len(x) for x in calls[:k])  # the first call's number, from 0
        if "ways" in per_rank[0]:
            g["way"] = per_rank[0]["ways"][at]
        if control and "ways" in control[0]:
            g["control_way"] = control[0]["ways"][at]
    return {"steady_s": steady, "warm_s": warm, "gaps": gaps}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["rank"]:
        rank_main(json.loads(Path(argv[1]).read_text()))
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--nproc", type=int, default=4)
    p.add_argument("--net", help="RATE[,DELAY[,LOSS]]: emulated machines (root); default: local ranks")
    p.add_argument("--codecs", default="none,q4")
    p.add_argument("--transport", default="auto", help="ringzip.Options(transport=...)")
    p.add_argument("--link-gbit", type=float, default=0.0, help="ringzip.Options(link_gbit=...): the link's rate")
    p.add_argument("--size", default="16M", help="all-reduce size (float32 elements)")
    p.add_argument("--warm", type=int, default=8, help="calls before the first gap")
    p.add_argument("--gaps", default="1,10,60", help="idle seconds, comma list, in this order")
    p.add_argument("--after", type=int, default=2, help="calls timed after each gap's first")
    p.add_argument("--out-dir", help="default <repo>/bench/results")
    args = p.parse_args(argv)
    from ..launch import Launcher
    from ..netem import open_env

    gaps = [float(g) for g in args.gaps.split(",")]
    if len(set(gaps)) != len(gaps):  # the report keys a gap by its length
        p.error(f"--gaps {args.gaps}: give each length once")
    rows = []
    with tempfile.TemporaryDirectory(prefix="ringzip-idle-") as tmp, \
            (open_env(args.nproc, parse_net(args.net), log=log) if args.net else contextlib.nullcontext()) as env:
        for codec in args.codecs.split(","):
            runs = []
            for way, sleeps in (("gaps", gaps), ("control", [0.0] * len(gaps))):
                spec = {"codec": codec, "transport": args.transport, "link_gbit": args.link_gbit,
                        "numel": parse_size(args.size),
                        "warm": args.warm, "gaps": sleeps, "after": args.after, "out": f"{tmp}/{codec}-{way}"}
                Path(f"{tmp}/spec.json").write_text(json.dumps(spec))
                res = Launcher(args.nproc, Path(tmp), env).run(
                    "ringzip.bench.lab.idle", ["rank", f"{tmp}/spec.json"], None, 0,
                    total_timeout=600 + sum(sleeps) * 1.5)
                if not res.ok:
                    raise SystemExit(f"idle {codec} ({way}): {res.reason}")
                runs.append([json.loads(Path(spec["out"]).with_suffix(f".rank{r}.json").read_text())
                             for r in range(args.nproc)])
            rows.append({"codec": codec, **summarize(*runs)})
            log(f"[idle] {codec}: steady {rows[-1]['steady_s'] * 1e3:.1f} ms, "
                + ", ".join(f"{g} s idle: {v['first_over_control']:.2f}x the control"
                            for g, v in zip(gaps, rows[-1]["gaps"].values())))
    head = (f"{time.strftime('%Y-%m-%d')}, {cpu_model()}, {args.nproc} ranks "
            f"({'emulated machines, ' + args.net if args.net else 'one host'}), transport={args.transport}, "
            + (f"link_gbit={args.link_gbit:g}, " if args.link_gbit else "") +
            f"all-reduce of {args.size} float32; command: python -m ringzip.bench.lab.idle {' '.join(argv)}")
    out_dir = results_dir(args.out_dir)
    stem = "idle" + (f"_net-{args.net.replace(',', '_')}" if args.net else "") + ("_paced" if args.link_gbit else "")
    (out_dir / f"{stem}.json").write_text(json.dumps({"header": head, "rows": rows}, indent=1))
    lines = [f"# The first call after an idle link\n\n{head}\n",
             "The first call after each gap over the control's call at the same place (the same calls "
             "without the gaps), and over the steady state; then the calls after it over the steady state.\n",
             "| codec | steady (ms) | " + " | ".join(f"after {g:g} s idle" for g in gaps) + " |",
             "|---|---:|" + "---:|" * len(gaps)]
    for r in rows:
        cells = [f"{v['first_over_control']:.2f}x the control ({v['first_over_steady']:.2f}x steady), then "
                 + ", ".join(f"{a:.2f}x" for a in v["after_over_steady"])
                 + (f"; ran {v['way']}, the control {v['control_way']}" if "control_way" in v else "")
                 for v in r["gaps"].values()]
        lines.append(f"| {r['codec']} | {r['steady_s'] * 1e3:.1f} | " + " | ".join(cells) + " |")
    (out_dir / f"{stem}.md").write_text("\n".join(lines) + "\n")
    log(f"[idle] wrote {out_dir / stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
