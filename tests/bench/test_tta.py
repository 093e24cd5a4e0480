"""`ringzip-bench train --task charlm|digits` (time to accuracy on real data), on 2 ranks with
tiny models: the same numbers twice, the metric moves, every row and seed lands in the JSON, the
compressed rows send fewer bytes. Plus the report's target / time-to-target logic on made-up
curves. Whole file: ~30 s on a loaded 2-core machine.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ringzip.bench.lab import tta, tta_report
from tests.bench.test_cli import ROOT, _env

TINY_LM = ["--task-opt", "d_model=32", "--task-opt", "heads=2", "--task-opt", "layers=1", "--task-opt", "ctx=16",
           "--task-opt", "val_windows=8", "--task-opt", "warmup=2", "--task-opt", "eval_every=4"]


def _tta(tmp_path, name, args, timeout=45):
    stem = tmp_path / name
    p = subprocess.run([sys.executable, "-m", "ringzip.bench", "train", "-n", "2", "--out", str(stem), *args],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(stem.with_suffix(".json").read_text())
    assert stem.with_suffix(".md").exists() and stem.with_suffix(".png").stat().st_size > 1000
    return doc


def test_charlm_same_numbers_twice(tmp_path):
    args = ["--task", "charlm", "--steps", "8", *TINY_LM, "--rows", "gloo,gloo+powersgd1,ringzip:q4",
            "--seeds", "0", "--ropt", "min_numel=1024"]
    a, b = _tta(tmp_path, "a", args), _tta(tmp_path, "b", args)
    curves = [[r["curve"] for r in doc["runs"]] for doc in (a, b)]
    metrics = [[[m for _, _, m in c] for c in cs] for cs in curves]
    assert metrics[0] == metrics[1]  # bit for bit, timing aside
    runs = {r["row"]: r for r in a["runs"]}
    assert set(runs) == {"gloo", "gloo+powersgd1", "ringzip:q4"} and not any(r["error"] for r in runs.values())
    gloo = [m for _, _, m in runs["gloo"]["curve"]]
    assert [s for s, _, _ in runs["gloo"]["curve"]] == [0, 4, 7, 8]  # every 4 steps, the target step, the end
    assert gloo[-1] < gloo[0] - 0.05  # bits per character went down
    assert runs["ringzip:q4"]["wire_bytes_per_step"] < runs["gloo"]["wire_bytes_per_step"] / 6
    assert runs["gloo+powersgd1"]["wire_bytes_per_step"] < runs["gloo"]["wire_bytes_per_step"]
    assert a["meta"]["target_step"] == 7 and runs["gloo"]["target"] == gloo[2]


def test_digits_rows_and_seeds(tmp_path):
    pytest.importorskip("sklearn")
    doc = _tta(tmp_path, "d", ["--task", "digits", "--steps", "30", "--task-opt", "eval_every=15", "--rows",
                               "gloo,gloo+bf16,ringzip:q8", "--seeds", "0,1", "--seeds-for", "gloo,ringzip:q8"])
    got = [(r["row"], r["seed"]) for r in doc["runs"]]
    assert got == [("gloo", 0), ("gloo+bf16", 0), ("ringzip:q8", 0), ("gloo", 1), ("ringzip:q8", 1)]
    for r in doc["runs"]:
        assert not r["error"] and r["curve"][-1][2] > 40 > 20 > r["curve"][0][2], r  # from chance to well above
    q8 = next(s for s in doc["summary"] if s["row"] == "ringzip:q8")
    assert q8["seeds"] == [0, 1] and q8["final_sd"] is not None and 3.5 < q8["wire_vs_gloo"] < 4.5


def test_report_targets_and_times():
    meta = {"task": "digits", "metric": "val_acc", "higher_is_better": True, "steps": 10, "target_step": 9}
    curve = lambda *ms: [[s, s * 0.5, m] for s, m in zip((0, 5, 9, 10), ms)]  # noqa: E731
    run = lambda row, ms, step_ms, wire: {"row": row, "seed": 0, "curve": curve(*ms), "step_ms": step_ms,  # noqa: E731
                                          "train_s": 5.0, "wire_bytes_per_step": wire}
    runs = [run("gloo", (10, 80, 90, 91), 500, 8.0), run("ringzip:q4", (10, 90, 91, 92), 250, 1.0),
            run("ringzip:q2", (10, 70, 85, 89), 200, 0.5), {"row": "ringzip:q8", "seed": 0, "error": "rank 1 died"}]
    s = {x["row"]: x for x in tta_report.summarize(meta, runs)}
    assert runs[0]["target"] == 90 and s["gloo"]["tta_s"] == 4.5 and s["ringzip:q4"]["tta_s"] == 2.5
    assert s["ringzip:q4"]["tta_vs_gloo"] == pytest.approx(1.8) and s["ringzip:q4"]["wire_vs_gloo"] == 8
    assert s["ringzip:q2"]["tta_s"] is None and s["ringzip:q2"]["delta_vs_gloo"] == pytest.approx(-2)
    assert s["ringzip:q8"]["errors"] == ["rank 1 died"] and "step_ms" not in s["ringzip:q8"]
    md = tta_report.markdown(dict(meta, header=[], argv=[], nproc=2, link="l", started="t"),
                             list(s.values()), runs)
    assert "not reached" in md and "ERROR" in md and "`ringzip:q4`: final accuracy +1.00 points" in md
    assert "(mean of 1 seeds, paired): **does not hold**" in md  # one seed is not enough


def test_rows_and_plan():
    assert tta.parse_row("ringzip:topk:0.01") == {"backend": "ringzip", "hook": None, "codec": "topk:0.01"}
    assert tta.parse_row("gloo+powersgd4")["rank"] == 4 and tta.parse_row("gloo")["hook"] is None
    for bad in ("nccl", "gloo+powersgd", "gloo+int8", "ringzip:"):
        with pytest.raises(ValueError):
            tta.parse_row(bad)
    p = tta.plan(["gloo", "ringzip:q4", "ringzip:q2"], [0, 1], ["gloo", "ringzip:q4"])
    assert [(c["row"], c["seed"]) for c in p] == [("gloo", 0), ("ringzip:q4", 0), ("ringzip:q2", 0),
                                                   ("gloo", 1), ("ringzip:q4", 1)]
    assert len(tta.plan(["gloo", "ringzip:q2"], [0, 1, 2], ["all"])) == 6
