"""The grid's cells (grid.py rows -> ratios), its markdown, JSON and heat map."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..common import fmt_bytes

FIXED = ("none", "bf16", "fp16", "q8", "q4", "q2", "q1")


# The one-host links, in report order: link name -> the groups' transport (None: the default,
# shared memory between the ranks).
LOCAL_LINKS = {"loopback": None, "tcp": "gloo"}


def link_order(link: str) -> tuple:
    """The one-host links first (shared memory, then TCP), then the emulated rates, fastest first."""
    from ..common import parse_rate_bits

    return (0, list(LOCAL_LINKS).index(link)) if link in LOCAL_LINKS else (1, -parse_rate_bits(link))


def per_round(a: list[float] | None, b: list[float] | None) -> list[float]:
    """a's time over b's, round by round (both ran the same rounds); [] where they did not."""
    return [x / y for x, y in zip(a, b)] if a and b and len(a) == len(b) else []


def paired(a: list[float] | None, b: list[float] | None, ta: float, tb: float) -> float:
    """a's time over b's: the median of the per-round ratios where both ran the same rounds (a
    burst of load that slows one round slows both), else the ratio of the medians."""
    r = per_round(a, b)
    return statistics.median(r) if r else ta / tb


def cells(rows: list[dict]) -> list[dict]:
    """One record per (link, nproc, size): the times by configuration and the ratios (paired per
    round). `same_way`: auto over the fixed codec it chose in every timed call, where it did:
    the same work twice, so its distance from 1 is the cell's noise."""
    by: dict[tuple, dict] = {}
    for r in rows:
        if not r.get("time_us"):
            continue
        c = by.setdefault((r["link"], r["nproc"], r["size_bytes"]),
                          {"link": r["link"], "nproc": r["nproc"], "size": r["size_bytes"], "codec": {}, "dense": {},
                           "rounds": {}, "predicted_codec": {}, "predicted_dense": {}, "model_codec": {},
                           "model_dense": {}, "twins": {}})
        if r.get("twin"):  # the same configuration's second group: the same work twice
            c["twins"][(r["codec"], r["algorithm"])] = r
        elif r["algorithm"] == "auto":
            c["codec"][r["codec"]] = r["time_us"]
            c["rounds"][r["codec"]] = r.get("times_us")
            if r["codec"] == "auto":
                c["chose"] = r.get("auto_choice")
                c["predicted_codec"] = r.get("predicted_us") or {}
                c["model_codec"] = r.get("model_us") or {}
            elif r["codec"] == "none":
                c["dense_chose"] = r.get("auto_choice")
                c["predicted_dense"] = r.get("predicted_us") or {}
                c["model_dense"] = r.get("model_us") or {}
        elif r["codec"] == "none":
            c["dense"][r["algorithm"]] = r["time_us"]
            c["rounds"]["dense/" + r["algorithm"]] = r.get("times_us")
    out = []
    for c in by.values():
        t, rd = c["codec"], c["rounds"]
        fixed = {k: v for k, v in t.items() if k in FIXED}
        if "auto" in t and "none" in t and fixed:
            c["best_fixed"] = min(fixed, key=fixed.get)
            # Over both pairs' rounds where the twins ran: twice the samples, either pair's luck halved.
            tw_auto, tw_exact = c["twins"].get(("auto", "auto"), {}), c["twins"].get(("none", "auto"), {})
            both = per_round(rd["auto"], rd["none"]) + per_round(tw_auto.get("times_us"), tw_exact.get("times_us"))
            c["auto_over_exact"] = statistics.median(both) if both else t["auto"] / t["none"]
            c["auto_over_best"] = paired(rd["auto"], rd[c["best_fixed"]], t["auto"], fixed[c["best_fixed"]])
            if c.get("chose") in fixed:
                c["same_way"] = paired(rd["auto"], rd[c["chose"]], t["auto"], t[c["chose"]])
        if c["dense"] and "none" in t:
            c["best_dense"] = min(c["dense"], key=c["dense"].get)
            c["dense_auto_over_best"] = paired(rd["none"], rd["dense/" + c["best_dense"]], t["none"],
                                               c["dense"][c["best_dense"]])
            chose = c.get("dense_chose")
            if chose in c["dense"]:
                c["dense_same_way"] = paired(rd["none"], rd["dense/" + chose], t["none"], c["dense"][chose])
        twins = {}
        for (codec, algo), r in c.pop("twins").items():
            first = t.get(codec) if algo == "auto" else c["dense"].get(algo)
            if first:
                rounds = rd.get(codec if algo == "auto" else "dense/" + algo)
                twins[f"{codec}/{algo}"] = paired(r.get("times_us"), rounds, r["time_us"], first)
        if twins:
            c["twin_ratios"] = twins
        del c["rounds"]
        out.append(c)
    return sorted(out, key=lambda c: (link_order(c["link"]), c["nproc"], c["size"]))


