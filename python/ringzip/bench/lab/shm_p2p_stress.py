"""Point-to-point stress of a ringzip group on one host, hunting stalls: randomized messages
between 2-6 ranks, every byte checked, and the stack of every rank captured if they stop.

    python -m ringzip.bench.lab.shm_p2p_stress [--minutes 30] [--ranks 4] [--seed 0] [--json FILE]
    python python/ringzip/bench/lab/shm_p2p_stress.py ...     # the same, from a source tree

Every round follows one plan on every rank (seeded by --seed and the round): 1 to 3 x ranks
messages between random pairs, sizes from 0 B to 4 MB (0, 1, odd, ring-sized and multi-MB ones
weighted, the rest uniform), random tags, and for each side a random way to post it -- blocking
or not. Ranks walk the plan in its order and wait for their non-blocking requests at the end of
the round in a random order of their own, which no correct transport can deadlock on. Two
transports take turns:

  * the group itself (dist.send / recv / isend / irecv): ringzip carries user point-to-point on
    Gloo (shared memory is for collectives, csrc/backend/topology.cc); a quarter of the
    receives are from any source (src=None) and must report the sender; collectives of the same
    group (over shared memory) run between them and, asynchronously, across them;
  * the shared-memory transport alone (ringzip._C.ShmTransport: isend / irecv / send / recv by
    peer and tag; it has no receive from any source).

A rank that waits longer than --stall seconds for one operation is a stall: the driver signals
every rank (faulthandler prints all their threads' stacks into their logs), keeps the last
operation each one announced and the stacks, and kills them. Errors of any kind (a timeout of
--timeout seconds included) and content mismatches end the run too. Exit status 0 when the run
went the whole time without one; a JSON summary goes to stdout (and --json FILE).
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

# Sizes in bytes: the edges of frames and rings (the shm transport's 16 KiB minimum, 2 MiB
# default), a few odd ones and several MB.
SIZES = [0, 1, 7, 64, 4095, 4096, 16384, 65537, (2 << 20) - 31, 2 << 20, (3 << 20) + 5, 4 << 20]
ANY_SOURCE = 0.25  # fraction of the group's receives posted with src=None


def _plan(seed: int, rnd: int, world: int, stall: bool = False) -> dict:
    """The round's plan, the same on every rank. `stall`: it opens with a blocking 1 MB message
    from rank 1 to rank 0, which rank 0 will not receive (the driver's own check)."""
    rng = random.Random(seed * 1_000_003 + rnd)
    msgs, any_tags = [], {}
    if stall:
        msgs.append({"i": 0, "src": 1, "dst": 0, "size": 1 << 20, "tag": 1, "any": False, "send_blocking": True,
                     "recv_blocking": True})
    for i in range(len(msgs), len(msgs) + rng.randint(1, 3 * world)):
        src = rng.randrange(world)
        dst = rng.choice([p for p in range(world) if p != src])
        size = rng.choice(SIZES) if rng.random() < 0.7 else rng.randrange(0, 4 << 20)
        tag = rng.randrange(1 << 20)
        # A receive from any source takes whichever message of its tag comes first: its tag
        # must be its destination's only one in the round. Gloo cannot receive 0 bytes from
        # any source (it enforces a non-empty buffer), so those name their source.
        anysrc = size > 0 and rng.random() < ANY_SOURCE
        if anysrc:
            tag = (1 << 20) + len(any_tags)  # above every plain tag
            any_tags[(dst, tag)] = i
        msgs.append({"i": i, "src": src, "dst": dst, "size": size, "tag": tag, "any": anysrc,
                     "send_blocking": rng.random() < 0.3, "recv_blocking": rng.random() < 0.3})
    return {"transport": "group" if rng.random() < 0.6 else "shm", "msgs": msgs,
            "collective": rng.choice([None, "sync", "async"]), "coll_numel": rng.choice([1, 1000, 70000, 1 << 20])}


def _content(torch, rnd: int, i: int, size: int):
    """Bytes nobody else sends: a message lands in the wrong buffer or out of order -> mismatch."""
    k = torch.arange(size, dtype=torch.int64)
    return ((k * 131 + i * 7919 + rnd * 104729) % 251).to(torch.uint8)


class Progress:
    """The operation this rank is in, for the driver's stall report (a file rewritten per op)."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, label: str) -> None:
        with open(self.path + ".tmp", "w") as f:
            f.write(f"{time.time():.3f} {label}")
        os.replace(self.path + ".tmp", self.path)


def rank_main(rank: int, world: int, tmp: str, args) -> dict:
    import faulthandler
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    import ringzip
    from ringzip import _C

    torch.set_num_threads(1)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the driver asks for the stacks
    progress = Progress(os.path.join(tmp, f"progress{rank}"))
    progress("init")
    store = dist.FileStore(os.path.join(tmp, "store"), world)
    dist.init_process_group("ringzip", store=dist.PrefixStore("group/", store), rank=rank, world_size=world,
                            pg_options=ringzip.Options(timeout=timedelta(seconds=args.timeout)))
    shm = _C.ShmTransport(dist.PrefixStore("shm/", store), rank, world, args.timeout)
    stats = {"rounds": 0, "messages": 0, "bytes": 0, "any_source": 0, "zero_byte": 0, "blocking": 0,
             "collectives": 0, "group_rounds": 0, "shm_rounds": 0}
    end = time.time() + args.minutes * 60
    mine = random.Random(args.seed * 7 + rank)
    rnd = 0
    while True:
        # Rank 0 decides whether another round starts: every rank runs the same number.
        go = torch.tensor([1 if time.time() < end else 0], dtype=torch.int32)
        progress(f"round {rnd}: agreeing to go on")
        dist.broadcast(go, src=0)
        if not go.item():
            break
        plan = _plan(args.seed, rnd, world, stall=rnd == args.inject_stall)
        stats[f"{plan['transport']}_rounds"] += 1
        _round(rank, world, rnd, plan, shm, mine, progress, stats, torch, dist,
               skip_receives=rnd == args.inject_stall and rank == 0)
        stats["rounds"] += 1
        rnd += 1
    progress("finishing")
    shm.close()
    dist.barrier()
    dist.destroy_process_group()
    return stats


def _round(rank, world, rnd, plan, shm, mine, progress, stats, torch, dist, skip_receives=False):
    group = plan["transport"] == "group"
    coll = plan["collective"] if group else None
    pending_coll = None
    if coll:
        x = torch.full((plan["coll_numel"],), float(rank + 1))
        progress(f"round {rnd}: all_reduce of {plan['coll_numel']} ({coll})")
        pending_coll = dist.all_reduce(x, async_op=True)
        if coll == "sync":
            pending_coll.wait()
    waits = []  # (label, request, check)
    for m in plan["msgs"]:
        if rank not in (m["src"], m["dst"]) or (skip_receives and rank == m["dst"]):
            continue
        sending = rank == m["src"]
        blocking = m["send_blocking"] if sending else m["recv_blocking"]
        label = (f"round {rnd} msg {m['i']}: {'send' if sending else 'receive'} of {m['size']} B "
                 f"{'to' if sending else 'from'} rank {m['dst'] if sending else ('any' if m['any'] else m['src'])} "
                 f"tag {m['tag']} over {'the group' if group else 'shm'}{' (blocking)' if blocking else ''}")
        progress(label)
        if sending:
            t = _content(torch, rnd, m["i"], m["size"])
            if group:
                req = None if blocking else dist.isend(t, m["dst"], tag=m["tag"])
                if blocking:
                    dist.send(t, m["dst"], tag=m["tag"])
            else:
                req = None if blocking else shm.isend(t, m["dst"], m["tag"])
                if blocking:
                    shm.send(t, m["dst"], m["tag"])
            if req is not None:
                waits.append((label, req, t, None))
            stats["messages"] += 1
            stats["bytes"] += m["size"]
            stats["zero_byte"] += m["size"] == 0
            stats["blocking"] += blocking
            continue
        buf = torch.empty(m["size"], dtype=torch.uint8)
        src = None if m["any"] else m["src"]
        if group:
            if blocking:
                got = dist.recv(buf, src=src, tag=m["tag"])
                _check(label, buf, got, rnd, m, torch)
            else:
                waits.append((label, dist.irecv(buf, src=src, tag=m["tag"]), buf, m))
        else:
            if blocking:
                shm.recv(buf, m["src"], m["tag"])
                _check(label, buf, m["src"], rnd, m, torch)
            else:
                waits.append((label, shm.irecv(buf, m["src"], m["tag"]), buf, m))
        stats["any_source"] += m["any"]
        stats["blocking"] += blocking
    mine.shuffle(waits)
    for label, req, buf, m in waits:
        progress("waiting: " + label)
        req.wait()
        if m is not None:
            got = m["src"] if not group or not m["any"] else req._source_rank()
            _check(label, buf, got, rnd, m, torch)
    if pending_coll is not None:
        progress(f"round {rnd}: waiting for the all_reduce of {plan['coll_numel']}")
        pending_coll.wait()
        want = float(world * (world + 1) // 2)
        if not torch.equal(x, torch.full_like(x, want)):
            raise AssertionError(f"round {rnd}: all_reduce gave {x[:4].tolist()}, not {want}")
        stats["collectives"] += 1


def _check(label, buf, src, rnd, m, torch):
    if src != m["src"]:
        raise AssertionError(f"{label}: came from rank {src}, not {m['src']}")
    if not torch.equal(buf, _content(torch, rnd, m["i"], m["size"])):
        bad = (buf != _content(torch, rnd, m["i"], m["size"])).nonzero().flatten()
        raise AssertionError(f"{label}: {bad.numel()} wrong bytes, the first at {int(bad[0])}")


# ---- driver ----------------------------------------------------------------------------------


def _as_rank(args) -> None:
    rank, world, tmp = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args.as_rank
    try:
        res = {"ok": True, **rank_main(rank, world, tmp, args)}
    except BaseException as e:  # noqa: BLE001
        import traceback

        res = {"ok": False, "error": f"{type(e).__name__}: {e}".split("\nException raised from")[0][:2000],
               "traceback": traceback.format_exc()[-3000:]}
    with open(os.path.join(tmp, f"result{rank}.json"), "w") as f:
        json.dump(res, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no interpreter teardown: a stuck thread must not turn a result into a hang


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def drive(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="rz_p2p_") as tmp:
        procs, logs = [], []
        for r in range(args.ranks):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.ranks), OMP_NUM_THREADS="1",
                       PYTHONFAULTHANDLER="1")
            log = os.path.join(tmp, f"log{r}.txt")
            logs.append(log)
            with open(log, "wb") as lf:
                procs.append(subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), "--as-rank", tmp, "--minutes", str(args.minutes),
                     "--seed", str(args.seed), "--timeout", str(args.timeout),
                     "--inject-stall", str(args.inject_stall)],
                    stdout=lf, stderr=subprocess.STDOUT, env=env, start_new_session=True))
        t0 = time.time()
        hard = t0 + args.minutes * 60 + args.timeout + 30
        stall = None
        try:
            while any(p.poll() is None for p in procs):
                now = time.time()
                labels = [_read(os.path.join(tmp, f"progress{r}")).split(" ", 1) for r in range(args.ranks)]
                since = [now - float(lab[0]) if len(lab) == 2 else 0.0 for lab in labels]
                late = [r for r, s in enumerate(since) if s > args.stall and procs[r].poll() is None]
                if late or now > hard:
                    stall = {"after_s": round(now - t0, 1), "late_ranks": late, "hard_timeout": now > hard,
                             "waiting_in": {r: (lab[1] if len(lab) == 2 else "") for r, lab in enumerate(labels)},
                             "waited_s": [round(s, 1) for s in since]}
                    for p in procs:  # every rank's stacks at the same moment
                        if p.poll() is None:
                            os.kill(p.pid, signal.SIGUSR1)
                    time.sleep(2.0)
                    break
                time.sleep(0.5)
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        results = []
        for r in range(args.ranks):
            path = os.path.join(tmp, f"result{r}.json")
            results.append(json.loads(_read(path)) if os.path.exists(path) else None)
        if stall:
            stall["stacks"] = {r: _read(logs[r])[-8000:] for r in range(args.ranks)}
        problems = []
        for r, res in enumerate(results):
            if res is None and not stall:
                problems.append(f"rank {r}: no result (exit {procs[r].returncode}): {_read(logs[r])[-1500:]}")
            elif res is not None and not res["ok"]:
                problems.append(f"rank {r}: {res['error']}")
        if stall:
            problems.insert(0, f"stall: ranks {stall['late_ranks']} waited > {args.stall} s")
        return {"ranks": args.ranks, "minutes": args.minutes, "seed": args.seed, "ok": not problems,
                "seconds": round(time.time() - t0, 1), "problems": problems[:20], "stall": stall,
                "per_rank": results}


OPTIONS = {  # flag: (type, default, help)
    "--minutes": (float, 30.0, "how long the ranks exchange messages"),
    "--ranks": (int, 4, "2 to 6"),
    "--seed": (int, 0, "of the plans (the same on every rank)"),
    "--timeout": (float, 120.0, "the group's and the transport's timeout, s"),
    "--stall": (float, 60.0, "an operation waiting longer is a stall, s"),
    "--json": (str, None, "also write the summary here"),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag, (kind, default, text) in OPTIONS.items():
        ap.add_argument(flag, type=kind, default=default, help=text)
    ap.add_argument("--as-rank", metavar="DIR", help=argparse.SUPPRESS)
    # Round in which rank 0 skips its receives: the stall detector's check of itself.
    ap.add_argument("--inject-stall", type=int, default=-1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.as_rank:
        _as_rank(args)
    if not 2 <= args.ranks <= 6:
        ap.error("--ranks: 2 to 6")
    summary = drive(args)
    text = json.dumps(summary, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
