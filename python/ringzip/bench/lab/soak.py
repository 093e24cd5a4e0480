"""Soak test of the ringzip backend: many mixed collectives, checked, with resource accounting.

Every rank runs two process groups (the default group, over shared memory between the ranks of
a node, and a second ringzip group over Gloo's TCP: --second-transport) from two threads at once.
With --nodes K the ranks form K emulated nodes (RINGZIP_NODE_ID) and the default group runs
node-aware (hierarchy="node"). Each thread follows the same seeded schedule on every rank: a
codec (all of them, exact and "auto" included), a collective (all_reduce sync/async, all_gather, broadcast,
reduce_scatter, barrier) and a size from 0 to 16 MB. Results are checked after every call:
exact codecs exactly (inputs are small integers), lossy codecs against an error bound, and a
CRC of every result is compared across ranks at the end (all ranks must hold identical bits).
Buffers are reused per size, as DDP reuses its buckets. Resident memory is sampled after a
warm-up (a pass that touches every buffer and residual once, then --warmup, default 10%, of
the random calls) and at the end; threads and file descriptors
(less the TCP connections kept for a next group) are counted before init and after
destroy_process_group, and no shared-memory segment of the ranks
may be left in /dev/shm.

    python -m ringzip.bench.lab.soak                       # full run: 20000 collectives, 2 ranks
    python -m ringzip.bench.lab.soak --collectives 2000    # the short version the test suite runs
    python -m ringzip.bench.lab.soak --world 4 --nodes 2   # node-aware on two emulated nodes

Exit status 0 when every check passed and memory grew < --max-growth after warm-up; a JSON
summary goes to stdout (and --json FILE).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
import zlib
from datetime import timedelta
from pathlib import Path

from ..common import shm_segments, threads_and_fds
from ..launch import log_tail, run_once

CODECS = ["none", "fp16", "bf16", "q8", "q4", "q2", "q1", "topk:0.05", "randomk:0.05", "auto"]
# float32 element counts up to 16 MB, weighted toward the small sizes real workloads issue most
SIZES = [0, 1, 3, 17, 100, 1000, 4097, 16384, 65537, 262144, 1_000_003, 4_194_304]
WEIGHTS = [3, 4, 4, 4, 6, 6, 6, 6, 5, 4, 2, 1]
OPS = ["allreduce", "allreduce", "allreduce_async", "allgather", "broadcast", "reduce_scatter", "barrier"]
# Relative L2 error bounds of one compressed call on small-integer inputs (2-4 ranks). The
# unbiased q-codecs get a real bound; the biased ones run with error feedback, so one call's
# output also carries earlier calls' residuals: only a sanity bound (accuracy is tested in
# tests/collective); their integrity check is the cross-rank CRC of every result.
# "auto" chooses among exact, fp16, bf16, q8 and q4 per call: q4's bound.
REL_BOUND = {"q8": 0.05, "q4": 0.35, "q2": 1.0, "q1": None, "topk:0.05": None, "randomk:0.05": None, "auto": 0.35}


def rss() -> int:
    """Resident bytes after glibc returns its free pages (malloc_trim): live memory, not the
    allocator's cache of freed 16 MB buffers."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def counts() -> list:
    return list(threads_and_fds())


