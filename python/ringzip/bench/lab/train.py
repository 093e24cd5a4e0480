"""`ringzip-bench train`: the same small DDP training run once per backend/codec, side by side.

Model: an MLP on a synthetic but learnable classification task (labels from a fixed random
teacher network plus noise), fixed seeds, so every configuration sees identical data and initial
weights. Reported per configuration: median step time (slowest rank), samples/s, final training
loss (mean of the last steps) and test accuracy.

`--task charlm|digits` runs the time-to-accuracy benchmark on real data instead (tta.py).
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from ..common import header_lines, log, parse_key_values, split_list

IN_DIM, CLASSES = 64, 10


def add_arguments(p) -> None:
    p.add_argument("--task", default="synthetic", choices=("synthetic", "charlm", "digits"),
                   help="synthetic: the MLP below, one row per --backend/--codec; charlm, digits: time to "
                        "accuracy on real data against torch's DDP hooks (--rows, --seeds; tta.py)")
    p.add_argument("-n", "--nproc", type=int, default=4)
    p.add_argument("--backend", default="ringzip,gloo")
    p.add_argument("--codec", default="none,q8,q4,topk:0.01")
    p.add_argument("--algorithm", default="auto")
    p.add_argument("--ropt", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--steps", type=int, help="default: 150 (synthetic) or the task's")
    p.add_argument("--batch", type=int, help="per-rank batch size; default: 64 (synthetic) or the task's")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--lr", type=float, help="default: 0.05 (synthetic) or the task's")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--net", help="emulated link RATE[,DELAY[,LOSS]][,LINK] (root)")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--row-timeout", type=float, help="seconds without a finished row before the ranks count as "
                                                     "hung; default 300 (synthetic), 900 (tasks)")
    p.add_argument("--threads", type=int, default=1)


# ---- rank side --------------------------------------------------------------------------------
def _data(seed: int, rank: int, n: int):
    import torch

    teacher = torch.Generator().manual_seed(seed + 12345)
    w1 = torch.randn(IN_DIM, 32, generator=teacher)
    w2 = torch.randn(32, CLASSES, generator=teacher)
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    x = torch.randn(n, IN_DIM, generator=g)
    logits = torch.tanh(x @ w1) @ w2 + 0.3 * torch.randn(n, CLASSES, generator=g)
    return x, logits.argmax(1)


def _model(hidden: int, seed: int):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(IN_DIM, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, CLASSES))


def _train_one(spec, cfg, rank, n, ctrl_timeout):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    if cfg["backend"] == "ringzip":
        import ringzip

        if not hasattr(ringzip, "Options"):
            raise RuntimeError("ringzip.Options not available (backend not built/registered?)")
        kw = dict(spec["ringzip_options"])
        if cfg["codec"] != "none":
            kw["codec"] = cfg["codec"]
        if cfg["algorithm"] != "auto":
            kw["algorithm"] = cfg["algorithm"]
        opts = ringzip.Options(**kw)
        group = dist.new_group(backend="ringzip", pg_options=opts, timeout=ctrl_timeout)
    else:
        group = dist.new_group(backend=cfg["backend"], timeout=ctrl_timeout)
    steps, batch = spec["steps"], spec["batch"]
    x, y = _data(spec["seed"], rank, steps * batch)
    model = DDP(_model(spec["hidden"], spec["seed"]), process_group=group)
    opt = torch.optim.SGD(model.parameters(), lr=spec["lr"], momentum=0.9)
    lossf = torch.nn.CrossEntropyLoss()
    times, losses = [], []
    for s in range(steps):
        xb, yb = x[s * batch:(s + 1) * batch], y[s * batch:(s + 1) * batch]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(xb), yb)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
    xt, yt = _data(spec["seed"], 10_000, 4096)
    with torch.no_grad():
        acc = float((model.module(xt).argmax(1) == yt).float().mean())
    tail = losses[-max(1, steps // 10):]
    warm = min(5, steps // 2)
    return {"step_s": times[warm:] or times, "loss": sum(tail) / len(tail), "acc": acc}


def _row(spec, cfg, got, err) -> dict:
    row = {"backend": cfg["backend"], "codec": cfg["codec"], "algorithm": cfg["algorithm"],
           "nproc": len(got), "error": err}
    if not err:
        n = len(got)
        per_step = [max(g["step_s"][i] for g in got) for i in range(len(got[0]["step_s"]))]
        t = statistics.median(per_step)
        row.update(step_ms=t * 1e3, samples_per_s=spec["batch"] * n / t,
                   final_loss=sum(g["loss"] for g in got) / n, test_acc=got[0]["acc"],
                   acc_spread=max(g["acc"] for g in got) - min(g["acc"] for g in got))
    return row



# ---- launcher side ----------------------------------------------------------------------------
def run(args) -> int:
    args.steps, args.batch, args.lr = args.steps or 150, args.batch or 64, args.lr or 0.05
    args.row_timeout = args.row_timeout or 300.0
    from ..launch import ranks_env, run_configs
    from ..plan import configs

    cfgs = configs(split_list(args.backend), split_list(args.codec) or ["none"], split_list(args.algorithm) or ["auto"])
    cfgs.sort(key=lambda c: c["backend"] != "gloo")
    spec = {"configs": cfgs, "steps": args.steps, "batch": args.batch, "hidden": args.hidden, "lr": args.lr,
            "seed": args.seed, "threads": args.threads, "ringzip_options": parse_key_values(args.ropt),
            "timeout_s": max(60.0, args.row_timeout)}
    rows: dict[int, dict] = {}
    link = "?"
    params = IN_DIM * args.hidden + args.hidden * args.hidden + args.hidden * CLASSES
    extra = {"model": f"MLP {IN_DIM}-{args.hidden}-{args.hidden}-{CLASSES} (~{params / 1e3:.0f}K params, "
                      f"{params * 4 / 2**20:.2f} MiB fp32 grads), {args.steps} steps, batch {args.batch}/rank, seed {args.seed}"}

    def on_row(r):
        log(f"[train] {r['backend']} {r['codec']}: "
            + (f"{r['step_ms']:.1f} ms/step" if not r.get("error") else f"ERROR {r['error'][:80]}"))

    def identity(i):
        c = cfgs[i]
        return {"backend": c["backend"], "codec": c["codec"], "algorithm": c["algorithm"], "nproc": args.nproc}

    try:
        with ranks_env(args.nproc, args.net, "ringzip-train-") as (tmp, net, link):
            print("\n".join(header_lines(args.nproc, link, extra)), flush=True)
            rows = run_configs(args.nproc, tmp, net, args.threads, "ringzip.bench.lab.train", spec, len(cfgs),
                               args.row_timeout, identity, on_row, log)
    except KeyboardInterrupt:
        log("[train] interrupted")
    out = [rows[i] for i in sorted(rows)]
    gloo = next((r.get("step_ms") for r in out if r["backend"] == "gloo" and r.get("step_ms")), None)
    print(f"{'backend':>8} {'codec':>10} {'algo':>5} {'step(ms)':>9} {'samples/s':>10} {'speedup':>8} "
          f"{'loss':>7} {'test acc':>8}")
    for r in out:
        if r.get("error"):
            print(f"{r['backend']:>8} {r['codec']:>10} {r['algorithm']:>5}  ERROR: {r['error'][:150]}")
            continue
        r["speedup_vs_gloo"] = gloo / r["step_ms"] if gloo else None
        sp = f"{r['speedup_vs_gloo']:8.2f}" if gloo else f"{'-':>8}"
        print(f"{r['backend']:>8} {r['codec']:>10} {r['algorithm']:>5} {r['step_ms']:9.2f} {r['samples_per_s']:10.0f} "
              f"{sp} {r['final_loss']:7.4f} {r['test_acc']:8.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"link": link, "rows": out}, indent=1))
    return 0


if __name__ == "__main__":
    from ..rank import worker_cli

    sys.exit(worker_cli(sys.argv[1:], _train_one, _row))
