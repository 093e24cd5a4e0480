"""The shared-memory transport (csrc/transport/shm/) across real processes: matching by
(peer, tag) in any posting order and FIFO within a tag, sizes from 0 B to 64 MiB + odd ones
across ring wraps, all-to-all among 4 ranks, size mismatches, the collective algorithms over
it bitwise against the loopback fixture, abort, a SIGKILLed rank, and no segment left in
/dev/shm afterwards. Every launch has a hard timeout (tests/mp.py)."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch.distributed as dist

from ringzip import _C
from tests import mp

SMALL_RING = 16 << 10  # many wraps and frames per message
DEADLINE = 60.0


def _store(ctx, prefix):
    return dist.PrefixStore(prefix, dist.FileStore(os.path.join(ctx.tmpdir, "store"), ctx.world_size))


def _shm(ctx, prefix="shm/", ring_bytes=0, timeout_s=DEADLINE):
    return _C.ShmTransport(_store(ctx, prefix), ctx.rank, ctx.world_size, timeout_s, ring_bytes)


def _pattern(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8)


def _segments(pids):
    """Entries of /dev/shm created by these processes."""
    return [f for f in os.listdir("/dev/shm") if f.startswith("ringzip-") and int(f.split("-")[1]) in pids]


def _raises(fn, *needles, within=None):
    t0 = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        took = time.monotonic() - t0
        msg = str(e)
        for s in needles:
            assert s in msg, f"{s!r} not in {msg!r}"
        assert within is None or took < within, f"raised after {took:.2f} s (> {within} s): {msg}"
        return msg, took
    raise AssertionError("no error raised")


def _launch(fn, ws, timeout=150.0, **kw):
    res = mp.run(fn, ws, timeout=timeout, **kw)
    pids = {r["pid"] for r in res}
    assert not _segments(pids), f"left in /dev/shm: {_segments(pids)}"
    return res


# ---- point to point, 2 ranks ---------------------------------------------------------------

# (tag, bytes): odd sizes around the 16 KiB ring and its frames, and far beyond it.
SIZES = [(1, 1), (2, 4096), (3, SMALL_RING - 33), (4, SMALL_RING), (5, SMALL_RING + 1), (6, 3 * SMALL_RING + 17),
         (7, 1_000_003), (8, 0)]


def p2p(ctx):
    chk = mp.Checker(ctx.rank)
    peer = 1 - ctx.rank
    small = _shm(ctx, "small/", SMALL_RING)
    big = _shm(ctx, "big/")
    with chk.case("own segment unlinked after setup"):
        assert not _segments({os.getpid()}), _segments({os.getpid()})
    with chk.case("sizes in order"):
        for tag, n in SIZES:
            if ctx.rank == 0:
                small.send(_pattern(n, tag), peer, tag)
            else:
                got = torch.empty(n, dtype=torch.uint8)
                small.recv(got, peer, tag)
                assert torch.equal(got, _pattern(n, tag)), (tag, n)
    with chk.case("64 MiB + 3 bytes, default ring"):
        n = (64 << 20) + 3
        if ctx.rank == 0:
            big.send(_pattern(n, 99), peer, 99)
        else:
            got = torch.empty(n, dtype=torch.uint8)
            big.recv(got, peer, 99)
            assert torch.equal(got, _pattern(n, 99))
    with chk.case("tags received in reverse order of sending"):
        if ctx.rank == 0:
            reqs = [small.isend(_pattern(n, tag), peer, tag) for tag, n in SIZES]
            for r in reqs:
                r.wait()
        else:
            bufs = {tag: torch.empty(n, dtype=torch.uint8) for tag, n in SIZES}
            for tag, n in reversed(SIZES):  # post and wait one by one: the others arrive unexpected
                small.recv(bufs[tag], peer, tag)
            for tag, n in SIZES:
                assert torch.equal(bufs[tag], _pattern(n, tag)), (tag, n)
    with chk.case("receives posted first, waited in shuffled order"):
        order = list(SIZES)
        random.Random(5).shuffle(order)
        if ctx.rank == 0:
            time.sleep(0.1)
            reqs = [small.isend(_pattern(n, tag + 100), peer, tag) for tag, n in SIZES]
            for r in reqs:
                r.wait()
        else:
            bufs = {tag: torch.empty(n, dtype=torch.uint8) for tag, n in SIZES}
            reqs = {tag: small.irecv(bufs[tag], peer, tag) for tag, n in order}
            for tag, n in order:
                reqs[tag].wait()
                assert torch.equal(bufs[tag], _pattern(n, tag + 100)), (tag, n)
    with chk.case("same tag is FIFO, mixed sizes"):
        sizes = [5, 70_000, 1, 200_000, 17]
        if ctx.rank == 0:
            reqs = [small.isend(_pattern(n, i), peer, 42) for i, n in enumerate(sizes)]
            for r in reqs:
                r.wait()
        else:
            bufs = [torch.empty(n, dtype=torch.uint8) for n in sizes]
            reqs = [small.irecv(b, peer, 42) for b in bufs]
            for r in reversed(reqs):
                r.wait()
            for i, n in enumerate(sizes):
                assert torch.equal(bufs[i], _pattern(n, i)), i
    with chk.case("a receive posted while its message is half buffered"):
        n = 3 << 20
        if ctx.rank == 0:
            a, b = small.isend(_pattern(n, 7), peer, 70), small.isend(_pattern(8, 8), peer, 71)
            a.wait()
            b.wait()
        else:
            gb, ga = torch.empty(8, dtype=torch.uint8), torch.empty(n, dtype=torch.uint8)
            rb = small.irecv(gb, peer, 71)
            try:
                rb.wait(0.002)  # drains part of the 3 MiB into a buffer, most likely
            except RuntimeError as e:
                assert "timed out" in str(e)
            ra = small.irecv(ga, peer, 70)
            ra.wait()
            rb.wait()
            assert torch.equal(ga, _pattern(n, 7)) and torch.equal(gb, _pattern(8, 8))
    with chk.case("a send completes only once its receive is posted, as on Gloo"):
        if ctx.rank == 0:
            s = small.isend(_pattern(4, 3), peer, 30)  # fits in the ring at once
            _raises(lambda: s.wait(0.3), "timed out after 300 ms", "send of 4 bytes to rank 1")
            small.send(_pattern(1, 0), peer, 31)  # now the peer posts the receive
            s.wait()
        else:
            small.recv(torch.empty(1, dtype=torch.uint8), peer, 31)
            got = torch.empty(4, dtype=torch.uint8)
            small.recv(got, peer, 30)
            assert torch.equal(got, _pattern(4, 3))
    with chk.case("both ranks post 16 MiB sends first, then receive"):
        n = 16 << 20
        out, got = _pattern(n, ctx.rank), torch.empty(n, dtype=torch.uint8)
        s = big.isend(out, peer, 5)
        big.recv(got, peer, 5)  # drains the peer's message while its own streams out
        s.wait()
        assert torch.equal(got, _pattern(n, peer))
    with chk.case("size mismatch names both sizes, pair stays usable"):
        for late in (False, True):  # receive posted before / after the message was buffered
            m = 8 + late * 100_000
            if ctx.rank == 0:  # the receiver matches tag 12 first when late: both sends posted
                a = small.isend(torch.zeros(m, dtype=torch.uint8), peer, 11)
                b = small.isend(_pattern(10, 1), peer, 12)
                a.wait()  # a mismatched receive still takes the message: the send completes
                b.wait()
            else:
                got = torch.empty(10, dtype=torch.uint8)
                if late:
                    small.recv(got, peer, 12)  # buffers tag 11 on the way
                r = small.irecv(torch.empty(4, dtype=torch.uint8), peer, 11)
                _raises(r.wait, f"rank 0 sends {m} bytes", "takes 4 bytes")
                if not late:
                    small.recv(got, peer, 12)
                assert torch.equal(got, _pattern(10, 1))
    with chk.case("bad peer"):
        _raises(lambda: small.send(torch.zeros(4, dtype=torch.uint8), ctx.rank, 1), "bad peer")
        _raises(lambda: small.send(torch.zeros(4, dtype=torch.uint8), 2, 1), "bad peer")
    with chk.case("timeout names the receive"):
        if ctx.rank == 0:
            r = big.irecv(torch.empty(4, dtype=torch.uint8), peer, 555)  # never sent
            _raises(lambda: r.wait(0.2), "timed out after 200 ms", "receive of 4 bytes from rank 1", within=2.0)
            small.send(torch.zeros(1, dtype=torch.uint8), peer, 556)
        else:  # closes only once rank 0 timed out (it would see "rank 1 closed" instead)
            small.recv(torch.zeros(1, dtype=torch.uint8), peer, 556)
    big.close()  # rank 0's timed-out receive is still posted: close fails it
    small.close()
    with chk.case("close while another thread waits"):
        third = _shm(ctx, "third/")
        errors = []

        def waiter():
            try:
                third.irecv(torch.empty(4, dtype=torch.uint8), peer, 1).wait()
            except RuntimeError as e:
                errors.append(str(e))

        th = threading.Thread(target=waiter)
        th.start()
        time.sleep(0.3)
        third.close()  # the waiter fails at once (this rank's or the peer's close) and unmaps last
        th.join(5)
        assert not th.is_alive() and errors and "closed" in errors[0], errors
    with chk.case("posting after close"):
        _raises(lambda: small.send(torch.zeros(4, dtype=torch.uint8), peer, 1), "closed")
    return {"pid": os.getpid(), **chk.result()}


def test_point_to_point_two_ranks():
    res = _launch(p2p, 2)
    mp.raise_on_failures(mp.merge(res), "shm p2p")


# ---- all-to-all, 4 ranks -------------------------------------------------------------------


def all_to_all(ctx, rounds):
    n_ranks, me = ctx.world_size, ctx.rank
    t = _shm(ctx, "a2a/", 64 << 10)
    rng = random.Random(1000 + me)
    size = lambda src, dst, k: (src * 7919 + dst * 104729 + k * 1299709) % 300_000  # noqa: E731
    for rnd in range(rounds):
        sends, recvs = [], []
        for k in range(3):  # three messages per pair and round, distinct tags
            for p in range(n_ranks):
                if p == me:
                    continue
                tag = rnd * 10 + k
                sends.append(t.isend(_pattern(size(me, p, k), tag * 31 + me * 7 + p), p, tag))
                buf = torch.empty(size(p, me, k), dtype=torch.uint8)
                recvs.append((t.irecv(buf, p, tag), buf, p, k, tag))
        rng.shuffle(recvs)
        for r, buf, p, k, tag in recvs:
            r.wait()
            assert torch.equal(buf, _pattern(size(p, me, k), tag * 31 + p * 7 + me)), (p, k, tag)
        for s in sends:
            s.wait()
    t.close()
    return {"pid": os.getpid()}


def test_all_to_all_four_ranks():
    _launch(all_to_all, 4, args=(4,))


# ---- random traffic -------------------------------------------------------------------------

FUZZ_SIZES = [1, 7, 100, 4096, SMALL_RING, SMALL_RING + 1, 70_000, 300_000, 1 << 20]


def random_traffic(ctx, seed, rounds):
    """Every round: messages between random pairs (random sizes, one tag each), every rank
    posting its sends and receives in its own random order with random pauses (so the progress
    thread, the 50 ms rescue and half-buffered messages all come into play) and short waits that
    may time out, then waiting for all of them in random order. Nothing a rank waits for depends
    on a wait of its own, so any stall is the transport's: it shows as a timeout naming the op."""
    me, n = ctx.rank, ctx.world_size
    t = _shm(ctx, "fuzz/", random.Random(seed).choice([SMALL_RING, 64 << 10, 0]), timeout_s=20.0)
    for rnd in range(rounds):
        plan = random.Random(seed * 1000 + rnd)  # the same on every rank
        msgs = []
        for k in range(plan.randint(1, 12)):
            src = plan.randrange(n)
            dst = plan.choice([p for p in range(n) if p != src])
            msgs.append((src, dst, rnd * 100 + k, plan.choice(FUZZ_SIZES)))
        mine = random.Random(seed * 7 + rnd * 13 + me)
        ops = [m for m in msgs if me in m[:2]]
        mine.shuffle(ops)
        reqs = []
        for src, dst, tag, size in ops:
            if src == me:
                reqs.append((tag, t.isend(_pattern(size, tag), dst, tag), None))
            else:
                buf = torch.empty(size, dtype=torch.uint8)
                reqs.append((tag, t.irecv(buf, src, tag), buf))
            r = mine.random()
            if r < 0.15:
                time.sleep(mine.choice([0.0005, 0.002, 0.06]))
            elif r < 0.25:
                try:
                    mine.choice(reqs)[1].wait(0.001)
                except RuntimeError as e:
                    assert "timed out" in str(e), e
        mine.shuffle(reqs)
        for tag, req, buf in reqs:
            try:
                req.wait()
            except RuntimeError as e:
                raise AssertionError(f"round {rnd}, tag {tag}: {e}; plan {msgs}") from e
            if buf is not None:
                assert torch.equal(buf, _pattern(buf.numel(), tag)), (rnd, tag)
    t.close()
    return {"pid": os.getpid()}


