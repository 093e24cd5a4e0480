"""The learning lab's report (ringzip.bench.lab.learning): what a run's calls add above its steady
state, the tuner against the best fixed row in median totals and round by round, and the
tuner's own summary per run, on synthetic series (no launch)."""
from __future__ import annotations

import argparse
import json

from ringzip.bench.lab import learning


def _run(first, rest, n=30):
    return [{"event": "call", "i": 0, "ms": first}] + [{"event": "call", "i": i, "ms": rest} for i in range(1, n)]


def test_report_pairs_the_rounds_and_keeps_the_tuner_summary(tmp_path):
    series = {"ringzip": [_run(500, 110), _run(400, 100)], "ringzip:ring": [_run(120, 100), _run(120, 100)]}
    tuner = {"ringzip": [{"calls": 60, "refreshes": 9, "refresh_s": 0.002, "explorations": 1, "tours": 1,
                          "changes": 0, "way_choices": {"ring": 60}}] * 2}
    args = argparse.Namespace(hidden=2048, ddp=30, size="16M", calls=30, nproc=3, net="1gbit",
                              rows="ringzip,ringzip:ring", repeat=2, out_dir=str(tmp_path), stem="l")
    assert learning._report(args, ["ringzip", "ringzip:ring"], series, tuner=tuner) == 0  # noqa: SLF001
    doc = json.loads((tmp_path / "l.json").read_text())
    a = doc["summary"]["auto_over_best_fixed"]
    want = [(500 + 29 * 110) / (120 + 29 * 100), (400 + 29 * 100) / (120 + 29 * 100)]
    assert a["best_fixed"] == "ringzip:ring" and all(abs(x - y) < 1e-12 for x, y in zip(a["per_round"], want))
    assert abs(a["per_round_median"] - sum(want) / 2) < 1e-12 and a["median_step_per_round"] == [1.1, 1.0]
    first = doc["summary"]["ringzip"][0]
    assert abs(first["excess_over_steady"] - 390 / (500 + 29 * 110)) < 1e-12 and first["steady_ms"] == 110
    assert doc["tuner"] == tuner
    md = (tmp_path / "l.md").read_text()
    assert "Per round (the rows alternate)" in md and "9 agreements (the last took 2.00 ms)" in md


def test_rows_name_the_algorithm_and_the_codec():
    import ringzip

    assert learning._row_options("gloo") == ("gloo", None)  # noqa: SLF001
    for row, algo, codec in (("ringzip:ring", "ring", None), ("ringzip+q4", None, "q4"),
                             ("ringzip:tree+auto", "tree", "auto")):
        backend, opts = learning._row_options(row)  # noqa: SLF001
        want = ringzip.Options(**{k: v for k, v in (("algorithm", algo), ("codec", codec)) if v})
        assert backend == "ringzip" and (opts.algorithm, opts.codec) == (want.algorithm, want.codec), (row, opts)