def model_errors(cs: list[dict]) -> list[dict]:
    """Predicted vs measured for every candidate the model priced and the grid also ran (the
    fixed codec rows, the forced dense rows): the model alone, and what the choice used
    (calibrated with measurements where the way had run at that size)."""
    out = []
    for c in cs:
        for kind, pred, model, meas in (("codec", c["predicted_codec"], c["model_codec"], c["codec"]),
                                        ("dense", c["predicted_dense"], c["model_dense"], c["dense"])):
            for name, p in pred.items():
                if name in meas and p > 0:
                    m = model.get(name, float("nan"))
                    out.append({"link": c["link"], "nproc": c["nproc"], "size": c["size"], "kind": kind, "name": name,
                                "predicted_us": p, "model_us": m, "measured_us": meas[name],
                                "error": p / meas[name] - 1, "model_error": m / meas[name] - 1})
    return out


def summary(cs: list[dict], errs: list[dict]) -> list[tuple[str, str, bool | None]]:
    def vals(key):
        return [c[key] for c in cs if key in c]

    def worst(key):
        v = vals(key)
        return max(v) if v else float("nan")

    ax, ab, dn = vals("auto_over_exact"), vals("auto_over_best"), vals("dense_auto_over_best")
    ae = [abs(e["error"]) for e in errs]
    lines = []
    if ax:
        lines.append(("auto / exact, worst cell (<= 1.03)", f"{worst('auto_over_exact'):.3f}", worst("auto_over_exact") <= 1.03))
    if ab:
        lines.append(("auto / best fixed, worst cell (<= 1.10)", f"{worst('auto_over_best'):.3f}", worst("auto_over_best") <= 1.10))
        med = statistics.median(ab)
        lines.append(("auto / best fixed, median cell (<= 1.05)", f"{med:.3f}", med <= 1.05))
    if dn:
        lines.append(("dense auto / best forced, worst cell (<= 1.05)", f"{worst('dense_auto_over_best'):.3f}",
                      worst("dense_auto_over_best") <= 1.05))
        lines.append(("dense auto / best forced, median cell", f"{statistics.median(dn):.3f}", None))
    same = [abs(v - 1) for v in vals("same_way") + vals("dense_same_way")]
    if same:
        lines.append(("noise: auto vs the same fixed way it chose, median / worst |ratio - 1|",
                      f"{statistics.median(same):.1%} / {max(same):.1%} ({len(same)} cells)", None))
    # Twins: a second group of the same fixed configuration in the same rounds, nothing to
    # choose: how often they lie beyond an every-cell target's margin says how far such a target
    # can be told from noise on the machine at hand.
    twins = [abs(v - 1) for c in cs for v in c.get("twin_ratios", {}).values()]
    if twins:
        lines.append(("noise: a configuration vs its twin (exact, auto, q4, forced ring), median / worst |ratio - 1|",
                      f"{statistics.median(twins):.1%} / {max(twins):.1%} ({len(twins)} pairs)", None))
        lines.append(("noise: twins beyond 3 % / 5 % / 10 %",
                      " / ".join(f"{sum(t > m for t in twins)}" for m in (0.03, 0.05, 0.10)) + f" of {len(twins)} pairs",
                      None))
    if ae:
        within = sum(e <= 0.25 for e in ae) / len(ae)
        lines.append(("calibrated predictions: median |predicted/measured - 1|", f"{statistics.median(ae):.1%}",
                      statistics.median(ae) <= 0.25))
        lines.append(("calibrated predictions within 25 % of measured", f"{within:.0%} of {len(ae)}", None))
        me = [abs(e["model_error"]) for e in errs if e["model_error"] == e["model_error"]]
        if me:
            lines.append(("model alone: median |predicted/measured - 1|", f"{statistics.median(me):.1%}", None))
            lines.append(("model alone within 25 % of measured", f"{sum(e <= 0.25 for e in me) / len(me):.0%} of {len(me)}", None))
    return lines


