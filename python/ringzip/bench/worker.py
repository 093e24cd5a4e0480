"""One rank of a `ringzip-bench collective` run (started by launch.py, never by hand).

Usage: python -m ringzip.bench.worker SPEC.json   (RANK, WORLD_SIZE, MASTER_ADDR/PORT in env)

Every rank walks the same plan (size outer, configuration inner). The control group (gloo, the
default group) aligns iteration starts with a barrier and gathers each row to rank 0, which
writes it as a "row" event (rank.py). The measured op runs on a separate group per
configuration. Errors are caught per row and reported as rows, so one bad configuration does not
end the sweep; a crash or hang is handled by the launcher (it restarts after the bad row).
"""
from __future__ import annotations

import datetime
import os
import statistics
import sys
import time
import traceback
import zlib

import torch
import torch.distributed as dist

from .ops import DTYPES, OpCase, bus_factor, element_count, redop
from .plan import build_plan
from .rank import Events, join, leave, load_spec


def _stats_bytes(stats) -> tuple[float, ...] | None:
    """Sum (bytes an exact ring all-reduce would send, bytes sent, codec seconds, total seconds)
    over ringzip.stats() entries."""
    tot = [0.0, 0.0, 0.0, 0.0]
    found = False

    def visit(obj):
        nonlocal found
        if obj is None:
            return
        if isinstance(obj, dict):
            if "bytes_in" in obj and "bytes_wire" in obj:
                tot[0] += float(obj.get("bytes_dense_equiv", obj["bytes_in"]))
                tot[1] += float(obj["bytes_wire"])
                tot[2] += float(obj.get("codec_seconds", 0.0))
                tot[3] += float(obj.get("total_seconds", 0.0))
                found = True
                return
            for v in obj.values():
                visit(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                visit(v)
        elif hasattr(obj, "bytes_in") and hasattr(obj, "bytes_wire"):
            tot[0] += float(obj.bytes_in)
            tot[1] += float(obj.bytes_wire)
            found = True

    visit(stats)
    return tuple(tot) if found else None


class Groups:
    """Lazily created measured groups, one per configuration; creation errors are remembered."""

    def __init__(self, timeout: datetime.timedelta, ropts: dict):
        self.timeout, self.ropts = timeout, ropts
        self.cache: dict[str, tuple[object, str | None]] = {}

    def get(self, cfg: dict):
        key = cfg["key"]
        if key not in self.cache:
            try:
                if cfg["backend"] == "ringzip":
                    import ringzip

                    if not hasattr(ringzip, "Options"):
                        raise RuntimeError("ringzip.Options not available (backend not built/registered?)")
                    kwargs = dict(self.ropts)
                    # documented defaults are left to Options, so exact rows run on any build
                    if cfg["codec"] != "none":
                        kwargs["codec"] = cfg["codec"]
                    if cfg["algorithm"] != "auto":
                        kwargs["algorithm"] = cfg["algorithm"]
                    if cfg.get("hierarchy"):
                        kwargs["hierarchy"] = cfg["hierarchy"]
                    opts = ringzip.Options(**kwargs)
                    g = dist.new_group(backend="ringzip", pg_options=opts, timeout=self.timeout)
                else:
                    g = dist.new_group(backend=cfg["backend"], timeout=self.timeout)
                self.cache[key] = (g, None)
            except Exception as e:  # noqa: BLE001 - becomes the row's error
                self.cache[key] = (None, f"group creation failed: {type(e).__name__}: {e}")
        return self.cache[key]


def _auto_state(ringzip_mod, group):
    """stats()["auto"] of a ringzip group (None before the cost model chose anything)."""
    try:
        return ringzip_mod.stats(group).get("auto")
    except Exception:  # noqa: BLE001 - stats are optional
        return None


def _auto_delta(before, after) -> dict | None:
    """What the cost model chose during the timed iterations, and what it predicted last."""
    if not after:
        return None
    out = {"predicted_s": after["last"]["predicted_s"], "model_s": after["last"].get("model_s", {}),
           "params": after["params"], "explorations": after.get("explorations", 0) - (before or {}).get("explorations", 0)}
    for key in ("codec_choices", "algorithm_choices"):
        b = (before or {}).get(key, {})
        out[key] = {k: v - b.get(k, 0) for k, v in after[key].items() if v - b.get(k, 0) > 0}
    return out


# Warm-up of a row whose calls ringzip chooses for (algorithm or codec "auto"): its first calls at
# a size try ways to measure them (csrc/plan/tuner.h), one-time costs of up to ~20 calls that are not
# the steady state a row reports (at 64 MiB a tried direct exchange took 3x the ring's time, and
# with the row's 1-2 warm-up calls the exact row ran it in a timed call). So warm-up goes on until
# SETTLE_CALM calls in a row were chosen by price, at most SETTLE_MAX calls.
SETTLE_CALM, SETTLE_MAX = 3, 40


def _tried_or_not(ringzip_mod, group, run) -> float:
    """Runs one call; 1.0 if the cost model ran it as a try, 0.0 if by price, -1.0 if the call
    did not go through the model (a fixed codec's call with nothing to plan)."""
    before = _auto_state(ringzip_mod, group)
    run()
    after = _auto_state(ringzip_mod, group)
    if not after or after.get("calls", 0) == (before or {}).get("calls", 0):
        return -1.0
    return 1.0 if after["last"].get("tried") else 0.0


def _ctrl_max(x: float) -> float:
    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t[0])


