"""Time-to-accuracy runs (tta.py) -> per-row summary, markdown table, JSON and plots.

Per seed, the target is the `gloo` row's validation metric at the target step (90 % of the
steps); a run's time to target is its training time at the first validation point at least as
good. Per row: the median over its seeds of the step time and of the time to target (a seed that
never reaches the target counts as infinitely slow), the final metric as mean ± sample standard
deviation over seeds, and its difference to `gloo` paired by seed.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

INF = math.inf


def _better(meta):
    return (lambda a, b: a >= b) if meta["higher_is_better"] else (lambda a, b: a <= b)


def annotate(meta, runs: list[dict]) -> None:
    """Adds target, tta_s (None: not reached) and final to every run without an error."""
    ok = [r for r in runs if not r.get("error")]
    targets = {r["seed"]: next(m for s, _, m in r["curve"] if s == meta["target_step"])
               for r in ok if r["row"] == "gloo"}
    better = _better(meta)
    for r in ok:
        r["final"] = r["curve"][-1][2]
        r["target"] = targets.get(r["seed"])
        r["tta_s"] = None if r["target"] is None else next(
            (t for _, t, m in r["curve"] if better(m, r["target"])), None)


def summarize(meta, runs: list[dict]) -> list[dict]:
    annotate(meta, runs)
    names = list(dict.fromkeys(r["row"] for r in runs))
    gloo = {r["seed"]: r for r in runs if r["row"] == "gloo" and not r.get("error")}
    out = []
    for name in names:
        mine = [r for r in runs if r["row"] == name]
        ok = [r for r in mine if not r.get("error")]
        s = {"row": name, "seeds": [r["seed"] for r in ok], "errors": [r["error"] for r in mine if r.get("error")]}
        if ok:
            tta = statistics.median_low([INF if r["tta_s"] is None else r["tta_s"] for r in ok])
            paired = [r for r in ok if r["seed"] in gloo]
            g_tta = statistics.median_low([gloo[r["seed"]]["tta_s"] for r in paired]) if paired else None
            g_wire = statistics.mean(gloo[r["seed"]]["wire_bytes_per_step"] for r in paired) if paired else None
            finals = [r["final"] for r in ok]
            s.update(step_ms=statistics.median(r["step_ms"] for r in ok),
                     tta_s=None if tta == INF else tta, reached=sum(r["tta_s"] is not None for r in ok),
                     tta_vs_gloo=(g_tta / tta) if (g_tta and tta != INF) else None,
                     final_mean=statistics.mean(finals),
                     final_sd=statistics.stdev(finals) if len(finals) > 1 else None,
                     delta_vs_gloo=statistics.mean(r["final"] - gloo[r["seed"]]["final"] for r in paired)
                     if paired else None,
                     wire_bytes_per_step=statistics.mean(r["wire_bytes_per_step"] for r in ok),
                     wire_vs_gloo=(g_wire / statistics.mean(r["wire_bytes_per_step"] for r in ok)) if g_wire else None)
        out.append(s)
    hook = _best(out, "gloo+")
    for s in out:
        s["tta_vs_best_hook"] = hook["tta_s"] / s["tta_s"] if hook and s.get("tta_s") else None
    return out


def _best(summary, prefix, seeds=0):
    """The fastest row of a kind: "gloo+" is torch's hooks (ringzip's own hook, gloo+ringzip:, is
    ringzip's), "ringzip:" ringzip's codecs set on the group."""
    def kind(row):
        return row.startswith(prefix) and not (prefix == "gloo+" and row.startswith("gloo+ringzip:"))

    cands = [s for s in summary if kind(s["row"]) and s.get("tta_s") and len(s["seeds"]) >= seeds]
    return min(cands, key=lambda s: s["tta_s"], default=None)


def checks(meta, summary) -> list[str]:
    """The time-to-accuracy targets for this task, each said plainly: holds / does not hold."""
    by = {s["row"]: s for s in summary}
    exact = by.get("gloo", {})
    lines = []
    if meta["task"] == "charlm":
        # rows with every seed only: a median over one seed is not comparable with one over three
        most = max((len(s["seeds"]) for s in summary), default=0)
        hook, rz = _best(summary, "gloo+", most), _best(summary, "ringzip:", most)
        if not (hook and rz and exact.get("final_mean")):
            return [f"- charlm: no verdict (no ringzip row or no hook row run with {most} seeds reached the target)"]
        ratio = hook["tta_s"] / rz["tta_s"]
        gap = 100 * (rz["final_mean"] - exact["final_mean"]) / exact["final_mean"]
        ok = ratio >= 1.5 and gap <= 1.0 and len(rz["seeds"]) >= 3
        lines.append(f"- best ringzip row `{rz['row']}` reaches the target {ratio:.2f}x sooner than the best torch "
                     f"hook `{hook['row']}` ({rz['tta_s']:.1f} s vs {hook['tta_s']:.1f} s, medians over "
                     f"{len(rz['seeds'])} / {len(hook['seeds'])} seeds); its final {meta['metric']} is {gap:+.2f} % "
                     f"from exact (mean of {len(rz['seeds'])} seeds): "
                     f"**{'holds' if ok else 'does not hold'}** (needs >= 1.5x and <= +1 %, 3 seeds)")
    elif meta["task"] == "digits":
        for name, limit in (("ringzip:q8", 0.5), ("ringzip:q4", 0.5), ("ringzip:topk:0.01", 1.0)):
            s = by.get(name)
            if not s or s.get("delta_vs_gloo") is None:
                lines.append(f"- `{name}`: not run")
                continue
            ok = s["delta_vs_gloo"] >= -limit and len(s["seeds"]) >= 3
            lines.append(f"- `{name}`: final accuracy {s['delta_vs_gloo']:+.2f} points vs exact (mean of "
                         f"{len(s['seeds'])} seeds, paired): **{'holds' if ok else 'does not hold'}** "
                         f"(needs >= -{limit} points, 3 seeds)")
    return lines


def _f(v, fmt, none="-"):
    return none if v is None else format(v, fmt)


def markdown(meta, summary, runs) -> str:
    m = meta["metric"]
    hdr = "\n".join(meta["header"])
    lines = [f"# Time to accuracy: {meta['task']}, {meta['nproc']} ranks, {meta['link']}", "",
             f"```\n{hdr}\n```", "",
             f"Started {meta['started']}. Command: `ringzip-bench {' '.join(meta['argv'] or [])}`", "",
             f"Target of each seed: `gloo`'s {m} at step {meta['target_step']} of {meta['steps']}. Time to target: "
             "training time (sum over steps of the slowest rank's step, validation excluded) up to the first "
             "validation point that reaches it; median over seeds, a seed that never reaches it counts as "
             "infinitely slow. Step: median over steps (after 5 warm-up steps) of the slowest rank, median over "
             "seeds. Wire: bytes one rank sends per step: compressed ringzip rows from `ringzip.stats()`; gloo rows "
             "and `ringzip:none` what an ideal ring all-reduce sends (gloo's and ringzip's exact algorithm at these "
             "sizes) for what the hook hands over (PowerSGD: its own element count, fp32 steps before "
             "`start_powerSGD_iter` included). vs gloo / vs best hook: time to target of `gloo` / of the fastest "
             "hook row, divided by the row's. Final: mean ± sample s.d. over seeds; Δ: mean "
             "difference to `gloo` of the same seeds.", "",
             f"| row | seeds | step (ms) | wire / step (MiB) | wire vs gloo | time to target (s) | reached | "
             f"vs gloo | vs best hook | final {m} | Δ vs exact |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in summary:
        if "step_ms" not in s:
            lines.append(f"| {s['row']} | - | ERROR: {'; '.join(e[:80] for e in s['errors'])} |||||||||")
            continue
        final = f"{s['final_mean']:.4f}" + (f" ± {s['final_sd']:.4f}" if s["final_sd"] is not None else "")
        lines.append(f"| {s['row']} | {','.join(map(str, s['seeds']))} | {s['step_ms']:.1f} | "
                     f"{s['wire_bytes_per_step'] / 2**20:.3f} | {_f(s['wire_vs_gloo'], '.1f')} | "
                     f"{_f(s['tta_s'], '.1f', 'not reached')} | {s['reached']}/{len(s['seeds'])} | "
                     f"{_f(s['tta_vs_gloo'], '.2f')} | {_f(s['tta_vs_best_hook'], '.2f')} | {final} | "
                     f"{_f(s['delta_vs_gloo'], '+.4f')} |")
    lines += ["", "Checks against the targets:", "", *checks(meta, summary), "", "Per seed:", "",
              f"| row | seed | step (ms) | train (s) | target | time to target (s) | final {m} | "
              "load avg (1 min, at the end) |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        if r.get("error"):
            lines.append(f"| {r['row']} | {r['seed']} | ERROR: {r['error'][:120]} ||||||")
        else:
            lines.append(f"| {r['row']} | {r['seed']} | {r['step_ms']:.1f} | {r['train_s']:.1f} | "
                         f"{_f(r['target'], '.4f')} | {_f(r['tta_s'], '.1f', 'not reached')} | {r['final']:.4f} | "
                         f"{_f(r.get('load_avg'), '.1f')} |")
    return "\n".join(lines) + "\n"


def plot(path: Path, meta, runs) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seed = min((r["seed"] for r in runs), default=0)
    fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(13, 5))
    for r in runs:
        if r.get("error") or r["seed"] != seed:
            continue
        steps, secs, vals = zip(*r["curve"])
        hook = r["row"].startswith("gloo+")
        style = dict(lw=2.2, color="black") if r["row"] == "gloo" else dict(lw=1.2, ls="--" if hook else "-")
        ax_t.plot(secs, vals, label=r["row"], **style)
        ax_s.plot(steps, vals, label=r["row"], **style)
        if r["row"] == "gloo" and r.get("target") is not None:
            for ax in (ax_t, ax_s):
                ax.axhline(r["target"], color="grey", lw=0.8, ls=":")
    for ax, xl in ((ax_t, "training time (s, validation excluded)"), (ax_s, "step")):
        ax.set_xlabel(xl)
        ax.set_ylabel(meta["metric"])
        ax.grid(True, alpha=0.3)
        lo, hi = _ylim(runs, seed, meta)
        if lo is not None:
            ax.set_ylim(lo, hi)
    ax_s.legend(fontsize=8)
    fig.suptitle(f"{meta['task']}, {meta['nproc']} ranks, {meta['link']}, seed {seed}; dotted: target", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ylim(runs, seed, meta):
    """Zoom on the part of the curves that tells rows apart: from the target's neighbourhood to
    the gloo curve's value at a fifth of the steps (the first steps would squash the rest)."""
    g = next((r for r in runs if r["row"] == "gloo" and r["seed"] == seed and not r.get("error")), None)
    if not g or g.get("target") is None:
        return None, None
    early = next((m for s, _, m in g["curve"] if s >= meta["steps"] // 5), g["curve"][0][2])
    lo, hi = sorted((g["target"], early))
    pad = 0.6 * (hi - lo) or 1.0
    vals = [m for r in runs if r["seed"] == seed and not r.get("error") for _, _, m in r["curve"]]
    return max(min(vals), lo - pad), hi + pad


def write(stem: str, meta, runs) -> list[str]:
    summary = summarize(meta, runs)
    base = Path(stem)
    base.parent.mkdir(parents=True, exist_ok=True)
    md, js, png = (base.with_name(base.name + ext) for ext in (".md", ".json", ".png"))
    md.write_text(markdown(meta, summary, runs))
    js.write_text(json.dumps({"meta": meta, "summary": summary, "runs": runs}, indent=1, default=str))
    written = [str(md), str(js)]
    try:
        plot(png, meta, runs)
        written.append(str(png))
    except Exception as e:  # noqa: BLE001 - a plot never costs the measurements
        print(f"[tta] plot failed: {e}")
    print(markdown(meta, summary, runs))
    return written


def main(argv=None) -> int:
    """python -m ringzip.bench.lab.tta_report RESULT.json: rewrite RESULT.md and RESULT.png from the
    runs recorded in RESULT.json (after a change to this report; nothing is measured again)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].endswith(".json"):
        print(main.__doc__)
        return 2
    doc = json.loads(Path(args[0]).read_text())
    runs = [{k: v for k, v in r.items() if k not in ("final", "target", "tta_s")} for r in doc["runs"]]
    write(args[0][: -len(".json")], doc["meta"], runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