def _md(header: dict, cs: list[dict], errs: list[dict]) -> str:
    h = header
    out = ["# codec='auto' and algorithm='auto' vs fixed choices (`ringzip-bench grid`)", "",
           f"{h['date']}; CPU {h['cpu']} x {h['cores']} logical cores; load average {h['load_before']:.2f} before, "
           f"{h.get('load_after', float('nan')):.2f} after ({h.get('minutes', 0):.0f} min); torch {h['versions'].get('torch')}; "
           f"`{' '.join(h.get('argv') or [])}`", "", f"lscpu: {h.get('cpu_lscpu', '')}", "",
           "Times (us): per size, every configuration runs once per round, in turn (so load on the shared machine hits "
           "all alike), after untimed warm-up rounds and settling rounds (until every group's last 3 calls ran by price, at most "
           "40 and no longer than the warm-up; settle_rounds in the JSON rows); a call's time is the slowest rank's, a configuration's the median "
           "over the timed rounds; ratios are medians of the per-round ratios (auto/exact: over the rounds of both pairs, "
           "auto over exact and their twins). Where auto chose one way in every timed call, "
           "auto over that fixed way (the same work twice) shows the cell's noise (columns 'same'). min_numel=0: every fixed codec compresses at every size. auto = codec 'auto' "
           "(= auto:q4); exact = codec none, algorithm auto.", "",
           "| must hold | value | ok |", "|---|---:|---|"]
    out += [f"| {a} | {b} | {'-' if ok is None else ('yes' if ok else 'NO')} |" for a, b, ok in summary(cs, errs)]
    codecs = [k for k in FIXED if any(k in c["codec"] for c in cs)]
    out += ["", "## Codecs", "", "| link | n | size | " + " | ".join(codecs) + " | auto | chose | auto/exact | auto/best | same |",
            "|---|---:|---:|" + "---:|" * (len(codecs) + 1) + "---|---:|---:|---:|"]
    for c in cs:
        t = c["codec"]
        cells_ = [f"{t[k]:.0f}" if k in t else "-" for k in codecs + ["auto"]]
        out.append(f"| {c['link']} | {c['nproc']} | {fmt_bytes(c['size'])} | " + " | ".join(cells_) +
                   f" | {c.get('chose') or '-'} | {c.get('auto_over_exact', float('nan')):.3f} | "
                   f"{c.get('auto_over_best', float('nan')):.3f} | {c.get('same_way', float('nan')):.3f} |")
    algos = sorted({a for c in cs for a in c["dense"]})
    if algos:
        out += ["", "## Dense all-reduce", "", "| link | n | size | auto | chose | " + " | ".join(algos) + " | auto/best | same |",
                "|---|---:|---:|---:|---|" + "---:|" * len(algos) + "---:|---:|"]
        for c in cs:
            d = c["dense"]
            out.append(f"| {c['link']} | {c['nproc']} | {fmt_bytes(c['size'])} | {c['codec'].get('none', float('nan')):.0f} | "
                       f"{c.get('dense_chose') or '-'} | " + " | ".join(f"{d[a]:.0f}" if a in d else "-" for a in algos) +
                       f" | {c.get('dense_auto_over_best', float('nan')):.3f} | {c.get('dense_same_way', float('nan')):.3f} |")
    names = sorted({k for c in cs for k in c.get("twin_ratios", {})})
    if names:
        out += ["", "## Twins: the same configuration in two groups (second over first, median of the rounds)", "",
                "| link | n | size | " + " | ".join(names) + " |", "|---|---:|---:|" + "---:|" * len(names)]
        for c in cs:
            tw = c.get("twin_ratios", {})
            out.append(f"| {c['link']} | {c['nproc']} | {fmt_bytes(c['size'])} | " +
                       " | ".join(f"{tw[k]:.3f}" if k in tw else "-" for k in names) + " |")
    if errs:
        out += ["", "## Model: predicted vs measured (us)", "",
                "calibrated = what auto's choice used (the agreed measured time where that way had run at this size, "
                "else the model); model = the cost model alone, with the group's agreed parameters.", "",
                "| link | n | size | candidate | calibrated | model | measured | error | model error |",
                "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
        out += [f"| {e['link']} | {e['nproc']} | {fmt_bytes(e['size'])} | {e['kind']} {e['name']} | {e['predicted_us']:.0f} | "
                f"{e['model_us']:.0f} | {e['measured_us']:.0f} | {e['error']:+.0%} | {e['model_error']:+.0%} |" for e in errs]
    return "\n".join(out) + "\n"


def _plot(path: Path, cs: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted({(c["link"], c["nproc"]) for c in cs}, key=lambda k: (link_order(k[0]), k[1]))
    sizes = sorted({c["size"] for c in cs})
    at = {(c["link"], c["nproc"], c["size"]): c for c in cs}
    fig, axes = plt.subplots(1, 2, figsize=(13, 1.2 + 0.55 * len(rows)))
    for ax, key, label, what in ((axes[0], "auto_over_best", "chose", "codec auto / best fixed codec"),
                                 (axes[1], "dense_auto_over_best", "dense_chose", "algorithm auto / best forced (exact)")):
        grid = [[at.get((l, n, s), {}).get(key, float("nan")) for s in sizes] for l, n in rows]
        im = ax.imshow(grid, cmap="RdYlGn_r", vmin=0.8, vmax=1.2, aspect="auto")
        for i, (l, n) in enumerate(rows):
            for j, s in enumerate(sizes):
                c = at.get((l, n, s), {})
                if key in c:
                    ax.text(j, i, f"{c[key]:.2f}\n{c.get(label) or ''}", ha="center", va="center", fontsize=6)
        ax.set_xticks(range(len(sizes)), [fmt_bytes(s) for s in sizes])
        ax.set_yticks(range(len(rows)), [f"{l}, {n} ranks" for l, n in rows])
        ax.set_title(what, fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.04)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(out_dir: Path, stem: str, header: dict, rows: list[dict]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    cs = cells(rows)
    errs = model_errors(cs)
    md, js, png = (out_dir / f"{stem}.{ext}" for ext in ("md", "json", "png"))
    md.write_text(_md(header, cs, errs))
    # Compact: the rows (every round's times, auto's choices and prices) are the data; cells and
    # model errors are recomputed from them (cells(), model_errors()).
    js.write_text(json.dumps({"header": header, "summary": summary(cs, errs), "rows": rows}, default=str))
    written = [md, js]
    try:
        _plot(png, cs)
        written.append(png)
    except Exception as e:  # noqa: BLE001 - a plot never costs the measurements
        print(f"[grid] plot failed: {e}")
    return written
