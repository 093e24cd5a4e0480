"""The scale study's two tables on a small cut (python/ringzip/bench/lab/scale_sim.py): every row
filled, the planner's row matching the planner's rule, the node-aware path ahead of the flat one
where the NIC is the bottleneck."""
from __future__ import annotations

import json

from ringzip.bench.lab import scale_sim as SS


def test_planner_table_compares_the_model_with_the_replay(tmp_path):
    res = SS.planner(str(tmp_path / "p"), ranks=(16,), sizes=(1 << 20,), links=(25,),
                     ways=[("none", "ring"), ("none", "star"), ("q4", "sra")])
    assert len(res["rows"]) == 3
    for r in res["rows"]:
        assert r["simulated_s"] > 0 and r["model_s"] > 0
        assert abs(r["error"] - (r["model_s"] / r["simulated_s"] - 1)) < 1e-12
    # The star's root carries every rank's bytes: slower than the ring at 1 MiB over 16 ranks.
    t = {r["algorithm"]: r["simulated_s"] for r in res["rows"] if r["codec"] == "none"}
    assert t["star"] > 2 * t["ring"]
    saved = json.loads((tmp_path / "p.json").read_text())
    assert saved["planner"]["median_error"] == res["median_error"]
    assert "16 | 25 Gbit/s | 1 MiB | q4/sra" in (tmp_path / "p.md").read_text()


def test_tables_put_node_aware_ahead_where_the_nic_is_shared(tmp_path):
    res = SS.tables(str(tmp_path / "t"), machines=(2,), links=(25,), sizes=(16 << 20,),
                    codecs=(("none", "ring"), ("q4", "sra")))
    rows = {r["codec"]: r for r in res["rows"]}
    assert set(rows) == {"none", "q4"}
    q4 = rows["q4"]
    # Flat SRA sends most of every rank's bytes across the NIC its 8 ranks share.
    assert q4["node_s"] < q4["flat_s"]
    assert q4["planner"] == "node" and q4["planner_vs_best"] == 1.0
    assert q4["speedup_vs_exact"] > 2
    assert rows["none"]["speedup_vs_exact"] == 1.0
    # One machine: compression gains the more, the slower the links between its GPUs.
    one = {(r["codec"], r["intra_gbyte"], r["size_bytes"]): r for r in res["one_machine"]}
    assert all(r["speedup_vs_exact"] == 1.0 for k, r in one.items() if k[0] == "none")
    assert one[("q4", 12.0, 64 << 20)]["speedup_vs_exact"] > one[("q4", 300.0, 64 << 20)]["speedup_vs_exact"] > 1
    md = (tmp_path / "t.md").read_text()
    assert "### Published figures beside these" in md and "QuickReduce" in md
    assert "q4 " + f"{one[('q4', 300.0, 64 << 20)]['speedup_vs_exact']:.2f}x faster than exact" in md