@pytest.mark.parametrize("ws,seed", [(2, 3), (3, 1), (4, 2)])
def test_random_traffic(ws, seed):
    _launch(random_traffic, ws, args=(seed, 30))


# ---- collectives over the transport ----------------------------------------------------------

DENSE = ["ring", "rd", "hd", "tree", "direct", "star", "sra"]
COUNTS = [1, 1000, (1 << 20) + 3]


def _inputs(n_ranks, count, seed):
    return [torch.randint(-3, 4, (count,), generator=torch.Generator().manual_seed(seed * 100 + r)).float()
            for r in range(n_ranks)]


def collectives(ctx):
    chk = mp.Checker(ctx.rank)
    t = _shm(ctx, "coll/")
    seq = 0
    for algo in DENSE:
        for count in COUNTS:
            with chk.case(f"{algo}/{count}"):
                xs = _inputs(ctx.world_size, count, count)
                x = xs[ctx.rank].clone()
                _C.shm_allreduce(t, x, algo, seq)
                seq += 1
                assert torch.equal(x, sum(xs)), f"max error {(x - sum(xs)).abs().max()}"
    for codec, algo in [("q4", "sra"), ("q4", "ring"), ("q8", "auto"), ("topk:0.1", "auto")]:
        with chk.case(f"compressed/{codec}/{algo}"):
            xs = [torch.randn(50_000, generator=torch.Generator().manual_seed(7 + r)) for r in range(ctx.world_size)]
            x = xs[ctx.rank].clone()
            _C.shm_compressed_allreduce(t, x, codec, algo, 11, seq)
            ref, _ = _C.loopback.compressed("allreduce", xs, codec, algorithm=algo, seed=11, rng_seq=seq, seq=seq)
            seq += 1
            assert torch.equal(x, ref[ctx.rank]), "differs from the loopback run of the same algorithm"
    t.close()
    return {"pid": os.getpid(), **chk.result()}


