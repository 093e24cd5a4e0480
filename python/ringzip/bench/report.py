"""Rows -> console/markdown tables, JSON records and a log-log plot."""
from __future__ import annotations

import json
import math
from pathlib import Path


def median_of_repeats(rows: list[dict]) -> list[dict]:
    """One row per (size, configuration): the repetition with the median time (the lower middle
    one for an even count) among those that ran, with every repetition's time beside it, and
    the first repetition's cold cost."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["size_bytes"], r["backend"], r["codec"], r["algorithm"], r.get("hierarchy")),
                          []).append(r)
    out = []
    for reps in groups.values():
        ok = sorted((r for r in reps if not r.get("error") and r.get("time_us")), key=lambda r: r["time_us"])
        if not ok:
            out.append(reps[-1])
            continue
        row = dict(ok[(len(ok) - 1) // 2])
        # The cold cost is the first repetition's: later ones find the size already learned.
        for key in ("first_us", "cold_calls", "cold_over_steady", "learning_calls"):
            if key in reps[0]:
                row[key] = reps[0][key]
        if len(reps) > 1:
            row["repeat_times_us"] = [r["time_us"] for r in ok]
            row["repeats"] = len(reps)
        out.append(row)
    return out


def add_speedups(rows: list[dict]) -> None:
    """speedup_vs_gloo = gloo time / row time, for the gloo row of the same op and size; on rows
    with a hierarchy other than flat, speedup_vs_flat = time of the flat row of the same codec
    and algorithm / row time."""
    gloo = {(r["op"], r["size_bytes"]): r["time_us"] for r in rows
            if r.get("backend") == "gloo" and r.get("time_us")}
    flat = {(r["op"], r["size_bytes"], r["codec"], r["algorithm"]): r["time_us"] for r in rows
            if r.get("hierarchy") == "flat" and r.get("time_us")}
    for r in rows:
        g = gloo.get((r.get("op"), r.get("size_bytes")))
        r["speedup_vs_gloo"] = (g / r["time_us"]) if (g and r.get("time_us")) else None
        if r.get("hierarchy") not in (None, "flat"):
            f = flat.get((r.get("op"), r.get("size_bytes"), r.get("codec"), r.get("algorithm")))
            r["speedup_vs_flat"] = (f / r["time_us"]) if (f and r.get("time_us")) else None


def _f(v, fmt: str, none: str = "-") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return none
    return format(v, fmt)


COLUMNS = [  # (title, width, getter)
    ("size(B)", 11, lambda r: str(r["size_bytes"])),
    ("count", 10, lambda r: str(r["count"])),
    ("type", 8, lambda r: r["dtype"]),
    ("redop", 5, lambda r: r["redop"]),
    ("backend", 7, lambda r: r["backend"]),
    ("codec", 10, lambda r: r["codec"]),
    ("algo", 5, lambda r: r["algorithm"]),
    ("time(us)", 10, lambda r: _f(r["time_us"], ".1f")),
    ("algbw", 7, lambda r: _f(r["algbw_gbps"], ".3f")),
    ("busbw", 7, lambda r: _f(r["busbw_gbps"], ".3f")),
    ("r", 6, lambda r: _f(r["ratio"], ".2f")),
    ("wirebw", 7, lambda r: _f(r["wire_busbw_gbps"], ".3f")),
    ("speedup", 7, lambda r: _f(r["speedup_vs_gloo"], ".2f")),
    ("maxerr", 8, lambda r: _f(r["max_abs_err"], ".1e")),
    ("relerr", 8, lambda r: _f(r["rel_l2_err"], ".1e")),
    ("same", 4, lambda r: {True: "yes", False: "NO", None: "-"}[r.get("ranks_agree")]),
    ("codec%", 6, lambda r: _f(100 * r["codec_share"], ".0f") if r.get("codec_share") is not None else "-"),
    # The cold cost, what a user's first calls of a size see: the first call against the steady
    # median, and the calls before the timed ones (warm-up, and the cost model's learning) in all.
    ("1st/med", 7, lambda r: _f(r["first_us"] / r["time_us"], ".1f") if r.get("first_us") and r.get("time_us") else "-"),
    ("cold", 5, lambda r: _f(r.get("cold_over_steady"), ".2f")),
    ("calls", 5, lambda r: str(r["cold_calls"]) if r.get("cold_calls") else "-"),
    ("tries", 5, lambda r: str(r["learning_calls"]) if r.get("cold_calls") else "-"),
]
HIERARCHY_COLUMN = ("hier", 5, lambda r: r.get("hierarchy") or "-")
VS_FLAT_COLUMN = ("vsflat", 6, lambda r: _f(r.get("speedup_vs_flat"), ".2f"))
LINK_COLUMNS = [
    ("floor(us)", 10, lambda r: _f(r.get("floor_us"), ".1f")),
    ("eff", 5, lambda r: _f(r.get("efficiency"), ".2f")),
]


AUTO_COLUMNS = [("chose", 12, lambda r: r.get("auto_choice") or "-")]


def _hierarchical(rows) -> bool:
    return any(r.get("hierarchy") for r in rows)


def _columns(rows):
    cols = list(COLUMNS)
    if any(r.get("auto_choice") for r in rows):
        cols += AUTO_COLUMNS
    if _hierarchical(rows):  # after algo, so a row's name reads e.g. "ringzip q4 auto node"
        cols.insert(7, HIERARCHY_COLUMN)
        cols.insert(cols.index(next(c for c in cols if c[0] == "speedup")) + 1, VS_FLAT_COLUMN)
    if any(r.get("link_gbit") for r in rows):
        cols += LINK_COLUMNS
    return cols


def _name_columns(rows) -> int:
    """How many leading columns name the row (shown on error rows too)."""
    return 8 if _hierarchical(rows) else 7


def legend(rows) -> list[str]:
    lines = ["# time = median over iterations of the slowest rank (barrier-aligned starts); "
             "algbw/busbw/wirebw in GB/s (1e9 B/s)",
             "# busbw = algbw * bus factor (all-reduce 2(n-1)/n); r = bytes an exact ring all-reduce sends / bytes sent (ringzip stats); "
             "wirebw = busbw / r; speedup = gloo time / time",
             "# maxerr / relerr: max |out - ref| and ||out - ref||_2 / ||ref||_2 vs an fp64 reference; "
             "same = all ranks bitwise identical; codec% = share of compressed calls' time in codec kernels",
             "# cold cost, the calls before the timed ones as a user's first calls of a size: 1st/med = the first call / "
             "time; cold = their total / (calls x time); calls = how many; tries = calls ringzip's cost model ran to "
             "measure a way (learning)"]
    reps = max((r.get("repeats", 1) for r in rows), default=1)
    if reps > 1:
        lines.append(f"# --repeat {reps}: each size ran every configuration in turn {reps} times; a row is the "
                     "repetition with the median time (all times in the JSON, repeat_times_us)")
    if any(r.get("auto_choice") for r in rows):
        lines.append("# chose = what algorithm/codec 'auto' ran in the timed iterations (counts when it changed)")
    if _hierarchical(rows):
        lines.append("# hier = ringzip's hierarchy option (flat: every rank alike; node: exact inside a node, "
                     "codec between nodes); vsflat = time of the flat row of the same codec / time")
    if any(r.get("link_gbit") for r in rows):
        lines.append("# floor = busfactor * S / (r * B) with B the configured link rate (with --nodes: busfactor "
                     "over the N node NICs), plus one round trip (2 x DELAY) on a link with a delay; eff = floor / time")
    return lines


def text_table(rows: list[dict]) -> str:
    cols, nid = _columns(rows), _name_columns(rows)
    head = " ".join(t.rjust(w) for t, w, _ in cols)
    out = [head]
    for r in rows:
        if r.get("error"):
            cells = [g(r).rjust(w) for t, w, g in cols[:nid]]
            out.append(" ".join(cells) + "  ERROR: " + str(r["error"]).splitlines()[0][:160])
        else:
            out.append(" ".join(g(r).rjust(w) for t, w, g in cols))
    return "\n".join(out)


def markdown_table(rows: list[dict]) -> str:
    cols, nid = _columns(rows), _name_columns(rows)
    out = ["| " + " | ".join(t for t, _, _ in cols) + " | note |",
           "|" + "|".join("---:" for _ in cols) + "|---|"]
    for r in rows:
        err = str(r["error"]).splitlines()[0][:200].replace("|", "/") if r.get("error") else ""
        if err:
            cells = [g(r) for _, _, g in cols[:nid]] + [""] * (len(cols) - nid)
        else:
            cells = [g(r) for _, _, g in cols]
        out.append("| " + " | ".join(cells) + f" | {err} |")
    return "\n".join(out)


def write_json(path: Path, header: dict, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"header": header, "results": rows}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(path)


def plot(path: Path, rows: list[dict], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("time_us"):
            label = r["backend"] if r["backend"] != "ringzip" else f"ringzip {r['codec']}" + (
                f" ({r['algorithm']})" if r["algorithm"] not in ("auto", "-") else "") + (
                f" {r['hierarchy']}" if r.get("hierarchy") else "")
            series.setdefault(label, []).append(r)
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(13, 5))
    for label, rs in sorted(series.items()):
        rs = sorted(rs, key=lambda r: r["size_bytes"])
        xs = [r["size_bytes"] for r in rs]
        style = dict(marker="o", ms=3, lw=2.2 if label == "gloo" else 1.2,
                     color="black" if label == "gloo" else None)
        ax_t.plot(xs, [r["time_us"] for r in rs], label=label, **style)
        ax_b.plot(xs, [r["busbw_gbps"] for r in rs], label=label, **style)
    link = next((r.get("link_gbit") for r in rows if r.get("link_gbit")), None)
    if link:
        ax_b.axhline(link / 8, color="grey", ls="--", lw=1, label=f"link {link:g} Gbit/s")
    for ax, yl in ((ax_t, "time (us)"), (ax_b, "busbw (GB/s)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel(yl)
        ax.grid(True, which="both", alpha=0.3)
    ax_b.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
