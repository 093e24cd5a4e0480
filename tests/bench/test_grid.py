"""`ringzip-bench grid`: the cell arithmetic on synthetic rows, and one tiny real run (loopback
over TCP, 2 ranks, one size, no repeats, its settling rounds counted) through the CLI, `--preset auto_grid`
spelling included."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ringzip.bench.lab import grid_report
from ringzip.bench.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def _row(codec, algorithm, t, **extra):
    return {"link": "loopback", "nproc": 4, "size_bytes": 1 << 20, "codec": codec, "algorithm": algorithm,
            "time_us": t, **extra}


def test_cells_ratios_and_model_errors():
    rows = [_row("none", "auto", 100.0, auto_choice="rd", predicted_us={"rd": 90.0, "ring": 200.0},
                 model_us={"rd": 80.0, "ring": 150.0}),
            _row("q4", "auto", 50.0), _row("bf16", "auto", 80.0),
            _row("auto", "auto", 52.0, auto_choice="q4", predicted_us={"none": 100.0, "q4": 55.0},
                 model_us={"none": 120.0, "q4": 40.0}),
            _row("none", "ring", 160.0), _row("none", "rd", 98.0)]
    (c,) = grid_report.cells(rows)
    assert c["best_fixed"] == "q4" and abs(c["auto_over_best"] - 52 / 50) < 1e-9 and abs(c["auto_over_exact"] - 0.52) < 1e-9
    assert c["best_dense"] == "rd" and abs(c["dense_auto_over_best"] - 100 / 98) < 1e-9
    errs = {(e["kind"], e["name"]): e for e in grid_report.model_errors([c])}
    assert abs(errs[("codec", "q4")]["error"] - (55 / 50 - 1)) < 1e-9
    assert abs(errs[("codec", "q4")]["model_error"] - (40 / 50 - 1)) < 1e-9
    assert set(errs) == {("codec", "none"), ("codec", "q4"), ("dense", "rd"), ("dense", "ring")}
    lines = dict((a, ok) for a, _, ok in grid_report.summary([c], list(errs.values())))
    assert lines["auto / exact, worst cell (<= 1.03)"] and lines["dense auto / best forced, worst cell (<= 1.05)"]


def test_twins_are_compared_with_their_first_group_round_by_round():
    rows = [_row("none", "auto", 100.0, times_us=[100.0, 100.0, 100.0]), _row("auto", "auto", 60.0),
            _row("q4", "auto", 50.0, times_us=[50.0, 80.0, 40.0]),
            _row("q4", "auto", 54.0, twin=True, times_us=[54.0, 86.4, 40.0]),
            _row("none", "ring", 90.0, times_us=[90.0, 90.0, 90.0]),
            _row("none", "ring", 97.2, twin=True, times_us=[97.2, 97.2, 97.2])]
    (c,) = grid_report.cells(rows)
    # the twins stay out of the cell's own figures (q4's time is the first group's) ...
    assert c["codec"]["q4"] == 50.0 and c["dense"] == {"ring": 90.0} and c["best_fixed"] == "q4"
    # ... and each is its first group's time round by round: the median of 1.08, 1.08, 1.0
    assert abs(c["twin_ratios"]["q4/auto"] - 1.08) < 1e-9 and abs(c["twin_ratios"]["none/ring"] - 1.08) < 1e-9
    lines = {a: v for a, v, _ in grid_report.summary([c], [])}
    assert lines["noise: twins beyond 3 % / 5 % / 10 %"] == "2 / 2 / 0 of 2 pairs", lines


def test_auto_over_exact_pools_the_rounds_of_both_pairs():
    rows = [_row("none", "auto", 100.0, times_us=[100.0, 100.0, 100.0]),
            _row("none", "auto", 100.0, twin=True, times_us=[100.0, 100.0, 100.0]),
            _row("auto", "auto", 110.0, times_us=[110.0, 110.0, 110.0]),
            _row("auto", "auto", 90.0, twin=True, times_us=[90.0, 90.0, 95.0]),
            _row("q4", "auto", 50.0, times_us=[50.0, 50.0, 50.0])]
    (c,) = grid_report.cells(rows)
    # per-round ratios 1.1, 1.1, 1.1 and 0.9, 0.9, 0.95: the median of the six, not the first pair's 1.1
    assert abs(c["auto_over_exact"] - (1.1 + 0.95) / 2) < 1e-9, c
    assert set(c["twin_ratios"]) == {"none/auto", "auto/auto"}


def test_preset_auto_grid_is_the_grid_subcommand():
    args = build_parser().parse_args(["grid", "--sizes", "64K"])
    assert args.func.__module__.endswith("grid") and args.sizes == "64K"


def test_tiny_grid_run(tmp_path):
    cmd = [sys.executable, "-m", "ringzip.bench", "collective", "--preset", "auto_grid", "--sizes", "256K",
           "--links", "tcp", "--nproc", "2", "--repeat", "1", "--codecs", "none,q4,auto", "--dense", "ring",
           "--time-budget", "0.1", "--iters", "3", "--out-dir", str(tmp_path), "--stem", "g", "-q"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads((tmp_path / "g.json").read_text())
    # settling rounds (until every group's last calls ran by price): one count per size, all rows
    assert len({r["settle_rounds"] for r in doc["rows"]}) == 1, doc["rows"]
    assert 0 <= doc["rows"][0]["settle_rounds"] <= 40
    (cell,) = grid_report.cells(doc["rows"])
    assert set(cell["codec"]) == {"none", "q4", "auto"} and set(cell["dense"]) == {"ring"}, cell
    assert set(cell["twin_ratios"]) == {"none/auto", "auto/auto", "q4/auto", "none/ring"}, cell
    assert all(v > 0 for v in cell["twin_ratios"].values())
    assert {r["transport"] for r in doc["rows"]} == {"gloo"} and cell["link"] == "tcp"  # loopback over TCP
    assert cell["chose"] and cell["predicted_codec"], cell
    auto = next(r for r in doc["rows"] if r["codec"] == "auto")
    assert auto["auto_changes"] >= 0 and auto["auto_tours"] >= 0 and auto["auto_explorations"] >= 0, auto
    assert "| must hold |" in (tmp_path / "g.md").read_text()
