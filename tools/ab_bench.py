"""Old build against new build, side by side: runs `ringzip-bench collective` with each build in
turn (alternating, the order flipped every round, so drift of a shared machine hits both alike)
and prints, per size and configuration, the median time of each build and new / old.

  python tools/ab_bench.py --old /path/to/old/python --new python --rounds 6 -- -n 4 -b 16M -e 64M

--old / --new are the PYTHONPATH entries that hold each build's `ringzip` package; everything
after `--` goes to `ringzip-bench collective`. Gloo rows run in both builds (same code): their
ratio shows the machine's own drift between the two halves of a round.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run_once(pythonpath: str, bench_args: list[str], out: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(pythonpath))
    cmd = [sys.executable, "-m", "ringzip.bench", "collective", "-q", "--json", out] + bench_args
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        rows = json.load(f)["results"]
    return {(r["size_bytes"], r["backend"], r["codec"]): r["time_us"] for r in rows if r.get("time_us")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--json", help="write every time of every round here")
    ap.add_argument("bench_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    bench_args = [x for x in a.bench_args if x != "--"]
    times: dict[str, dict] = {"old": {}, "new": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.rounds):
            order = ("old", "new") if i % 2 == 0 else ("new", "old")
            for build in order:
                got = run_once(getattr(a, build), bench_args, os.path.join(tmp, f"{build}{i}.json"))
                for k, t in got.items():
                    times[build].setdefault(k, []).append(t)
            print(f"round {i + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    print(f"# cpu: {cpu}, {os.cpu_count()} logical cores; {a.rounds} rounds; bench args: {' '.join(bench_args)}")
    print("| size | config | old median (ms) | new median (ms) | new/old | per-round new/old |")
    print("|---:|---|---:|---:|---:|---|")
    for k in sorted(times["old"], key=lambda k: (k[0], k[1] != "gloo", k[2])):
        old, new = times["old"][k], times["new"].get(k, [])
        if not new:
            continue
        mo, mn = statistics.median(old), statistics.median(new)
        per = " ".join(f"{n / o:.2f}" for o, n in zip(old, new))
        name = "gloo" if k[1] == "gloo" else k[2]
        print(f"| {k[0] >> 20} MiB | {name} | {mo / 1e3:.1f} | {mn / 1e3:.1f} | {mn / mo:.3f} | {per} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({b: {f"{k[0]}:{k[1]}:{k[2]}": v for k, v in t.items()} for b, t in times.items()}, f, indent=1)


if __name__ == "__main__":
    main()
