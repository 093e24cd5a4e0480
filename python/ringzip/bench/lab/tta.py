"""`ringzip-bench train --task charlm|digits`: time to accuracy on real data, ringzip's codecs
against the gradient compression a PyTorch user already has (DDP comm hooks over gloo).

Rows (--rows): `gloo` (exact fp32 all-reduce), `gloo+bf16` / `gloo+fp16` (DDP's
bf16/fp16_compress_hook), `gloo+powersgdR` (PowerSGD hook, matrix-approximation rank R, warm
start and error feedback on: torch's defaults), `ringzip:CODEC` (any ringzip codec set on the
row's group), `gloo+ringzip:CODEC` (a gloo group whose DDP registers ringzip.hooks.compress with
that codec: the buckets travel on a ringzip group made beside it, every other call stays exact
on gloo). Every row of
a seed starts from the same weights and sees the same batches in the same order (tasks/). Each
row trains on its own process group; validation runs on the default (gloo) group, outside the
timed steps. All parameters sit in one DDP bucket in every row: PowerSGD over gloo with several
buckets hangs (tests/ddp/test_hooks.py), and one bucketing for all rows keeps them comparable.

The target of a seed is the exact row's (`gloo`) validation metric at 90 % of its steps; a row's
time to target is its training time (sum over steps of the slowest rank's step) up to the first
validation point that reaches it. Report: tta_report.py.
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from itertools import accumulate

from ..common import default_results_dir, header_lines, log, parse_key_values, split_list

ROWS = ("gloo,gloo+bf16,gloo+powersgd1,gloo+powersgd4,ringzip:none,ringzip:bf16,ringzip:q8,ringzip:q4,"
        "ringzip:q2,ringzip:topk:0.01")


def add_arguments(p) -> None:
    p.add_argument("--rows", default=ROWS, help="(--task charlm|digits) rows, in run order")
    p.add_argument("--seeds", default="0,1,2", help="(--task charlm|digits) seeds of the headline rows")
    p.add_argument("--seeds-for", help="(--task charlm|digits) rows run with every seed ('all': every row; "
                                       "default: the task's SEEDS_FOR); the others run with the first seed only")
    p.add_argument("--task-opt", action="append", default=[], metavar="KEY=VALUE",
                   help="(--task charlm|digits) override a task setting (see tasks/<task>.py DEFAULTS)")
    p.add_argument("--powersgd-start", type=int,
                   help="start_powerSGD_iter (default: torch's 1000, or 10%% of the steps when the run is "
                        "shorter than 10 000 steps, torch's own tuning advice)")
    p.add_argument("--out", help="(--task charlm|digits) output stem (default "
                                 "bench/results/time_to_accuracy_<task>_<link>): writes .md, .json, .png")


def parse_row(name: str) -> dict:
    """'gloo', 'gloo+bf16', 'gloo+fp16', 'gloo+powersgd4', 'ringzip:q4', 'gloo+ringzip:q4' -> what
    the rank does."""
    if name.startswith("ringzip:") and len(name) > 8:
        return {"backend": "ringzip", "hook": None, "codec": name[8:]}
    if name.startswith("gloo+ringzip:") and len(name) > 13:
        return {"backend": "gloo", "hook": "ringzip", "codec": name[13:]}
    if name in ("gloo", "gloo+bf16", "gloo+fp16"):
        return {"backend": "gloo", "hook": name[5:] or None, "codec": None}
    if name.startswith("gloo+powersgd") and name[13:].isdigit() and int(name[13:]) > 0:
        return {"backend": "gloo", "hook": "powersgd", "rank": int(name[13:]), "codec": None}
    raise ValueError(f"unknown row {name!r}: expected gloo, gloo+bf16, gloo+fp16, gloo+powersgdR, ringzip:CODEC "
                     f"or gloo+ringzip:CODEC")


def plan(rows: list[str], seeds: list[int], seeds_for: list[str]) -> list[dict]:
    """Configurations in run order: seed outer, row inner, so slow drifts of a shared machine
    touch every row of a seed alike."""
    every = set(rows) if seeds_for == ["all"] else set(seeds_for)
    return [{"row": r, "seed": s} for s in seeds for r in rows if s == seeds[0] or r in every]


def ring_bytes(elements: float, elem_bytes: int, n: int) -> float:
    """Bytes one rank sends in a ring all-reduce (what gloo runs on large buffers)."""
    return 2 * (n - 1) / n * elements * elem_bytes


# ---- rank side --------------------------------------------------------------------------------
_DATA: dict = {}


def _group(row: dict, spec: dict, timeout):
    import torch.distributed as dist

    if row["backend"] == "ringzip":
        import ringzip

        opts = ringzip.Options(codec=row["codec"], **spec["ringzip_options"])
        return dist.new_group(backend="ringzip", pg_options=opts, timeout=timeout)
    return dist.new_group(backend="gloo", timeout=timeout)


def ddp_compress_hook(dtype: str):
    """DDP's fp16_compress_hook / bf16_compress_hook, registrable on any torch build: DDP refuses a
    hook *named* bf16_compress_hook unless torch was built with CUDA and NCCL >= 2.10 (a check
    for NCCL's bf16 support); over Gloo or ringzip on a CPU-only torch the same hook works, so
    there it is handed over under another name."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    hook = getattr(default_hooks, f"{dtype}_compress_hook")
    if dtype != "bf16" or torch.version.cuda or torch.version.hip:
        return hook

    def bf16_hook_without_nccl(process_group, bucket):
        return hook(process_group, bucket)

    # DDP checks the annotation as an object (this module's annotations are strings).
    bf16_hook_without_nccl.__annotations__["return"] = torch.futures.Future[torch.Tensor]
    return bf16_hook_without_nccl


def _hook(ddp, row: dict, group, spec: dict):
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    if row["hook"] in ("bf16", "fp16"):
        ddp.register_comm_hook(group, ddp_compress_hook(row["hook"]))
    elif row["hook"] == "ringzip":
        import ringzip
        import torch.distributed as dist

        # The hook's group, made here rather than at the first bucket, so its setup stays out of
        # the timed steps as the other rows' groups do.
        zgroup = dist.new_group(backend="ringzip", pg_options=ringzip.Options(**spec["ringzip_options"]))
        state = ringzip.hooks.State(codec=row["codec"], process_group=group, group=zgroup)
        ddp.register_comm_hook(state, ringzip.hooks.compress)
        return state
    elif row["hook"] == "powersgd":
        state = psgd.PowerSGDState(process_group=group, matrix_approximation_rank=row["rank"],
                                   start_powerSGD_iter=spec["powersgd_start"], warm_start=True)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
        return state
    return None


def _wire_bytes(row, group, state, params, steps, n) -> float:
    """Bytes this rank sent per step: ringzip counts them; for gloo rows, what an ideal ring sends
    for the tensors the hook hands to gloo (PowerSGD counts the elements it hands over)."""
    if row["backend"] == "ringzip" or row["hook"] == "ringzip":
        import ringzip

        zgroup = state.group if row["hook"] == "ringzip" else group
        sent = sum(v["bytes_wire"] for v in ringzip.stats(zgroup).values() if isinstance(v, dict) and "bytes_wire" in v)
        return sent / steps if sent else ring_bytes(params, 4, n)
    if row["hook"] == "powersgd":
        compressed_steps = state.total_numel_before_compression / params
        elements = state.total_numel_after_compression + (steps - compressed_steps) * params
        return ring_bytes(elements / steps, 4, n)
    return ring_bytes(params, 2 if row["hook"] in ("bf16", "fp16") else 4, n)


def _train_one(spec, cfg, rank, n, timeout):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from . import tasks

    task, tc, steps, seed = tasks.get(spec["task"]), spec["task_cfg"], spec["task_cfg"]["steps"], cfg["seed"]
    if spec["task"] not in _DATA:
        _DATA[spec["task"]] = task.load(tc)
    data = _DATA[spec["task"]]
    row = parse_row(cfg["row"])
    group = _group(row, spec, timeout)
    torch.manual_seed(seed)
    net = task.model(tc)
    params = sum(p.numel() for p in net.parameters())
    ddp = DDP(net, process_group=group, bucket_cap_mb=params * 4 / 2**20 + 1)
    state = _hook(ddp, row, group, spec)
    if row["backend"] == "ringzip" or row["hook"] == "ringzip":
        import ringzip

        # count the steps only, not DDP's initial broadcast
        ringzip.stats(state.group if row["hook"] == "ringzip" else group, reset=True)
    opt, sched = task.optimizer(net, tc, steps)
    evals, times = [], []
    for step in range(steps + 1):
        if step in spec["eval_steps"]:
            net.eval()
            with torch.no_grad():
                v = task.evaluate(net, data, tc, rank, n)
            dist.all_reduce(v)  # default group: exact whatever the row does
            net.train()
            evals.append((step, task.metric(*v.tolist())))
        if step == steps:
            break
        x, y = task.batch(data, tc, seed, step, rank, n)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        task.loss(ddp, x, y).backward()
        if tc.get("clip"):
            torch.nn.utils.clip_grad_norm_(net.parameters(), tc["clip"])
        opt.step()
        sched.step()
        times.append(time.perf_counter() - t0)
    wire = _wire_bytes(row, group, state, params, steps, n)
    dist.destroy_process_group(group)
    return {"step_s": times, "evals": evals, "wire": wire, "params": params}


def _row(spec, cfg, got, err) -> dict:
    row = {"row": cfg["row"], "seed": cfg["seed"], "nproc": len(got), "error": err}
    if err:
        return row
    per_step = [max(g["step_s"][i] for g in got) for i in range(len(got[0]["step_s"]))]
    elapsed = [0.0, *accumulate(per_step)]
    warm = min(5, len(per_step) // 2)  # DDP's first steps rebuild buckets and warm caches
    row.update(step_ms=statistics.median(per_step[warm:]) * 1e3, train_s=elapsed[-1], params=got[0]["params"],
               load_avg=os.getloadavg()[0],  # the machine is shared: other work slows some rows
               wire_bytes_per_step=statistics.mean(g["wire"] for g in got),
               curve=[[s, elapsed[s], m] for s, m in got[0]["evals"]])
    return row


# ---- launcher side ----------------------------------------------------------------------------
def task_config(task, args) -> dict:
    tc = dict(task.DEFAULTS)
    extra = parse_key_values(args.task_opt, "--task-opt")
    unknown = sorted(set(extra) - set(tc))
    if unknown:
        raise ValueError(f"--task-opt: {args.task} has no setting {', '.join(unknown)} (it has {', '.join(tc)})")
    tc.update(extra)
    for k in ("steps", "batch", "lr"):
        if getattr(args, k) is not None:
            tc[k] = getattr(args, k)
    return tc


def run(args) -> int:
    import torch

    from . import tasks, tta_report
    from ..launch import ranks_env, run_configs

    task = tasks.get(args.task)
    tc = task_config(task, args)
    args.row_timeout = args.row_timeout or 900.0  # a loaded machine can take minutes per row
    steps = int(tc["steps"])
    rows, seeds = split_list(args.rows), [int(s) for s in split_list(args.seeds)]
    for r in rows:
        parse_row(r)
    if "gloo" not in rows or not seeds:
        raise ValueError("--rows must include 'gloo' (it sets the target) and --seeds at least one seed")
    seeds_for = args.seeds_for or task.SEEDS_FOR
    cfgs = plan(rows, seeds, split_list(seeds_for))
    target_step = round(0.9 * steps)
    spec = {"configs": cfgs, "task": args.task, "task_cfg": tc, "threads": args.threads,
            "eval_steps": sorted(set(range(0, steps + 1, int(tc["eval_every"]))) | {target_step, steps}),
            "powersgd_start": args.powersgd_start or min(1000, max(2, steps // 10)),
            "ringzip_options": parse_key_values(args.ropt), "timeout_s": max(60.0, args.row_timeout)}
    torch.manual_seed(seeds[0])
    about = task.describe(tc, task.load(tc), task.model(tc))
    tag = "loopback" if not args.net else "net-" + args.net.replace(",", "-")
    stem = args.out or str(default_results_dir() / f"time_to_accuracy_{args.task}_{tag}")
    extra = {"task": f"{args.task}: {about}", "steps": f"{steps}, target = gloo's {task.METRIC} at step {target_step}",
             "rows": f"{', '.join(rows)}; seeds {args.seeds} for {seeds_for}",
             "powersgd": f"start_powerSGD_iter {spec['powersgd_start']}, warm_start on, error feedback on"}
    results, link, hdr = {}, "?", []

    def on_row(r):
        log(f"[tta] {r['row']} seed {r['seed']}: " + (
            f"{r['step_ms']:.1f} ms/step, final {task.METRIC} {r['curve'][-1][2]:.4f}" if not r.get("error")
            else f"ERROR {r['error'][:100]}"))

    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    try:
        with ranks_env(args.nproc, args.net, "ringzip-tta-") as (tmp, net, link):
            hdr = header_lines(args.nproc, link, extra)
            print("\n".join(hdr), flush=True)
            results = run_configs(args.nproc, tmp, net, args.threads, "ringzip.bench.lab.tta", spec, len(cfgs),
                                  args.row_timeout, lambda i: dict(cfgs[i], nproc=args.nproc), on_row, log)
    except KeyboardInterrupt:
        log("[tta] interrupted; writing what was measured")
    meta = {"task": args.task, "metric": task.METRIC, "higher_is_better": task.HIGHER_IS_BETTER,
            "steps": steps, "target_step": target_step, "nproc": args.nproc, "link": link, "started": started,
            "argv": getattr(args, "argv", None), "header": hdr,
            "spec": {k: v for k, v in spec.items() if k != "configs"}}
    written = tta_report.write(stem, meta, [results[i] for i in sorted(results)])
    log("[tta] wrote " + ", ".join(written))
    return 0


if __name__ == "__main__":
    from ..rank import worker_cli

    sys.exit(worker_cli(sys.argv[1:], _train_one, _row))
