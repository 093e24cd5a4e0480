"""`ringzip-bench linkcheck`: what the emulated links carry per traffic pattern, before any
collective runs on them (plain TCP from the standard library: no torch, no Gloo, no ringzip).

    ringzip-bench linkcheck --net 1gbit -n 4          ring vs all-to-all, 16 MiB per peer, 5 rounds

Every rank (one network namespace each, ringzip.bench.netem) sends the same bytes, (n-1) x --mib MiB, and
receives as many, all at once, in one of two patterns:
  ring        to its right neighbour only: one flow per direction of every NIC (the exact ring
              all-reduce's pattern);
  all-to-all  --mib MiB to every other rank: n-1 flows per direction of every NIC (the pattern of
              the compressed scatter-reduce-allgather, direct and top-k's all-gather).
A round's efficiency is the bytes one rank sends over (the slowest rank's time x the link rate):
the ceiling any algorithm of that pattern can reach on these links, against which
`collective --net`'s eff column (floor / time) can be read. The patterns alternate, round by
round, so drift on a shared machine hits both alike.
"""
from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import threading
import time

PATTERNS = ("ring", "all-to-all")
PORT = 29498  # netem's goodput probe uses 29499, the ranks' store 29500


def add_arguments(p) -> None:
    p.add_argument("--net", required=True, help="emulated link RATE[,DELAY[,LOSS]][,LINK], e.g. 1gbit (needs root)")
    p.add_argument("-n", "--nproc", type=int, default=4, help="ranks (one namespace each)")
    p.add_argument("--mib", type=float, default=16.0, help="MiB each rank sends to each of its n-1 peers (all-to-all); "
                   "the ring sends (n-1) times this to its neighbour")
    p.add_argument("--repeat", type=int, default=5, help="rounds per pattern")
    p.add_argument("--json", help="write the rounds and medians here")


def run(args) -> int:
    from ..common import cpu_model, log, parse_net
    from ..netem import open_env

    spec = parse_net(args.net)
    rate = spec.rate
    if args.nproc < 2 or args.repeat < 1 or args.mib <= 0:
        raise ValueError("linkcheck needs -n >= 2, --repeat >= 1 and --mib > 0")
    rounds = {p: [] for p in PATTERNS}
    with open_env(args.nproc, spec, log=log) as env:
        for _ in range(args.repeat):
            for pattern in PATTERNS:
                rounds[pattern].append(_round(env, args.nproc, pattern, args.mib, rate))
    med = {p: statistics.median(v) for p, v in rounds.items()}
    print(f"# linkcheck {time.strftime('%Y-%m-%d %H:%M')}; CPU {cpu_model()}; {args.nproc} ranks, --net {args.net}, "
          f"{args.mib:g} MiB per peer, {args.repeat} rounds; efficiency = bytes a rank sends / (slowest rank's time x rate)")
    for p in PATTERNS:
        print(f"{p:>11}: median {med[p]:.3f}  rounds " + " ".join(f"{x:.3f}" for x in rounds[p]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu_model(), "net": args.net, "nproc": args.nproc, "mib_per_peer": args.mib,
                       "rounds": rounds, "median": med}, f, indent=1)
    return 0


def _round(env, n: int, pattern: str, mib: float, rate: float) -> float:
    start = time.time() + 1.0  # every rank listens and connects before it; the clock is shared
    me = [sys.executable, __file__, "rank"]
    addrs = ",".join(env.addr(r) for r in range(n))
    procs = [subprocess.Popen(env.exec_prefix(r) + me + [str(r), pattern, str(mib), str(start), addrs],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(n)]
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError("linkcheck: a round took over 10 minutes") from None
        if p.returncode != 0:
            raise RuntimeError(f"linkcheck rank failed: {err.strip()[-400:]}")
        results.append(json.loads(out))
    slowest = max(x["seconds"] for x in results)
    return results[0]["sent"] * 8 / (slowest * rate)


def _rank(rank: int, pattern: str, mib: float, start: float, addrs: list[str]) -> None:
    """One rank's end: listen, connect, wait for `start`, then send and receive at once."""
    n, addr = len(addrs), addrs.__getitem__
    per_peer = int(mib * 2**20) if pattern == "all-to-all" else int(mib * 2**20) * (n - 1)
    to = [(rank + k) % n for k in range(1, n)] if pattern == "all-to-all" else [(rank + 1) % n]
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((addr(rank), PORT))
    srv.listen(n)
    out = {}
    for p in to:
        for _ in range(200):
            try:
                out[p] = socket.create_connection((addr(p), PORT), timeout=30)
                break
            except OSError:
                time.sleep(0.02)
        else:
            raise SystemExit(f"rank {rank} could not connect to rank {p}")
    ins = [srv.accept()[0] for _ in to]
    chunk, errors = b"\1" * (1 << 20), []

    def send(s):
        left = per_peer
        while left > 0:
            k = min(left, len(chunk))
            s.sendall(chunk[:k])
            left -= k

    def recv(s):
        buf, got = bytearray(1 << 20), 0
        while got < per_peer:
            m = s.recv_into(buf)
            if m == 0:
                errors.append(f"rank {rank}: a peer closed after {got} of {per_peer} bytes")
                return
            got += m

    while time.time() < start:
        time.sleep(0.001)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=send, args=(out[p],)) for p in to]
    threads += [threading.Thread(target=recv, args=(s,)) for s in ins]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    for s in [*out.values(), *ins, srv]:
        s.close()
    if errors:
        raise SystemExit("; ".join(errors))
    print(json.dumps({"rank": rank, "seconds": seconds, "sent": per_peer * len(to)}))


if __name__ == "__main__":  # a rank's end, started inside its namespace by _round (stdlib only: fast)
    if sys.argv[1:2] == ["rank"]:
        a = sys.argv[2:]
        _rank(int(a[0]), a[1], float(a[2]), float(a[3]), a[4].split(","))
    else:
        print(__doc__)