@pytest.mark.parametrize("ws", [2, 3, 4])
def test_collectives_bitwise(ws):
    res = _launch(collectives, ws, timeout=300.0)
    mp.raise_on_failures(mp.merge(res), f"shm collectives on {ws} ranks")


# ---- abort ---------------------------------------------------------------------------------


def aborts(ctx):
    t = _shm(ctx, "abort/")
    out = {"pid": os.getpid()}
    if ctx.rank == 0:
        mine = t.irecv(torch.empty(4, dtype=torch.uint8), 1, 9)  # never sent
        errors = []

        def waiter():  # a thread blocked in wait() when another thread aborts
            try:
                t.irecv(torch.empty(4, dtype=torch.uint8), 2, 9).wait()
            except RuntimeError as e:
                errors.append((str(e), time.monotonic()))

        th = threading.Thread(target=waiter)
        th.start()
        time.sleep(0.5)
        t0 = time.monotonic()
        out["aborted_at"] = time.time()
        t.abort()
        t.abort()  # idempotent
        th.join(10)
        assert errors and "aborted" in errors[0][0] and errors[0][1] - t0 < 1.0, errors
        _raises(mine.wait, "aborted", within=0.5)
        _raises(lambda: t.send(torch.zeros(4, dtype=torch.uint8), 1, 1), "aborted", within=0.5)
    else:
        r = t.irecv(torch.empty(1 << 20, dtype=torch.uint8), 0, 3)  # blocked on rank 0
        _raises(r.wait, "rank 0 aborted", within=5.0)
        out["raised_at"] = time.time()
    t.close()
    return out


