"""The on-paper model of flat vs node-aware all-reduce (ringzip.bench.lab.scale_model, docs table)."""
from ringzip.bench.lab import scale_model as M


def test_model_orders_what_it_should():
    rows = {(r["cluster"], r["codec"]): r for r in M.table()}
    assert len(rows) == len(M.CLUSTERS) * len(M.CODECS)
    for c in M.CLUSTERS:
        exact, q4 = rows[(c.name, "exact")], rows[(c.name, "q4")]
        # compressed traffic through the NIC drops by about the ranks per node; exact gains less
        assert q4["speedup"] > exact["speedup"] > 1.0, (c.name, q4["speedup"], exact["speedup"])
        assert q4["node_ms"] < exact["node_ms"]


def test_flat_exact_ring_is_the_textbook_time():
    c = M.Cluster("t", 2, 2, 8.0, 1e9, a_net_us=0.0, a_in_us=0.0)
    size = 1e9
    assert abs(M._time(c, size, 1.0, False) - 2 * 3 / 4 * size / 1e9) < 1e-9  # 2(n-1)/n S / B, B = 1 GB/s
