"""`ringzip-bench kernels`: every kernel column is timed (the feedback pass included), leaves the
inputs it restores untouched, and the table names each column."""
from ringzip.bench.kernels import format_table, run_kernel_bench


def test_kernel_bench_rows_and_table():
    rows = run_kernel_bench([64 << 10], ["q4", "topk:0.01", "fp16"], iters=2, warmup=1, reference=False)
    assert [r["codec"] for r in rows] == ["q4", "topk:0.01", "fp16"]
    for r in rows:
        for k in ("encode", "decode_acc", "decode_add_encode", "feedback"):
            assert r[f"{k}_gbps"] > 0 and r[f"{k}_vs_memcpy"] == r[f"{k}_gbps"] / r["memcpy_gbps"]
    table = format_table(rows)
    assert "| feedback (x memcpy) |" in table and table.count("\n") == 2 + len(rows) - 1
