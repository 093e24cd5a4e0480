"""The simulator against measurement: every layout this machine can emulate, measured with the
collective benchmark on shaped links, then each row replayed (ringzip.bench.simulate).

    python -m ringzip.bench.lab.simcheck measure --out DIR      the measurements (root; ~40 min)
    python -m ringzip.bench.lab.simcheck sites --out DIR        the same on long links (root; ~10 min)
    python -m ringzip.bench.lab.simcheck pack DIR FILE          them as one compact file
    python -m ringzip.bench.lab.simcheck check FILE --kernels K simulate every row; error table

measure: 1 and 2 Gbit/s; one rank per emulated machine with 2, 3, 4 and 6 ranks, and 2 machines of
2 and of 3 ranks (flat and node-aware); per layout three sweeps of float32 all-reduce, named
algorithms only (a row the tuner chose for would not say what to replay): exact over the ring,
fp16 / bf16 / q8 / q4 / q2 / q1 over the ring and sra, topk:0.01 sparse; each at 1-64 MiB (the
validated calls, files m*.json) and at 16 and 256 KiB (the calibration, c*.json). check fits what
the link model cannot know (a message's latency, its overhead at each end, a kernel's and a call's
fixed cost) on the calls below 1 MiB, the codec kernels' speed inside calls on the calls' codec
timers, takes what a byte between the emulated machines costs the host from the sweeps' TCP
probes, and predicts every call from 1 MiB up. It also reports what the measurement's own noise
allows: calls measured twice in a sweep bound the best any prediction can do. K: `ringzip-bench
kernels --json K -b 16K -e 64M` on the same machine (kernel speeds are taken at the call's size: a
64 MiB call runs its kernels out of cache).

sites: 4 emulated machines with one rank each at 1 Gbit/s and a round trip of 20 and 100 ms
(`--net 1gbit,DELAY`), exact, q8 and q4 over the ring and sra at 1 and 64 MiB, and exact and q8 at
64 MiB over two connections per peer at 100 ms; with --link-gbit R the one-connection sweeps with
the link's rate given (paced streams). Nothing is fitted on these: check replays them on the
link's rate, its delay, one connection's window from the sweep's single-stream probe, the pool
and the pacing (ringzip.bench.simulate.long_link).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time

LAYOUTS = ((2, 1), (3, 1), (4, 1), (6, 1), (2, 2), (2, 3))  # machines x ranks per machine
RATES = ("1gbit", "2gbit")
SWEEPS = (("none", "ring"), ("fp16,bf16,q8,q4,q2,q1", "ring,sra"), ("topk:0.01", "sparse"))


# The validated sizes, and the smaller calls the costs the model cannot know are fitted on.
SIZES = {"m": ("1M", "64M", "4"), "c": ("16K", "256K", "16")}


def measure(out: str, layouts=LAYOUTS, rates=RATES, iters: int = 30, min_iters: int = 5) -> None:
    os.makedirs(out, exist_ok=True)
    for rate in rates:
        for machines, per in layouts:
            for i, (codecs, algos) in enumerate(SWEEPS):
                for kind, (begin, end, factor) in SIZES.items():
                    path = os.path.join(out, f"{kind}{machines}x{per}_{rate}_{i}.json")
                    if os.path.exists(path):
                        continue
                    cmd = [sys.executable, "-m", "ringzip.bench", "collective", "--backend", "ringzip",
                           "--nodes", str(machines), "--nproc-per-node", str(per), "--net", rate,
                           "-b", begin, "-e", end, "-f", factor, "--codec", codecs, "--algorithm", algos,
                           "--iters", str(iters), "--min-iters", str(min_iters), "--warmup", "2",
                           "--time-budget", "1.0", "--json", path, "-q"]
                    if per > 1:
                        cmd += ["--hierarchy", "flat,node"]
                    t = time.time()
                    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                    print(f"{os.path.basename(path)}: {time.time() - t:.0f} s", flush=True)


HEADER_KEYS = ("date", "cpu", "command", "argv", "nodes", "nproc_per_node", "link_gbit", "tcp_goodput_gbit",
               "tcp_cpu_ns_per_byte", "delay_ms", "tcp_stream_gbit")
ROW_KEYS = ("size_bytes", "count", "codec", "algorithm", "hierarchy", "nproc", "iters", "time_us", "time_us_min",
            "codec_share", "model_params")


# (one-way delay, connections per peer, sizes, codecs): the pool's sweep at 64 MiB, where a window
# bounds the ring.
SITE_SWEEPS = (("10ms", 1, "1M", "none,q8,q4"), ("50ms", 1, "1M", "none,q8,q4"), ("50ms", 2, "64M", "none,q8"))


def measure_sites(out: str, sweeps=SITE_SWEEPS, iters: int = 20, min_iters: int = 3, link_gbit: float = 0) -> None:
    """Three warm-up calls a row, and timed calls for three seconds (at least min_iters): the replay
    knows connections whose windows have grown, which a long link's first calls have not. With
    link_gbit, the link's rate given (Options.link_gbit: paced streams) and one connection per
    peer (the pool the rate asks for among 4 machines at 1 Gbit/s)."""
    os.makedirs(out, exist_ok=True)
    if link_gbit:
        sweeps = [(delay, 1, begin, codecs) for delay, pool, begin, codecs in sweeps if pool == 1]
    for delay, pool, begin, codecs in sweeps:
        path = os.path.join(out, f"m4x1_1gbit_{delay}" + (f"_pool{pool}" if pool > 1 else "") +
                            ("_paced" if link_gbit else "") + ".json")
        if os.path.exists(path):
            continue
        cmd = [sys.executable, "-m", "ringzip.bench", "collective", "--backend", "ringzip", "-n", "4",
               "--net", f"1gbit,{delay}", "-b", begin, "-e", "64M", "-f", "64", "--codec", codecs,
               "--algorithm", "ring,sra", "--iters", str(iters), "--min-iters", str(min_iters), "--warmup", "3",
               "--time-budget", "3.0", "--json", path, "-q", "--ropt", f"connections={pool}"]
        if link_gbit:
            cmd += ["--ropt", f"link_gbit={link_gbit:g}"]
        t = time.time()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        print(f"{os.path.basename(path)}: {time.time() - t:.0f} s", flush=True)


def pack(directory: str) -> list[dict]:
    """The measured sweeps of DIR, each as its header's and rows' fields the check reads."""
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "[mc][0-9]*.json"))):
        with open(path) as f:
            d = json.load(f)
        h = {k: d["header"].get(k) for k in HEADER_KEYS}
        h["command"] = (h["command"] or "").replace(os.path.join(os.path.abspath(directory), ""), "")  # DIR's files by name
        h["argv"] = [a.replace(os.path.join(os.path.abspath(directory), ""), "") for a in h["argv"] or []]
        h["topology"] = {k: {"node_of": v.get("node_of"), "node_aware": v.get("node_aware"), "transport": v.get("transport")}
                         for k, v in d["header"].get("topology", {}).items()}
        out.append({"header": h, "results": [{k: r.get(k) for k in ROW_KEYS} for r in d["results"]
                                             if r["backend"] == "ringzip" and not r.get("error")]})
    return out


def rows_of(path: str) -> list[tuple[dict, dict]]:
    """(header, row) of every measured ringzip row: from a directory of sweeps or a packed file."""
    sweeps = pack(path) if os.path.isdir(path) else json.load(open(path))
    return [(s["header"], r) for s in sweeps for r in s["results"]]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", required=True)
    m.add_argument("--iters", type=int, default=30, help="timed calls per row at most (1.0 s a row sizes it)")
    m.add_argument("--min-iters", type=int, default=5, help="timed calls per row at least")
    st = sub.add_parser("sites", help="the long-link sweeps")
    st.add_argument("--out", required=True)
    st.add_argument("--iters", type=int, default=20, help="timed calls per row at most (3 s a row sizes it)")
    st.add_argument("--link-gbit", type=float, default=0.0,
                    help="give the link's rate (Options.link_gbit: paced streams); the two one-connection sweeps")
    k = sub.add_parser("pack", help="DIR's sweeps as one compact JSON file (what check reads)")
    k.add_argument("dir")
    k.add_argument("out")
    c = sub.add_parser("check")
    c.add_argument("dir", help="the measurements: measure's DIR or pack's file")
    c.add_argument("--kernels", required=True, help="ringzip-bench kernels --json output of this machine")
    c.add_argument("--json", help="write the validation here")
    c.add_argument("--table", help="write the markdown table here")
    a = p.parse_args(argv)
    if a.cmd == "measure":
        measure(a.out, iters=a.iters, min_iters=a.min_iters)
    elif a.cmd == "sites":
        measure_sites(a.out, iters=a.iters, link_gbit=a.link_gbit)
    elif a.cmd == "pack":
        with open(a.out, "w") as f:
            json.dump(pack(a.dir), f, separators=(",", ":"))
    else:
        from .. import simulate

        # The emulated machines are namespaces of this host: their ranks' kernels share its cores.
        simulate.validate_main(rows_of(a.dir), a.kernels, a.json, a.table,
                               " ".join(["python -m ringzip.bench.lab.simcheck", *(argv or sys.argv[1:])]),
                               cores=os.cpu_count())


if __name__ == "__main__":
    main()