def run_row(spec, item, case: OpCase, group, group_err, rank):
    """Measure one row on this rank; every control collective runs whatever happened."""
    # cold: the time of every call before the timed ones (the first, warm-ups, the settling calls
    # of a size ringzip chooses for), as a user's first calls of a size take; tries: how many of
    # them the cost model ran to measure a way rather than for its price.
    res = {"err": group_err, "times": [], "max_abs": None, "rel_l2": None, "crc": None,
           "stats": None, "iters": 0, "auto": None, "cold": [], "tries": 0}
    ringzip_mod = None
    if item["cfg"]["backend"] == "ringzip" and group is not None:
        try:
            import ringzip as ringzip_mod  # noqa: F811
        except Exception:  # noqa: BLE001
            ringzip_mod = None

    def guarded(fn):
        if res["err"] is not None:
            return
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            res["err"] = f"{type(e).__name__}: {e}".strip()[:500]
            if os.environ.get("RINGZIP_BENCH_DEBUG"):
                traceback.print_exc()

    # warm-up: the first call sizes the rest (adaptive, identical decision on every rank)
    t_first = [0.0]

    def first():
        case.prepare()
        t0 = time.perf_counter()
        case.run(group)
        t_first[0] = time.perf_counter() - t0
        res["cold"].append(t_first[0])

    guarded(first)
    t_est = _ctrl_max(t_first[0] if res["err"] is None else -1.0)
    failed_any = _ctrl_max(1.0 if res["err"] else 0.0) > 0
    budget = spec.get("time_budget_s")
    iters, warm = spec["iters"], max(0, spec["warmup"] - 1)
    if budget and t_est > 0:
        iters = int(max(spec["min_iters"], min(iters, budget / t_est)))
        warm = int(min(warm, max(0, 0.25 * budget / t_est)))
    if failed_any:
        iters = warm = 0
        if res["err"] is None:
            res["err"] = "failed on another rank"

    def timed_call():
        case.prepare()
        t0 = time.perf_counter()
        case.run(group)
        res["cold"].append(time.perf_counter() - t0)

    def warmups():
        for _ in range(warm):
            timed_call()

    guarded(warmups)

    def settle():  # every rank runs the same iterations: the loop ends on the control group's max
        calm = 0
        for _ in range(SETTLE_MAX if not failed_any and item["cfg"]["backend"] == "ringzip" else 0):
            v = 2.0  # this rank failed (or cannot see the model): everyone stops
            if res["err"] is None and ringzip_mod is not None:
                try:
                    v = _tried_or_not(ringzip_mod, group, timed_call)
                    res["tries"] += v == 1.0
                except Exception as e:  # noqa: BLE001 - becomes the row's error
                    res["err"] = f"{type(e).__name__}: {e}".strip()[:500]
            m = _ctrl_max(v)
            calm = calm + 1 if m == 0.0 else 0
            if m in (2.0, -1.0) or calm >= SETTLE_CALM:
                break

    settle()
    before = auto_before = None
    if ringzip_mod is not None and res["err"] is None:
        try:
            before = _stats_bytes(ringzip_mod.stats(group))
        except Exception:  # noqa: BLE001 - stats are optional
            before = None
        auto_before = _auto_state(ringzip_mod, group)
    for _ in range(iters):
        case.prepare()
        dist.barrier()  # control group: aligned start
        if res["err"] is not None:
            continue
        t0 = time.perf_counter()
        try:
            case.run(group)
        except Exception as e:  # noqa: BLE001
            res["err"] = f"{type(e).__name__}: {e}"[:500]
            continue
        res["times"].append(time.perf_counter() - t0)
    res["iters"] = len(res["times"])
    if before is not None and res["err"] is None:
        try:
            after = _stats_bytes(ringzip_mod.stats(group))
            if after is not None:
                res["stats"] = tuple(a - b for a, b in zip(after, before))
        except Exception:  # noqa: BLE001
            pass
    if ringzip_mod is not None and res["err"] is None:
        res["auto"] = _auto_delta(auto_before, _auto_state(ringzip_mod, group))
    if res["err"] is None and res["iters"] > 0:
        try:
            res["max_abs"], res["rel_l2"] = case.errors()
            if case.same_on_all_ranks():
                res["crc"] = zlib.crc32(case.out.contiguous().view(torch.uint8).numpy().tobytes())
        except Exception as e:  # noqa: BLE001
            res["err"] = f"error check failed: {type(e).__name__}: {e}"
    return res


