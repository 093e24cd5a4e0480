"""`ringzip-bench follow`: codec "auto" on an emulated link whose rate changes mid-run (root).

    ringzip-bench follow --nproc 4 --size 16M --from 10gbit --to 1gbit --calls 60 --switch-at 20

Every rank runs in its own network namespace (ringzip.bench.netem). The ranks all-reduce --size of float32
--calls times; after --switch-at calls they pause, the launcher changes every link's tc rate to
--to, and they go on. Rank 0 records each call's time, the codec auto ran and the agreed link
estimate; the report (<out-dir>/<stem>.{md,json}) says after how many calls the choice followed.
Rank side: python -m ringzip.bench.lab.follow rank SPEC.json (started by the launcher).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

from ..common import NetSpec, cpu_model, log, parse_rate_bits, parse_size, results_dir
from ..rank import Events, join, leave, load_spec


def add_arguments(p) -> None:
    p.add_argument("-n", "--nproc", type=int, default=4)
    p.add_argument("--size", default="16M", help="all-reduce size (float32)")
    p.add_argument("--from", dest="rate_from", default="10gbit", help="link rate at the start")
    p.add_argument("--to", dest="rate_to", default="1gbit", help="link rate after --switch-at calls")
    p.add_argument("--calls", type=int, default=60)
    p.add_argument("--switch-at", type=int, default=20)
    p.add_argument("--codec", default="auto")
    p.add_argument("--out-dir", help="default <repo>/bench/results")
    p.add_argument("--stem", default="auto_follow")


def run(args) -> int:
    from ..launch import Launcher
    from ..netem import open_env

    spec = {"size": parse_size(args.size), "calls": args.calls, "switch_at": args.switch_at, "codec": args.codec}
    calls: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="ringzip-follow-") as tmp, \
            open_env(args.nproc, NetSpec(parse_rate_bits(args.rate_from)), log=log) as net:
        spec["events"], spec["flag"] = f"{tmp}/events.jsonl", f"{tmp}/switched"
        Path(f"{tmp}/spec.json").write_text(json.dumps(spec))

        def on_event(ev):
            if ev.get("event") == "switch":
                net.set_rate(parse_rate_bits(args.rate_to))
                Path(spec["flag"]).touch()
            elif ev.get("event") == "call":
                calls.append(ev)
                log(f"[follow] call {ev['i']:3d} {ev['us'] / 1e3:8.1f} ms  {ev['choice']:>5}  "
                    f"agreed link {ev['link_gbit']:.2f}, host {ev['host_gbit']:.2f} Gbit/s")

        res = Launcher(args.nproc, Path(tmp), net).run("ringzip.bench.lab.follow", ["rank", f"{tmp}/spec.json"],
                                                        Path(spec["events"]), 300.0, on_event)
        if not res.ok:
            log(f"[follow] failed: {res.reason}")
    return _report(args, calls)


def _followed(calls: list[dict], switch_at: int):
    """(the choice before the change, calls after the change until it was left for good): the
    codec chosen by price most often in the 10 calls before the change; left for good from the
    first call after which no call chose it by price (a try, run only to measure, may still run
    it). None where it was never left."""
    before = [c["choice"] for c in calls[max(0, switch_at - 10):switch_at] if not c.get("tried")]
    if not before:
        return None, None
    old = max(set(before), key=before.count)
    after = [c for c in calls if c["i"] >= switch_at]
    last_by_price = max((c["i"] for c in after if c["choice"] == old and not c.get("tried")), default=switch_at - 1)
    return old, (last_by_price + 1 - switch_at if last_by_price + 1 < len(calls) else None)


def _report(args, calls: list[dict]) -> int:
    after = [c for c in calls if c["i"] >= args.switch_at]
    final = after[-1]["choice"] if after else None
    settled = next((c["i"] for c in after if all(d["choice"] == final for d in after if d["i"] >= c["i"])), None)
    settled = None if settled is None else settled - args.switch_at
    old, left = _followed(calls, args.switch_at)
    out_dir = results_dir(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    head = (f"{time.strftime('%Y-%m-%d %H:%M')}; CPU {cpu_model()} x {os.cpu_count()}; load average "
            f"{os.getloadavg()[0]:.2f}; {args.nproc} ranks, {args.size} float32, codec {args.codec}; link "
            f"{args.rate_from} -> {args.rate_to} after call {args.switch_at}")
    lines = [f"# codec '{args.codec}' under a link rate change (`ringzip-bench follow`)", "", head, "",
             f"Choice before the change: {old}; left for good {left} calls after the change (no later call "
             f"chose it by price); the last choice: {final}, held from {settled} calls after the change.", "",
             "| call | ms | chose | way | tried | agreed link rate (Gbit/s) | agreed host rate (Gbit/s) | changes seen |",
             "|---:|---:|---|---|---|---:|---:|---:|"]
    lines += [f"| {c['i']} | {c['us'] / 1e3:.1f} | {c['choice']} | {c.get('way', '')} | {'try' if c.get('tried') else ''} | "
              f"{c['link_gbit']:.2f} | {c['host_gbit']:.2f} | {c.get('changes', '')} |" for c in calls]
    (out_dir / f"{args.stem}.md").write_text("\n".join(lines) + "\n")
    (out_dir / f"{args.stem}.json").write_text(json.dumps({"header": head, "choice_before": old, "left_after_calls": left,
                                                           "settled_after_calls": settled, "calls": calls}, indent=1))
    log(f"[follow] left {old} for good {left} calls after the change; last choice {final}, held from {settled} "
        f"calls after; wrote {out_dir / args.stem}.md/.json")
    return 0 if settled is not None else 1


def rank_main(spec_path: str) -> int:
    import torch
    import torch.distributed as dist

    import ringzip

    spec = load_spec(spec_path)
    rank, n, _ = join()
    g = dist.new_group(backend="ringzip", pg_options=ringzip.Options(codec=spec["codec"], min_numel=0))
    x = torch.randn(spec["size"] // 4, generator=torch.Generator().manual_seed(rank))
    events = Events(spec["events"], rank)
    for i in range(spec["calls"]):
        if i == spec["switch_at"]:
            events.write("switch")
            while events and not os.path.exists(spec["flag"]):
                time.sleep(0.05)
            dist.barrier()
        buf = x.clone()
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(buf, group=g)
        t = time.perf_counter() - t0
        auto = ringzip.stats(g)["auto"]
        events.write("call", i=i, us=t * 1e6, choice=auto["last"]["choice"], way=auto["last"]["way"],
                     link_gbit=auto["params"]["link_gbit"], host_gbit=auto["params"]["host_gbit"],
                     predicted_us={k: v * 1e6 for k, v in auto["last"]["predicted_s"].items()},
                     tried=auto["last"]["tried"], changes=auto["changes"], refreshes=auto["refreshes"])
    return leave(events)


if __name__ == "__main__":
    if sys.argv[1:2] == ["rank"]:
        sys.exit(rank_main(sys.argv[2]))
    print(__doc__)
    sys.exit(2)
