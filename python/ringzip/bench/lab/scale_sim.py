"""ringzip at the scale users train at, by replaying recorded schedules (ringzip.bench.simulate).

    python -m ringzip.bench.lab.scale_sim planner --out bench/results/scale_planner
        the cost model against the simulator at 64-1,024 ranks, one rank per machine: every
        dense algorithm and the compressed ones, 64 KiB-256 MiB, links of 25 and 400 Gbit/s
    python -m ringzip.bench.lab.scale_sim tables --out bench/results/scale_tables
        8 GPUs per machine x 2, 16, 128 machines, NICs of 25, 100, 400 Gbit/s, 1-256 MiB: exact,
        bf16, q8, q4, q2, top-k 1 %, flat and node-aware, the planner's choice against the best;
        one machine of 8 GPUs; published figures of other systems beside the nearest rows

Each writes OUT.md and OUT.json. Schedules are recorded once per rank count and algorithm, over
the loopback transport with one bucket (512 elements) per rank's part (exact: one element; top-k:
16), and replayed at every size
stretched from it (every byte and element count times the ratio): exact for the messages' number
and pattern, approximate where a larger call would cut its parts into more pipelining segments.
GPU kernels: their speeds in bench/results/gpu_kernels_h200.json, 4 us per launch. Links: 10 us
per message between machines, half of it the sending thread's (every send pays it in turn) and
half in flight; inside a machine 300 GB/s per GPU and direction, 3 us.
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
LAUNCH_US = 4.0  # a GPU kernel's launch
SEND_US = LATENCY_US / 2  # of a message's latency, what the sender pays (the cost model's alpha/2 per send)


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
    return S.gpu_kernels(S.load_json(str(H200)), codec, launch_us=LAUNCH_US)


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
            reduce, launch = 1 / (kern.gbps["copy"] * 1e9), kern.launch_us * 1e-6
            for gbit in links:
                inv_bw = 8 / (gbit * 1e9)
                l = S.Links.layout(n, 1, net_gbit=gbit, net_latency_us=LATENCY_US - SEND_US, send_us=SEND_US)
                for size in sizes:
                    sim = traces.time(n, codec, algo, size, l, kern)
                    if codec == "none":
                        est = _C.cost.predict_dense(algo, size, n, LATENCY_US * 1e-6, inv_bw, reduce, launch=launch)
                    else:  # top-k: one block, as recorded
                        est = _C.cost.predict(codec, algo, size, n, LATENCY_US * 1e-6, inv_bw, reduce, _speed(kern),
                                              S.default_feedback(codec), launch=launch, topk_block=0)
                    rows.append({"ranks": n, "link_gbit": gbit, "size_bytes": size, "codec": codec, "algorithm": algo,
                                 "simulated_s": sim, "model_s": est["total"], "error": est["total"] / sim - 1,
                                 # one segment, as in the stretched recording; else two different schedules
                                 "compared": est["segments"] == 1})
            traces.cache.clear()  # 10 M events a trace at 1,024 ranks: one at a time
    errs = [abs(r["error"]) for r in rows if r["compared"]]
    result = {"median_error": statistics.median(errs), "worst_error": max(errs), "compared": len(errs), "rows": rows}
    _write(out, "planner", result, _planner_md(result))
    return result


def _planner_md(res) -> str:
    left = len(res["rows"]) - res["compared"]
    lines = [f"Median |model / simulated - 1| {100 * res['median_error']:.1f} %, worst {100 * res['worst_error']:.0f} % "
             f"({res['compared']} rows; {left} rows marked * are left out: the call cuts its parts into more "
             "pipelining segments than the stretched recording, so model and replay price different schedules).", "",
             "| ranks | link | size | way | simulated ms | model ms | model / simulated |", "|---:|---:|---:|---|---:|---:|---:|"]
    for r in res["rows"]:
        mark = "" if r["compared"] else " *"
        lines.append(f"| {r['ranks']} | {r['link_gbit']} Gbit/s | {_size(r['size_bytes'])} | {r['codec']}/{r['algorithm']} | "
                     f"{r['simulated_s'] * 1e3:.3f} | {r['model_s'] * 1e3:.3f} | {r['model_s'] / r['simulated_s']:.2f}{mark} |")
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
                l = S.Links(node_of, gbit, LATENCY_US - SEND_US, INTRA_GBYTE, INTRA_LATENCY_US, send_us=SEND_US)
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
    result = {"rows": rows, "one_machine": one_machine(traces), "published": PUBLISHED}
    _write(out, "tables", result, _tables_md(result))
    return result


# One machine of 8 GPUs, where QuickReduce and CGX report: links between its GPUs of 300 GB/s per
# GPU and direction (NVLink / Infinity Fabric class) and of 12 GB/s (PCIe through the host).
ONE_MACHINE_GBYTE = (300.0, 12.0)
ONE_MACHINE_SIZES = (16 * MIB, 64 * MIB)
ONE_MACHINE_CODECS = (("none", "ring"), ("q8", "sra"), ("q4", "sra"))


def one_machine(traces: "Traces") -> list[dict]:
    rows = []
    for codec, algo in ONE_MACHINE_CODECS:
        kern = gpu_kernels(codec)
        for gbyte in ONE_MACHINE_GBYTE:
            l = S.Links([0] * TABLE_PER, 100.0, LATENCY_US - SEND_US, gbyte, INTRA_LATENCY_US, send_us=SEND_US)
            for size in ONE_MACHINE_SIZES:
                rows.append({"gpus": TABLE_PER, "intra_gbyte": gbyte, "size_bytes": size, "codec": codec,
                             "algorithm": algo, "time_s": traces.time(TABLE_PER, codec, algo, size, l, kern)})
    exact = {(r["intra_gbyte"], r["size_bytes"]): r["time_s"] for r in rows if r["codec"] == "none"}
    for r in rows:
        r["speedup_vs_exact"] = exact[(r["intra_gbyte"], r["size_bytes"])] / r["time_s"]
    return rows


# What the compression systems users compare with report, as published (paraphrased), and where
# the simulated rows above come closest. "collective": the all-reduce alone; "end to end":
# training (or inference) throughput, of which gradient traffic is one part.
PUBLISHED = [
    {"system": "ZeRO++ qgZ (with qwZ, hpZ)", "bits": "int4 gradients, block-quantized, hierarchical all-to-all",
     "where": "384 V100 GPUs; 100 and 400 Gbit/s InfiniBand between nodes",
     "reported": "up to 2.16x (about 2x on average) over ZeRO-3 at 100 Gbit/s; +24-36 % at 400 Gbit/s",
     "kind": "end to end (all three ZeRO++ parts together)",
     "source": "Wang et al., ZeRO++: Extremely Efficient Collective Communication for Giant Model Training, "
               "arXiv 2306.10209 (2023); DeepSpeed ZeRO++ blog",
     "nearest": ("q4", 16, (100, 400), 256 * MIB)},
    {"system": "CGX", "bits": "4 bits, buckets of 1024, stochastic rounding optional",
     "where": "8 RTX 3090 in one server (links between GPUs through PCIe)",
     "reported": "up to 2x training throughput over NCCL on that server (the paper: up to 3x; an order of "
                 "magnitude across machines)",
     "kind": "end to end", "source": "Markov, Ramezanikebrya, Alistarh, CGX, Middleware 2022; pytorch-cgx.github.io",
     "nearest": ("q4", 1, (12.0,), 64 * MIB)},
    {"system": "THC", "bits": "homomorphic quantization after a randomized Hadamard transform",
     "where": "parameter server or a switch aggregating in the network (testbed not restated here)",
     "reported": "time to accuracy 1.40-1.47x with in-network aggregation, 1.28-1.33x with a software parameter "
                 "server, against other compression systems",
     "kind": "end to end", "source": "Li et al., THC, USENIX NSDI 2024", "nearest": None},
    {"system": "QuickReduce", "bits": "int4 / int6 / int8, blocks of 32, inside a two-shot all-reduce",
     "where": "one machine of 2, 4 or 8 MI300X",
     "reported": "q4 over RCCL at 64 MB: 3.13x on 2 GPUs, 2.03x on 4, 1.56x on 8 (1.79x at 16 MB on 8)",
     "kind": "collective", "source": "mk1-project/quickreduce README; AMD ROCm blog, QuickReduce (2025)",
     "nearest": ("q4", 1, (300.0,), 64 * MIB)},
]


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
    lines += ["", f"### One machine x {TABLE_PER} GPUs", "",
              "| between GPUs | size | codec | ms | vs exact |", "|---:|---:|---|---:|---:|"]
    for r in res["one_machine"]:
        lines.append(f"| {r['intra_gbyte']:g} GB/s | {_size(r['size_bytes'])} | {r['codec']}/{r['algorithm']} | "
                     f"{r['time_s'] * 1e3:.2f} | {r['speedup_vs_exact']:.2f}x |")
    lines += ["", "### Published figures beside these", "",
              "Their baselines are tuned vendor collectives (NCCL, RCCL) or other systems, on their hardware; "
              "ringzip's figures here are simulated against its own exact ring with the H200's kernel speeds. "
              "End-to-end speedups include computation the collective does not.", "",
              "| system | bits | where | reported | kind | ringzip, simulated nearest | source |",
              "|---|---|---|---|---|---|---|"]
    for p in res["published"]:
        lines.append(f"| {p['system']} | {p['bits']} | {p['where']} | {p['reported']} | {p['kind']} | "
                     f"{_nearest(res, p['nearest'])} | {p['source']} |")
    return "\n".join(lines)


def _nearest(res, want) -> str:
    if want is None:
        return "no comparable row (aggregation in the network or at a server: not a ringzip schedule)"
    codec, machines, links, size = want
    if machines == 1:
        got = [r for r in res["one_machine"] if r["codec"] == codec and r["intra_gbyte"] in links and
               r["size_bytes"] == size]
        return "; ".join(f"{codec} {r['speedup_vs_exact']:.2f}x faster than exact, {TABLE_PER} GPUs, {r['intra_gbyte']:g} GB/s "
                         f"between them, {_size(size)} (collective)" for r in got)
    got = [r for r in res["rows"] if r["codec"] == codec and r["machines"] == machines and r["link_gbit"] in links and
           r["size_bytes"] == size]
    return "; ".join(f"{codec} {r['speedup_vs_exact']:.2f}x faster than exact's best, {machines} x {TABLE_PER} GPUs, "
                     f"{r['link_gbit']} Gbit/s, {_size(size)} (collective)" for r in got)


# ---- common ---------------------------------------------------------------------------------------

def _size(b: int) -> str:
    return f"{b >> 20} MiB" if b >= MIB else f"{b >> 10} KiB"


def _write(out: str, what: str, result: dict, body: str) -> None:
    from ..common import cpu_model

    head = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "cpu": cpu_model(),
            "command": f"python -m ringzip.bench.lab.scale_sim {what} --out {out}",
            "gpu_kernels": "bench/results/" + H200.name, "latency_us": LATENCY_US, "intra_gbyte": INTRA_GBYTE,
            "intra_latency_us": INTRA_LATENCY_US, "send_us": SEND_US, "launch_us": LAUNCH_US}
    Path(out + ".json").write_text(json.dumps({"header": head, what: result}, indent=1))
    Path(out + ".md").write_text(f"# {what}\n\n{head['date']}, recorded and replayed on {head['cpu']}, "
                                 f"`{head['command']}`; GPU kernel speeds of {head['gpu_kernels']}, "
                                 f"{LATENCY_US:g} us per message between machines ({SEND_US:g} us of it the "
                                 f"sending thread's), {head['launch_us']:g} us per kernel launch.\n{body}\n")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("planner", "tables"))
    p.add_argument("--out", required=True, help="path without extension")
    a = p.parse_args(argv)
    (planner if a.what == "planner" else tables)(a.out)


if __name__ == "__main__":
    main()