def combine(spec, item, case: OpCase, results: list[dict], n: int) -> dict:
    """Rank 0: one table row from every rank's measurements."""
    cfg, op = item["cfg"], spec["op"]
    elem = torch.empty(0, dtype=DTYPES[spec["dtype"]]).element_size()
    size = case.count * elem
    row = {
        "op": op, "size_bytes": size, "count": case.count, "dtype": spec["dtype"],
        "redop": redop(op), "backend": cfg["backend"], "codec": cfg["codec"],
        "algorithm": cfg["algorithm"], "hierarchy": cfg.get("hierarchy"), "nproc": n, "iters": 0,
        "time_us": None, "time_us_min": None, "algbw_gbps": None, "busbw_gbps": None, "ratio": None,
        "wire_busbw_gbps": None, "speedup_vs_gloo": None, "max_abs_err": None,
        "rel_l2_err": None, "ranks_agree": None, "link_gbit": spec.get("link_gbit"),
        "floor_us": None, "efficiency": None, "error": None,
    }
    errs = [f"rank {i}: {r['err']}" for i, r in enumerate(results) if r["err"]
            and r["err"] != "failed on another rank"]
    if errs or any(r["err"] for r in results):
        row["error"] = "; ".join(errs[:2]) or "failed"
        # identical messages on every rank read better once
        msgs = {r["err"] for r in results if r["err"]}
        if len(msgs) == 1:
            row["error"] = msgs.pop()
        return row
    iters = min(len(r["times"]) for r in results)
    per_iter_max = [max(r["times"][i] for r in results) for i in range(iters)]
    t = statistics.median(per_iter_max)
    row["iters"] = iters
    row["time_us"] = t * 1e6
    row["time_us_min"] = min(per_iter_max) * 1e6
    row["iter_times_us"] = [round(x * 1e6, 1) for x in per_iter_max]  # every timed call, in order
    # What a user's first calls of this size cost: the slowest rank's time of each call before
    # the timed ones, against the steady median (cold_over_steady: their total / (count x median)).
    cold_n = min(len(r["cold"]) for r in results)
    if cold_n:
        cold = [max(r["cold"][i] for r in results) for i in range(cold_n)]
        row["first_us"] = cold[0] * 1e6
        row["cold_calls"] = cold_n
        row["cold_over_steady"] = sum(cold) / (cold_n * t)
        row["learning_calls"] = results[0]["tries"]
    row["algbw_gbps"] = size / t / 1e9
    row["busbw_gbps"] = row["algbw_gbps"] * bus_factor(op, n)
    ratio = 1.0
    if cfg["backend"] == "ringzip" and cfg["codec"] != "none":
        st = [r["stats"] for r in results if r["stats"] is not None]
        b_in = sum(s[0] for s in st)
        b_wire = sum(s[1] for s in st)
        # No compressed call in the window: the policy kept this size exact (below min_numel).
        ratio = (b_in / b_wire) if (st and b_wire > 0) else 1.0
        row["stats_bytes_in"], row["stats_bytes_wire"] = (b_in, b_wire) if st else (None, None)
        # Share of the compressed calls' time spent in codec kernels (all ranks together).
        total_s = sum(s[3] for s in st)
        row["codec_share"] = (sum(s[2] for s in st) / total_s) if (st and total_s > 0) else None
    row["ratio"] = ratio
    auto = results[0].get("auto")  # every rank chose alike (agreed parameters): rank 0's
    if auto:
        row["auto_codecs"] = auto["codec_choices"] or None
        row["auto_algorithms"] = auto["algorithm_choices"] or None
        row["auto_choice"] = _choice_label(auto["codec_choices"] or auto["algorithm_choices"])
        row["predicted_us"] = {k: v * 1e6 for k, v in auto["predicted_s"].items()}
        row["model_us"] = {k: v * 1e6 for k, v in auto["model_s"].items()}
        row["auto_explorations"] = auto["explorations"]
        row["model_params"] = auto["params"]
    if ratio:
        row["wire_busbw_gbps"] = row["busbw_gbps"] / ratio
    row["max_abs_err"] = max(r["max_abs"] for r in results)
    row["rel_l2_err"] = max(r["rel_l2"] for r in results)
    crcs = {r["crc"] for r in results}
    row["ranks_agree"] = (len(crcs) == 1) if None not in crcs else None
    link = spec.get("link_gbit")
    # With emulated nodes the shaped links are the node NICs: the floor is that of N endpoints.
    endpoints = spec.get("nodes") or n
    if link and ratio and endpoints > 1:
        # a link with a round trip: the bytes, then one round trip (the fewest any exchange needs)
        floor = bus_factor(op, endpoints) * size / (ratio * link * 1e9 / 8) + 2 * spec.get("delay_s", 0.0)
        row["floor_us"] = floor * 1e6
        row["efficiency"] = floor / t
    return row


