"""DiLoCo across emulated sites with replicas that die and come back (root).

    python -m ringzip.bench.lab.diloco_sites --sites 4 --net 1gbit,50ms --minutes 10

Every site is an emulated machine (its own network namespace, hostname and /etc/hosts;
ringzip.bench.netem, the wide-area link with its round trip) running one replica of
examples/diloco.py (torchft's DiLoCo, the pseudo-gradients as --codec through
ringzip.torchft.ProcessGroupRingzip); torchft's Lighthouse runs on site 0. Every --kill-every
seconds (drawn uniformly from the range) one replica, drawn at random, is SIGKILLed and started
again. After --minutes every process is stopped. Reported: outer steps committed, kills, the
longest time without a commit, and whether the replicas held the same parameters after every
commit (each replica logs a digest of its parameters per commit); nothing may be left in
/dev/shm. Writes <out-dir>/diloco_sites.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..common import cpu_model, log, parse_net, python_path_env, results_dir, shm_segments

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "diloco.py"
LIGHTHOUSE_PORT = 29510


def parse_range(text: str) -> tuple[float, float]:
    lo, _, hi = text.partition("-")
    return float(lo), float(hi or lo)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sites", type=int, default=4)
    p.add_argument("--net", default="1gbit,50ms", help="RATE[,DELAY[,LOSS]] of every site's link")
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--kill-every", default="30-60", help="seconds between kills, drawn from this range; 0: none")
    p.add_argument("--outage", help="SITE@FROM-TO: kill that site FROM seconds in, start it again at TO")
    p.add_argument("--targets", default="", help="val_bpc targets: report when the run first reached each")
    p.add_argument("--stem", default="diloco_sites")
    p.add_argument("--codec", default="q4")
    p.add_argument("--sync-every", type=int, default=20)
    p.add_argument("--timeout", type=float, default=30, help="a step with a dead peer fails after this")
    p.add_argument("--seed", type=int, default=0, help="of the kill schedule")
    p.add_argument("--out-dir", help="default <repo>/bench/results")
    args = p.parse_args(argv)
    if not EXAMPLE.exists():
        raise SystemExit(f"{EXAMPLE} not found: run from a source checkout")
    from ..netem import NetEnv, check_prereqs, wanlink_path

    spec = parse_net(args.net)
    check_prereqs()
    if spec.delay > 0 or spec.loss > 0:
        wanlink_path()
    rng = random.Random(args.seed)
    lo, hi = parse_range(args.kill_every)
    outage = None
    if args.outage:
        site, _, window = args.outage.partition("@")
        outage = (int(site), *parse_range(window))
    kills, procs, pids = [], {}, set()
    with tempfile.TemporaryDirectory(prefix="ringzip-diloco-") as tmp, \
            NetEnv(args.sites, spec.rate, spec.delay, log=log, hostnames=True, loss=spec.loss, link=spec.link) as net:
        out = f"{tmp}/steps.jsonl"
        env = dict(os.environ, PYTHONPATH=python_path_env(), RUST_LOG="warn", OMP_NUM_THREADS="1")
        lighthouse = subprocess.Popen(
            net.exec_prefix(0) + [sys.executable, "-c",
                                  "import sys; from torchft.coordination import LighthouseServer; "
                                  f"s = LighthouseServer(bind='[::]:{LIGHTHOUSE_PORT}', min_replicas=2, "
                                  "join_timeout_ms=1000); sys.stdin.read(); s.shutdown()"],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def start(r):
            cmd = net.exec_prefix(r) + [
                sys.executable, str(EXAMPLE), "--replica", str(r), "--replicas", str(args.sites),
                "--lighthouse", f"http://{net.addr(0)}:{LIGHTHOUSE_PORT}", "--host", net.addr(r), "--out", out,
                "--codec", args.codec, "--sync-every", str(args.sync_every), "--outer-steps", str(10 ** 9),
                "--min-replicas", "2", "--timeout", str(args.timeout)]
            with open(f"{tmp}/site{r}.log", "ab") as f:
                procs[r] = subprocess.Popen(cmd, env=dict(env, GLOO_SOCKET_IFNAME=net.ifname(r)), stdout=f,
                                            stderr=subprocess.STDOUT, start_new_session=True)
            pids.add(procs[r].pid)

        try:
            time.sleep(1.0)
            for r in range(args.sites):
                start(r)
            began = time.time()
            next_kill = began + rng.uniform(lo, hi) if hi > 0 else float("inf")
            down = set()
            while time.time() - began < args.minutes * 60:
                time.sleep(0.5)
                now = time.time() - began
                if outage and outage[0] not in down and outage[1] <= now < outage[2]:
                    os.killpg(procs[outage[0]].pid, signal.SIGKILL)
                    procs[outage[0]].wait()
                    down.add(outage[0])
                    kills.append({"site": outage[0], "at_s": round(now, 1), "back_s": outage[2]})
                    log(f"[diloco_sites] site {outage[0]} down at {now:.1f} s until {outage[2]:g} s")
                if outage and outage[0] in down and now >= outage[2]:
                    down.discard(outage[0])
                    start(outage[0])
                    outage = None
                for r, proc in procs.items():
                    if r in down:
                        continue
                    if proc.poll() is not None:
                        raise SystemExit(f"site {r} exited by itself ({proc.returncode}):\n"
                                         + Path(f"{tmp}/site{r}.log").read_text()[-3000:])
                if time.time() >= next_kill:
                    r = rng.randrange(args.sites)
                    os.killpg(procs[r].pid, signal.SIGKILL)
                    procs[r].wait()
                    kills.append({"site": r, "at_s": round(time.time() - began, 1)})
                    log(f"[diloco_sites] killed site {r} at {kills[-1]['at_s']} s; starting it again")
                    start(r)
                    next_kill = time.time() + rng.uniform(lo, hi)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            lighthouse.stdin.close()
            lighthouse.wait(timeout=30)
        rows = [json.loads(line) for line in open(out)] if os.path.exists(out) else []
        ended = time.time()
    return report(args, rows, kills, began, ended, shm_segments(pids))


def reached(rows, target: float, began: float):
    """Seconds from the start to the first commit whose evaluation reached `target` (None: never)."""
    t = min((r["t"] for r in rows if r["val_bpc"] <= target), default=None)
    return None if t is None else round(t - began, 1)


def report(args, rows, kills, began, ended, left) -> int:
    by_step: dict[int, set] = {}
    for r in rows:
        by_step.setdefault(r["step"], set()).add(r["digest"])
    split = sorted(s for s, d in by_step.items() if len(d) > 1)
    first_commit = {}
    for r in rows:
        first_commit[r["step"]] = min(first_commit.get(r["step"], r["t"]), r["t"])
    times = [began] + sorted(first_commit.values()) + [ended]
    longest = max(b - a for a, b in zip(times, times[1:]))
    res = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu_model(), "sites": args.sites, "net": args.net,
           "codec": args.codec, "sync_every": args.sync_every, "minutes": args.minutes, "kills": kills,
           "outer_steps": len(by_step), "steps_with_replicas_differing": split,
           "longest_without_commit_s": round(longest, 1), "shm_left": left,
           "participants": sorted({r["participants"] for r in rows}),
           "last_val_bpc": rows[-1]["val_bpc"] if rows else None,
           "time_to_target_s": {t: reached(rows, float(t), began) for t in filter(None, args.targets.split(","))},
           "curve": [[round(first_commit[s] - began, 1), s, min(r["val_bpc"] for r in rows if r["step"] == s)]
                     for s in sorted(first_commit)],
           "command": "python -m ringzip.bench.lab.diloco_sites " + " ".join(sys.argv[1:])}
    out_dir = results_dir(args.out_dir)
    (out_dir / f"{args.stem}.json").write_text(json.dumps(res, indent=1))
    ok = bool(by_step) and not split and not left
    md = [f"# DiLoCo across {args.sites} emulated sites: {args.codec}\n",
          f"{res['date']}, {res['cpu']}; command: `{res['command']}`\n",
          f"- link: {args.net} per site; codec {args.codec}, {args.sync_every} inner steps per outer step",
          f"- {len(kills)} kills in {args.minutes:g} minutes: " + ", ".join(
              f"site {k['site']} at {k['at_s']} s" + (f", back at {k['back_s']:g} s" if "back_s" in k else "")
              for k in kills),
          f"- {len(by_step)} outer steps committed; replicas' parameters identical after every one: "
          f"{'yes' if not split else 'no, after steps ' + str(split)}",
          f"- longest time without a commit: {res['longest_without_commit_s']} s; participants per step: "
          f"{res['participants']}",
          f"- /dev/shm left: {left or 'nothing'}; last val_bpc {res['last_val_bpc']}"]
    if res["time_to_target_s"]:
        md.append("- time to val_bpc: " + ", ".join(f"{t}: {v} s" for t, v in res["time_to_target_s"].items()))
    (out_dir / f"{args.stem}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
