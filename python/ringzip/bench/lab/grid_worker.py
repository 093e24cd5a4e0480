"""One rank of a `ringzip-bench grid` run (started by grid.py through launch.py, never by hand).

Usage: python -m ringzip.bench.lab.grid_worker SPEC.json   (RANK, WORLD_SIZE, MASTER_ADDR/PORT in env)

Per size, every configuration (a ringzip group each) runs once per round, in turn (each round
starting one configuration later), so a burst of load on this shared machine hits all of them
alike: first `warmup` rounds (auto measures and explores there), then settling rounds until
every group's last SETTLE_CALM calls ran by price (the bench's rule, worker.py; at most
SETTLE_MAX rounds and no longer than the warm-up took), then timed rounds until the time budget
is spent (at least `repeat`). A call's time is the
slowest rank's; a configuration's time is the median over the timed rounds. Rank 0 writes a
"row" event per (size, configuration) (rank.py).
"""
from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.distributed as dist

from ..rank import Events, join, leave, load_spec
from ..worker import SETTLE_CALM, SETTLE_MAX, _choice_label


def _groups(spec):
    import ringzip

    out = {}
    for cfg in spec["configs"]:
        kw = {"min_numel": 0, "codec": cfg["codec"]}
        if spec.get("transport"):
            kw["transport"] = spec["transport"]
        if cfg["algorithm"] != "auto":
            kw["algorithm"] = cfg["algorithm"]
        out[cfg["key"]] = dist.new_group(backend="ringzip", pg_options=ringzip.Options(**kw))
    return out


def _call(group, x):
    buf = x.clone()
    dist.barrier()  # the control group (gloo): aligned starts
    t0 = time.perf_counter()
    dist.all_reduce(buf, group=group)
    return time.perf_counter() - t0


_rounds = 0  # rounds run so far: the same count on every rank (every rank runs the same rounds)


def _round(groups, x):
    """One call of every configuration; the order rotates by one each round, so every
    configuration comes first equally often: with 3 ranks at 64 KiB the first call of a round
    (after the control group's own all-reduce) took 10-20 % longer than the others."""
    global _rounds
    gs = list(groups.values())
    k, _rounds = _rounds % len(gs), _rounds + 1
    mine = torch.zeros(len(gs), dtype=torch.float64)
    for i in [*range(k, len(gs)), *range(k)]:
        mine[i] = _call(gs[i], x)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)  # the slowest rank's time of each call
    return mine.tolist()


def _settle(ringzip, groups, x, limit_s):
    """Rounds until every group's last SETTLE_CALM calls ran by price, not as tries (at most
    SETTLE_MAX rounds or `limit_s` seconds); every rank runs the same rounds. Returns how many."""
    calm, t0 = 0, time.monotonic()
    for k in range(SETTLE_MAX + 1):
        tried = any((ringzip.stats(g).get("auto") or {}).get("last", {}).get("tried") for g in groups.values())
        flags = torch.tensor([1.0 if tried else 0.0, 1.0 if time.monotonic() - t0 > limit_s else 0.0])
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        calm = 0 if flags[0] else calm + 1
        if calm >= SETTLE_CALM or flags[1] or k == SETTLE_MAX:
            return k
        _round(groups, x)
    return SETTLE_MAX


def _auto(ringzip, group, before):
    a = ringzip.stats(group).get("auto")
    if not a:
        return {}
    delta = lambda key: {k: v - (before or {}).get(key, {}).get(k, 0) for k, v in a[key].items()
                         if v - (before or {}).get(key, {}).get(k, 0) > 0}
    return {"auto_codecs": delta("codec_choices"), "auto_algorithms": delta("algorithm_choices"),
            "auto_ways": delta("way_choices"),
            "predicted_us": {k: v * 1e6 for k, v in a["last"]["predicted_s"].items()},
            "model_us": {k: v * 1e6 for k, v in a["last"]["model_s"].items()}, "model_params": a["params"],
            "auto_explorations": a["explorations"] - (before or {}).get("explorations", 0),
            # over the group's whole run, warm-up included: a change there moves the prices the
            # timed calls choose from (docs/algorithms.md, "Known and not fixed")
            "auto_changes": a["changes"], "auto_tours": a["tours"]}


def main(argv=None) -> int:
    import ringzip

    spec = load_spec((argv or sys.argv[1:])[0])
    rank, n, _ = join(timeout_s=600)
    groups = _groups(spec)
    events = Events(spec["events"], rank)
    for size in spec["sizes"]:
        x = torch.randn(size // 4, generator=torch.Generator().manual_seed(size + rank))
        t_warm = time.monotonic()
        for _ in range(spec["warmup"]):
            _round(groups, x)
        settle = _settle(ringzip, groups, x, time.monotonic() - t_warm)
        before = {k: ringzip.stats(g).get("auto") for k, g in groups.items()}
        times, t_start, budget = [], time.monotonic(), spec["time_budget_s"] * len(groups)
        while True:
            times.append(_round(groups, x))
            more = len(times) < spec["repeat"] or (len(times) < spec["iters"] and time.monotonic() - t_start < budget)
            go = torch.tensor([1.0 if more else 0.0])
            dist.all_reduce(go, op=dist.ReduceOp.MIN)  # every rank stops after the same round
            if go.item() == 0:
                break
        for j, (key, g) in enumerate(groups.items()):
            cfg = spec["configs"][j]
            col = [t[j] for t in times]
            row = {"op": "allreduce", "size_bytes": size, "dtype": "float32", "backend": "ringzip", "codec": cfg["codec"],
                   "algorithm": cfg["algorithm"], "twin": bool(cfg.get("twin")), "nproc": n, "iters": len(col),
                   "transport": ringzip.get_options(g).transport,
                   "settle_rounds": settle,
                   "time_us": statistics.median(col) * 1e6,
                   "times_us": [t * 1e6 for t in col], **_auto(ringzip, g, before[key])}
            row["auto_choice"] = _choice_label(row.get("auto_codecs") or row.get("auto_algorithms"))
            events.write("row", row=row)
    return leave(events)


if __name__ == "__main__":
    sys.exit(main())