def _choice_label(counts: dict) -> str | None:
    """'q4', or 'q4 18/none 2' when the choice changed within the row."""
    if not counts:
        return None
    items = sorted(counts.items(), key=lambda kv: -kv[1])
    return items[0][0] if len(items) == 1 else "/".join(f"{k} {v}" for k, v in items)


def _topology(group) -> dict | None:
    """The layout ringzip chose for `group` (nodes, ranks per node, hierarchical or not, why), if
    this build reports one in stats()."""
    try:
        import ringzip

        topo = ringzip.stats(group).get("topology")
    except Exception:  # noqa: BLE001 - older builds, or stats without it
        return None
    return topo if isinstance(topo, dict) else ({"layout": str(topo)} if topo else None)


def _inject_fault(idx: int, rank: int) -> None:
    """Test hook: RINGZIP_BENCH_FAULT="crash@5" or "hang@5" makes rank 1 die/hang at plan row 5,
    to exercise the launcher's restart and watchdog paths (a backend under development does both)."""
    fault = os.environ.get("RINGZIP_BENCH_FAULT", "")
    if "@" not in fault or rank != min(1, int(os.environ["WORLD_SIZE"]) - 1):
        return
    kind, at = fault.split("@", 1)
    if int(at) == idx:
        if kind == "crash":
            os._exit(86)
        if kind == "hang":
            time.sleep(3600)


def main(argv=None) -> int:
    spec = load_spec((sys.argv[1:] if argv is None else argv)[0])
    rank, n, timeout = join(spec.get("timeout_s", 300), spec.get("threads", 1))
    if any(c["backend"] == "ringzip" for c in spec["configs"]):
        try:
            import ringzip  # noqa: F401  (registers the backend)
        except Exception as e:  # noqa: BLE001 - rows will carry the error
            if rank == 0:
                print(f"[ringzip-bench] import ringzip failed: {e}", file=sys.stderr)
    plan = build_plan(spec)
    groups = Groups(timeout, spec.get("ringzip_options", {}))
    # Every group is created and exercised before the first row, so no row (in particular the
    # first ringzip one) pays for connection set-up and first-use initialization.
    events = Events(spec["events"], rank)
    for cfg in spec["configs"]:
        g, err = groups.get(cfg)
        if g is not None and err is None:
            try:
                for _ in range(3):
                    dist.barrier(group=g)
            except Exception:  # noqa: BLE001 - the rows will report the group's failure
                pass
            topo = _topology(g) if events and cfg["backend"] == "ringzip" else None
            if topo:
                events.write("topology", key=cfg["key"], topology=topo)
    skip = set(spec.get("skip", []))
    dtype = DTYPES[spec["dtype"]]
    elem = torch.empty(0, dtype=dtype).element_size()
    case, case_size = None, None
    for idx in range(spec.get("start", 0), len(plan)):
        if idx in skip:
            continue
        item = plan[idx]
        events.write("begin", index=idx)
        if case_size != item["size"]:
            case = None  # free the previous size's buffers first
            count = element_count(spec["op"], item["size"], elem, n)
            case = OpCase(spec["op"], count, dtype, rank, n, spec["seed"])
            case_size = item["size"]
        _inject_fault(idx, rank)
        group, gerr = groups.get(item["cfg"])
        res = run_row(spec, item, case, group, gerr, rank)
        gathered = [None] * n
        dist.all_gather_object(gathered, res)
        if events:
            events.write("row", index=idx, row=combine(spec, item, case, gathered, n))
    return leave(events)


if __name__ == "__main__":
    sys.exit(main())
