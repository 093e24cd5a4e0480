"""ringzip at the scale users train at, by replaying recorded schedules (ringzip.bench.simulate).

    python -m ringzip.bench.lab.scale_sim planner --out bench/results/scale_planner
        the cost model against the simulator at 64-1,024 ranks, one rank per machine: every
        dense algorithm and the compressed ones, 64 KiB-256 MiB, links of 25 and 400 Gbit/s
    python -m ringzip.bench.lab.scale_sim tables --out bench/results/scale_tables
        8 GPUs per machine x 2, 16, 128 machines, NICs of 25, 100, 400 Gbit/s, 1-256 MiB: exact,
        bf16, q8, q4, q2, top-k 1 %, flat and node-aware, the planner's choice against the best

Each writes OUT.md and OUT.json. Schedules are recorded once per rank count and algorithm, over
the loopback transport with one bucket (512 elements) per rank's part (exact: one element; top-k:
16), and replayed at every size
stretched from it (every byte and element count times the ratio): exact for the messages' number
and pattern, approximate where a larger call would cut its parts into more pipelining segments.
GPU kernels: their speeds in bench/results/gpu_kernels_h200.json, 4 us per launch. Links: 10 us
per message between machines; inside a machine 300 GB/s per GPU and direction, 3 us.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

from .. import simulate as S
from ..common import default_results_dir

# The checkout's record (an installed package reads it from the working directory's bench/results).
H200 = default_results_dir() / "gpu_kernels_h200.json"
MIB = 1 << 20
LATENCY_US, INTRA_GBYTE, INTRA_LATENCY_US = 10.0, 300.0, 3.0


class Traces:
    """One recording per (ranks, codec, algorithm, nodes): one bucket per rank's part for a codec,
    16 elements for top-k, one for exact calls (the direct exchange copies (n-1) buffers per rank)."""

    def __init__(self):
        self.cache = {}

    def get(self, n, codec, algo, nodes=None):
        key = (n, codec, algo, tuple(nodes) if nodes else None)
        # top-k's all-gather holds every rank's payload on every rank: n^2 payloads in one process
        count = n * (1 if codec == "none" else 16 if codec.startswith("topk") else 512)
        if key not in self.cache:
            t = time.time()
            self.cache[key] = S.record(n, count, codec, algo, nodes)
            print(f"  recorded {n} ranks {codec}/{algo}{' node-aware' if nodes else ''}: "
                  f"{self.cache[key].event_count()} events, {time.time() - t:.0f} s", file=sys.stderr, flush=True)
        return self.cache[key], count

    def time(self, n, codec, algo, size, links, kernels, nodes=None):
        tr, count = self.get(n, codec, algo, nodes)
        return S.replay(tr, links, kernels, scale=size / 4 / count)["time"]


def gpu_kernels(codec):
    return S.gpu_kernels(S.load_json(str(H200)), codec)


def _speed(k: S.Kernels) -> tuple[float, float, float]:
    """The cost model's (encode, decode, feedback) seconds per input byte of these kernels."""
    g = k.gbps
    return 1 / (g["encode"] * 1e9), 1 / (g["decode_accumulate"] * 1e9), 1 / (g["feedback"] * 1e9)


# ---- the planner against the simulator ----------------------------------------------------------

PLANNER_RANKS = (64, 256, 1024)
PLANNER_SIZES = (64 << 10, MIB, 16 * MIB, 256 * MIB)
PLANNER_LINKS = (25, 400)
# Not the tree: its pipelining segments (S/8, 256 KiB-1 MiB) depend on the size, which a stretched
# recording keeps at its own.
PLANNER_WAYS = [("none", a) for a in ("ring", "direct", "star", "rd", "hd")] + \
               [("q4", "sra"), ("q4", "ring"), ("q8", "sra"), ("topk:0.01", "sparse")]


def planner(out: str, ranks=PLANNER_RANKS, sizes=PLANNER_SIZES, links=PLANNER_LINKS, ways=PLANNER_WAYS) -> dict:
    from ringzip import _C

    traces, rows = Traces(), []
    for n in ranks:
        for codec, algo in ways:
            if algo == "direct" and n > 256:
                continue  # n^2 messages of up to 260 events each: 272 M events at 1,024 ranks
            kern = gpu_kernels(codec)
            reduce = 1 / (kern.gbps["copy"] * 1e9)
            for gbit in links:
                inv_bw = 8 / (gbit * 1e9)
                l = S.Links.layout(n, 1, net_gbit=gbit, net_latency_us=LATENCY_US)
                for size in sizes:
                    sim = traces.time(n, codec, algo, size, l, kern)
                    if codec == "none":
                        est = _C.cost.predict_dense(algo, size, n, LATENCY_US * 1e-6, inv_bw, reduce)
                    else:
                        est = _C.cost.predict(codec, algo, size, n, LATENCY_US * 1e-6, inv_bw, reduce, _speed(kern),
                                              S.default_feedback(codec))
                    rows.append({"ranks": n, "link_gbit": gbit, "size_bytes": size, "codec": codec, "algorithm": algo,
                                 "simulated_s": sim, "model_s": est["total"], "error": est["total"] / sim - 1})
            traces.cache.clear()  # 10 M events a trace at 1,024 ranks: one at a time
    errs = [abs(r["error"]) for r in rows]
    result = {"median_error": statistics.median(errs), "worst_error": max(errs), "rows": rows}
    _write(out, "planner", result, _planner_md(result))
    return result