class Worker:
    def __init__(self, tid, group, n_ops, seed, rank, world):
        import torch

        self.torch = torch
        self.tid, self.group, self.n, self.rank, self.world = tid, group, n_ops, rank, world
        self.rng = random.Random(seed * 1000 + tid)  # identical schedule on every rank
        self.bufs: dict = {}
        self.base: dict = {}
        self.crcs: list = []
        self.errors: list = []
        self.done = 0
        self.max_rel = {}

    def buf(self, key, numel):
        t = self.bufs.get((key, numel))
        if t is None:
            t = self.bufs[(key, numel)] = self.torch.empty(numel)
        return t

    def pattern(self, numel):
        p = self.base.get(numel)
        if p is None:
            g = self.torch.Generator().manual_seed(numel)
            p = self.base[numel] = self.torch.randint(-3, 4, (numel,), generator=g).float()
        return p

    def check(self, what, codec, got, ref):
        torch = self.torch
        if codec in ("none", "fp16", "bf16") or ref.numel() == 0:
            if not torch.equal(got, ref):
                bad = (got != ref).nonzero()[:3].flatten().tolist()
                self.errors.append(f"{what}: exact mismatch at {bad}")
            return
        if not torch.isfinite(got).all():
            self.errors.append(f"{what}: non-finite output")
            return
        denom = ref.norm().item()
        rel = (got - ref).norm().item() / denom if denom else got.norm().item()
        self.max_rel[codec] = max(self.max_rel.get(codec, 0.0), rel)
        if REL_BOUND[codec] is not None and rel > REL_BOUND[codec]:
            self.errors.append(f"{what}: relative error {rel:.3g} > {REL_BOUND[codec]}")

    def run(self, warm_event, warm_at, resume):
        import torch.distributed as dist

        import ringzip

        torch = self.torch
        codec = None
        pending = []
        # Warm-up pass: every buffer, pattern and error-feedback residual the run will use is
        # created once (each op at each size, async batches included), then the random schedule.
        # Exact calls too: they fill the transports' buffers (shared-memory rings are touched
        # page by page) with whole payloads, where top-k's carry a twentieth.
        warm = [(c, op, numel) for c in ("topk:0.05", "none") for numel in SIZES for op in
                ["allreduce_async"] * 4 + ["allgather", "broadcast", "reduce_scatter"]]
        schedule = warm + [(self.rng.choice(CODECS), self.rng.choice(OPS), self.rng.choices(SIZES, WEIGHTS)[0])
                           for _ in range(self.n)]
        warm_at += len(warm)
        self.prewarm = len(warm)
        for i, (c, op, numel) in enumerate(schedule):
            if i == warm_at:
                # Paused while the resident size after warm-up is read: nothing of this thread's
                # in flight then, as at the end (a sample taken while the threads ran moved the
                # growth by up to +-5 % from run to run).
                x = None
                warm_event.set()
                resume.wait()
            mult = float(i % 7 + 1)
            what = f"thread {self.tid} call {i} {op} {c} n={numel}"
            if c != codec and not pending:
                ringzip.set_options(self.group, codec=c)
                codec = c
            c = codec  # async calls in flight keep the codec they were issued with
            x = self.pattern(numel) * mult
            total = sum(r + 1 for r in range(self.world))
            try:
                if op in ("allreduce", "allreduce_async"):
                    t = self.buf(f"ar{len(pending)}", numel)
                    t.copy_(x * (self.rank + 1))
                    w = dist.all_reduce(t, group=self.group, async_op=True)
                    pending.append((w, t, x * total, what, c))
                    if op == "allreduce" or len(pending) >= 4:
                        for w, t, ref, wh, cc in pending:
                            w.wait()
                            self.check(wh, cc, t, ref)
                            self.crcs.append(zlib.crc32(t.numpy().tobytes()))
                        pending = []
                    continue
                for w, t, ref, wh, cc in pending:  # other collectives run after the async batch
                    w.wait()
                    self.check(wh, cc, t, ref)
                    self.crcs.append(zlib.crc32(t.numpy().tobytes()))
                pending = []
                if op == "allgather":
                    out = self.buf("ag", numel * self.world)
                    dist.all_gather_into_tensor(out, x * (self.rank + 1), group=self.group)
                    ref = torch.cat([x * (r + 1) for r in range(self.world)])
                    self.check(what, "none", out, ref)
                    self.crcs.append(zlib.crc32(out.numpy().tobytes()))
                elif op == "broadcast":
                    src = i % self.world
                    t = self.buf("bc", numel)
                    t.copy_(x * (self.rank + 1))
                    dist.broadcast(t, src=dist.get_global_rank(self.group, src) if self.group else src,
                                   group=self.group)
                    self.check(what, "none", t, x * (src + 1))
                elif op == "reduce_scatter":
                    part = numel // self.world
                    inp = self.buf("rs_in", part * self.world)
                    inp.copy_(x[: part * self.world] * (self.rank + 1))
                    out = self.buf("rs_out", part)
                    dist.reduce_scatter_tensor(out, inp, group=self.group)
                    ref = (x[: part * self.world] * total)[self.rank * part:(self.rank + 1) * part]
                    self.check(what, c, out, ref)
                else:
                    dist.barrier(group=self.group)
            except Exception as e:  # noqa: BLE001
                self.errors.append(f"{what}: {type(e).__name__}: {str(e)[:300]}")
                break
            self.done = max(0, i + 1 - self.prewarm)
        for w, t, ref, wh, cc in pending:
            w.wait()
            self.check(wh, cc, t, ref)
            self.crcs.append(zlib.crc32(t.numpy().tobytes()))
        self.done = self.n
        warm_event.set()