def test_abort_fails_waiters_here_and_on_peers_at_once():
    res = _launch(aborts, 3)
    late = [r["raised_at"] - res[0]["aborted_at"] for r in res[1:]]
    assert all(t < 0.5 for t in late), f"peers raised {late} s after the abort"  # futex wake: ~ms


# ---- a rank killed mid-transfer --------------------------------------------------------------

KILL_TIMEOUT = 30.0


def killed(ctx, pid_dir):
    chk = mp.Checker(ctx.rank)
    with open(os.path.join(pid_dir, str(os.getpid())), "w"):
        pass
    t = _shm(ctx, "kill/", 64 << 10, timeout_s=KILL_TIMEOUT)
    victim = ctx.world_size - 1
    killed_at = os.path.join(ctx.tmpdir, "killed_at")
    if ctx.rank == victim:
        # Rank 0 posts no receive before the death, so only the first 64 KiB fit in the ring:
        # the victim dies with its message part written.
        s = t.isend(_pattern(8 << 20, 1), 0, 1)  # noqa: F841
        time.sleep(0.5)
        with open(killed_at + ".tmp", "w") as f:
            f.write(repr(time.time()))
        os.rename(killed_at + ".tmp", killed_at)
        os.kill(os.getpid(), signal.SIGKILL)
    elif ctx.rank == 0:
        with chk.case("the victim's receiver raises: died"):
            while not os.path.exists(killed_at):
                time.sleep(0.01)
            got = torch.empty(8 << 20, dtype=torch.uint8)
            _raises(lambda: t.recv(got, victim, 1), f"rank {victim} (pid", "died", within=5.0)
            with open(killed_at) as f:
                late = time.time() - float(f.read())
            assert late < 1.0, f"noticed the death {late:.2f} s late (pid check every 50 ms)"
        t.abort()  # as Comm::fail does: the ranks blocked on this one fail now
    else:
        with chk.case("a rank blocked on the receiver raises: aborted"):
            _raises(lambda: t.recv(torch.empty(4, dtype=torch.uint8), 0, 2), "rank 0 aborted", within=6.0)
    t.close()
    return chk.result()