def _planner_md(res) -> str:
    lines = [f"Median |model / simulated - 1| {100 * res['median_error']:.1f} %, worst {100 * res['worst_error']:.0f} % "
             f"({len(res['rows'])} rows).", "",
             "| ranks | link | size | way | simulated ms | model ms | model / simulated |", "|---:|---:|---:|---|---:|---:|---:|"]
    for r in res["rows"]:
        lines.append(f"| {r['ranks']} | {r['link_gbit']} Gbit/s | {_size(r['size_bytes'])} | {r['codec']}/{r['algorithm']} | "
                     f"{r['simulated_s'] * 1e3:.3f} | {r['model_s'] * 1e3:.3f} | {r['model_s'] / r['simulated_s']:.2f} |")
    return "\n".join(lines)


# ---- predictions where users train --------------------------------------------------------------

TABLE_MACHINES = (2, 16, 128)
TABLE_PER = 8
TABLE_LINKS = (25, 100, 400)
TABLE_SIZES = (MIB, 16 * MIB, 256 * MIB)
TABLE_CODECS = (("none", "ring"), ("bf16", "sra"), ("q8", "sra"), ("q4", "sra"), ("q2", "sra"),
                ("topk:0.01", "sparse"))


def tables(out: str, machines=TABLE_MACHINES, links=TABLE_LINKS, sizes=TABLE_SIZES, codecs=TABLE_CODECS) -> dict:
    traces, rows = Traces(), []
    for m in machines:
        n = m * TABLE_PER
        node_of = [r // TABLE_PER for r in range(n)]
        for codec, algo in codecs:
            kern = gpu_kernels(codec)
            for gbit in links:
                l = S.Links(node_of, gbit, LATENCY_US, INTRA_GBYTE, INTRA_LATENCY_US)
                for size in sizes:
                    flat = traces.time(n, codec, algo, size, l, kern)
                    node = traces.time(n, codec, algo, size, l, kern, nodes=node_of)
                    rows.append({"machines": m, "per_machine": TABLE_PER, "link_gbit": gbit, "size_bytes": size,
                                 "codec": codec, "algorithm": algo, "flat_s": flat, "node_s": node,
                                 "planner": _planner_hierarchy(codec, size)})
            traces.cache.clear()
    exact = {(r["machines"], r["link_gbit"], r["size_bytes"]): min(r["flat_s"], r["node_s"])
             for r in rows if r["codec"] == "none"}
    for r in rows:
        best = min(r["flat_s"], r["node_s"])
        chosen = r["node_s"] if r["planner"] == "node" else r["flat_s"]
        r["planner_vs_best"] = chosen / best
        r["speedup_vs_exact"] = exact[(r["machines"], r["link_gbit"], r["size_bytes"])] / best
    result = {"rows": rows}
    _write(out, "tables", result, _tables_md(result))
    return result


def _planner_hierarchy(codec: str, size: int) -> str:
    """plan/planner.cc node_aware() with hierarchy='auto' on a suitable layout: node-aware for
    every compressed call and for exact calls of 1 MiB and more."""
    return "node" if codec != "none" or size >= MIB else "flat"


def _tables_md(res) -> str:
    lines = []
    for m in sorted({r["machines"] for r in res["rows"]}):
        lines += ["", f"### {m} machines x {TABLE_PER} GPUs ({m * TABLE_PER} ranks)", "",
                  "| NIC | size | codec | flat ms | node-aware ms | planner | planner / best | best vs exact's best |",
                  "|---:|---:|---|---:|---:|---|---:|---:|"]
        for r in res["rows"]:
            if r["machines"] == m:
                lines.append(f"| {r['link_gbit']} Gbit/s | {_size(r['size_bytes'])} | {r['codec']} | {r['flat_s'] * 1e3:.2f} | "
                             f"{r['node_s'] * 1e3:.2f} | {r['planner']} | {r['planner_vs_best']:.2f} | "
                             f"{r['speedup_vs_exact']:.2f}x |")
    return "\n".join(lines)


# ---- common ---------------------------------------------------------------------------------------

def _size(b: int) -> str:
    return f"{b >> 20} MiB" if b >= MIB else f"{b >> 10} KiB"


def _write(out: str, what: str, result: dict, body: str) -> None:
    from ..common import cpu_model

    head = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "cpu": cpu_model(),
            "command": f"python -m ringzip.bench.lab.scale_sim {what} --out {out}",
            "gpu_kernels": "bench/results/" + H200.name, "latency_us": LATENCY_US, "intra_gbyte": INTRA_GBYTE,
            "intra_latency_us": INTRA_LATENCY_US}
    Path(out + ".json").write_text(json.dumps({"header": head, what: result}, indent=1))
    Path(out + ".md").write_text(f"# {what}\n\n{head['date']}, recorded and replayed on {head['cpu']}, "
                                 f"`{head['command']}`; GPU kernel speeds of {head['gpu_kernels']}, "
                                 f"{LATENCY_US:g} us per message between machines.\n{body}\n")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("planner", "tables"))
    p.add_argument("--out", required=True, help="path without extension")
    a = p.parse_args(argv)
    (planner if a.what == "planner" else tables)(a.out)


if __name__ == "__main__":
    main()