def rank_main(args) -> dict:
    import torch
    import torch.distributed as dist

    import ringzip

    torch.set_num_threads(1)
    before = counts()
    if args.nodes > 1:  # contiguous blocks of ranks per emulated node
        os.environ["RINGZIP_NODE_ID"] = f"soak-node-{args.rank * args.nodes // args.world}"
    timeout = timedelta(seconds=args.timeout)
    opts = ringzip.Options(min_numel=1024, timeout=timeout, hierarchy="node" if args.nodes > 1 else "auto")
    dist.init_process_group("ringzip", init_method="file://" + args.store, rank=args.rank,
                            world_size=args.world, pg_options=opts)
    g2 = dist.new_group(backend="ringzip", pg_options=ringzip.Options(min_numel=1024, timeout=timeout,
                                                                      transport=args.second_transport))
    per = args.collectives // 2
    warm_at = int(per * args.warmup)  # after the warm-up pass (Worker.run)
    workers = [Worker(0, None, per, args.seed, args.rank, args.world),
               Worker(1, g2, args.collectives - per, args.seed, args.rank, args.world)]
    events, resume = [threading.Event(), threading.Event()], threading.Event()
    threads = [threading.Thread(target=w.run, args=(e, warm_at, resume)) for w, e in zip(workers, events)]
    t0 = time.time()
    for t in threads:
        t.start()
    for e in events:
        e.wait()
    rss_warm = rss()
    residual_warm = ringzip.stats()["residual_bytes"] + ringzip.stats(g2)["residual_bytes"]
    resume.set()
    t_warm = time.time()
    rss_peak = rss_warm
    while any(t.is_alive() for t in threads):
        rss_peak = max(rss_peak, rss())
        time.sleep(0.2)
    for t in threads:
        t.join()
    rss_end = rss()
    elapsed = time.time() - t0
    residual = ringzip.stats()["residual_bytes"] + ringzip.stats(g2)["residual_bytes"]
    dist.destroy_process_group()
    after = counts()
    return {
        "rank": args.rank,
        "pid": os.getpid(),
        "collectives": sum(w.done for w in workers),
        "warmup_pass_collectives": sum(w.prewarm for w in workers),
        "errors": [e for w in workers for e in w.errors][:20],
        "crc": [zlib.crc32(json.dumps(w.crcs).encode()) for w in workers],
        "max_rel_error": {k: max(w.max_rel.get(k, 0) for w in workers) for k in REL_BOUND},
        "seconds": elapsed,
        "warmup_seconds": t_warm - t0,
        "rss_warm_mb": rss_warm / 2**20,
        "residual_warm_mb": residual_warm / 2**20,
        "residual_end_mb": residual / 2**20,
        "rss_end_mb": rss_end / 2**20,
        "rss_peak_mb": rss_peak / 2**20,
        "rss_growth": (rss_end - rss_warm) / rss_warm,
        "residual_mb": residual / 2**20,
        "threads_fds_before_init": before,
        "threads_fds_after_destroy": after,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--nodes", type=int, default=1, help="emulated nodes (RINGZIP_NODE_ID); >1: node-aware default group")
    ap.add_argument("--second-transport", default="gloo", help="the second group's transport (auto, gloo, shm)")
    ap.add_argument("--collectives", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=float, default=0.1,
                    help="fraction of the random calls (after the warm-up pass) before the memory baseline")
    ap.add_argument("--max-growth", type=float, default=0.05)
    ap.add_argument("--timeout", type=float, default=120.0, help="collective timeout, s")
    ap.add_argument("--hard-timeout", type=float, default=3600.0, help="kill the ranks after, s")
    ap.add_argument("--json")
    ap.add_argument("--as-rank", metavar="DIR", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.nodes < 1 or args.world % args.nodes:
        ap.error(f"--nodes {args.nodes} must divide --world {args.world} (equal nodes)")
    if args.as_rank:
        args.rank, args.store = int(os.environ["RANK"]), os.path.join(args.as_rank, "store")
        res = rank_main(args)
        with open(os.path.join(args.as_rank, f"r{args.rank}.json"), "w") as f:
            json.dump(res, f)
        os._exit(0)
    with tempfile.TemporaryDirectory(prefix="rz_soak_") as tmp:
        run = run_once(args.world, Path(tmp), "ringzip.bench.lab.soak", [*(argv or sys.argv[1:]), "--as-rank", tmp],
                       args.hard_timeout, check=False)
        hung = run.reason.startswith("total timeout")
        failure = "" if run.ok or hung else f"{run.reason}\n{log_tail(run.logs)}"
        ranks = []
        for r in range(args.world):
            path = os.path.join(tmp, f"r{r}.json")
            ranks.append(json.load(open(path)) if os.path.exists(path) else None)
    problems = []
    if hung:
        problems.append("hard timeout: ranks killed")
    if failure:
        problems.append(failure)
    for r, res in enumerate(ranks):
        if res is None:
            problems.append(f"rank {r}: no result")
            continue
        problems += [f"rank {r}: {e}" for e in res["errors"]]
        if res["collectives"] != args.collectives:
            problems.append(f"rank {r}: ran {res['collectives']} of {args.collectives}")
        if res["rss_growth"] > args.max_growth:
            problems.append(f"rank {r}: RSS grew {res['rss_growth']:.1%} after warm-up")
        (t0, f0), (t1, f1) = res["threads_fds_before_init"], res["threads_fds_after_destroy"]
        if t1 > t0 + 1 or f1 > f0:
            problems.append(f"rank {r}: threads/fds {t0}/{f0} before init, {t1}/{f1} after destroy")
    good = [r for r in ranks if r]
    # A rank unlinks its segment once every peer mapped it: none of the ranks' may remain.
    left = shm_segments({r["pid"] for r in good})
    if left:
        problems.append(f"shared-memory segments left in /dev/shm: {left[:5]}")
    if len({json.dumps(r["crc"]) for r in good}) > 1:
        problems.append("ranks hold different result bits")
    summary = {"world": args.world, "nodes": args.nodes, "second_transport": args.second_transport,
               "collectives": args.collectives, "seed": args.seed,
               "ok": not problems, "problems": problems[:20], "ranks": ranks}
    text = json.dumps(summary, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