@pytest.mark.parametrize("ws", [2, 4])
def test_sigkill_of_a_rank_mid_transfer(ws, tmp_path):
    launch = mp.run_checks(killed, ws, args=(str(tmp_path),), timeout=60.0)
    assert launch.error and "died with exit status -9" in launch.error, launch.error
    mp.raise_on_failures(launch.failures, f"kill on {ws} ranks")
    want = {"the victim's receiver raises: died"} | ({"a rank blocked on the receiver raises: aborted"} if ws > 2 else set())
    assert launch.passed == want, launch.passed
    pids = {int(p) for p in os.listdir(tmp_path)}
    assert len(pids) == ws and not _segments(pids), _segments(pids)


# ---- setup: stale segments, a peer that never comes ------------------------------------------


def test_stale_segments_swept_and_failed_setup_leaves_nothing():
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    ns = os.stat("/proc/self/ns/pid").st_ino
    stale = f"/dev/shm/ringzip-{int(dead.stdout)}-{ns:x}-00000000deadbeef"
    with open(stale, "wb") as f:
        f.write(b"\0" * 64)
    try:
        # rank 1 never comes: setup times out, names the cause, and unlinks this rank's segment
        _raises(lambda: _C.ShmTransport(dist.HashStore(), 0, 2, 0.5), "setup failed", within=10.0)
        assert not _segments({os.getpid()}), _segments({os.getpid()})
        assert not os.path.exists(stale), "the stale segment of a dead process survived the sweep"
    finally:
        if os.path.exists(stale):
            os.unlink(stale)


def failed_setup(ctx):
    # rank 1 cannot reserve its segment (1 TiB of rings): both ranks fail at once, naming it,
    # instead of rank 0 waiting out the 30 s setup timeout
    ring = (1 << 40) if ctx.rank == 1 else 0
    msg, took = _raises(lambda: _shm(ctx, "fail/", ring, timeout_s=30.0), "setup failed", within=10.0)
    assert "shared memory" in msg, msg
    return {"pid": os.getpid(), "msg": msg}


def test_a_rank_that_cannot_set_up_fails_the_others_at_once():
    res = _launch(failed_setup, 2, timeout=60.0)
    assert "rank 1 of this node" in res[0]["msg"], res[0]["msg"]


def test_bad_arguments_and_a_group_of_one():
    store = dist.HashStore()
    with pytest.raises(ValueError, match="out of range"):
        _C.ShmTransport(store, 2, 2, 1.0)
    with pytest.raises(ValueError, match="multiple of 4096"):
        _C.ShmTransport(store, 0, 2, 1.0, 5000)
    t = _C.ShmTransport(store, 0, 1, 1.0)
    x = torch.arange(5.0)
    _C.shm_allreduce(t, x)
    assert torch.equal(x, torch.arange(5.0))
    with pytest.raises(RuntimeError, match="bad peer"):
        t.send(x, 0, 1)
    t.close()
