"""Faults across ranks: mismatched calls, a peer that never arrives (timeouts), a peer killed
mid-collective (every codec and algorithm), abort() of a hung call; afterwards the group fails
fast, destroy_process_group releases threads and sockets, and a new group works in the same
processes. Every launch has a hard timeout (tests/reliability/_launch.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import ringzip
from _launch import check_all_ok, init, launch, record, threads_and_fds

WORLD = 3


def _good_allreduce(n=100):
    t = torch.ones(n, dtype=torch.int32)  # never compressed, whatever the group's codec
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((n,), dist.get_world_size(), dtype=torch.int32)), t[:4]


def _expect_error(fn, *needles, case=""):
    t0 = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        msg = str(e).split("\nException raised from")[0]
        for s in needles:
            assert s in msg, f"{s!r} not in {msg!r}"
        return msg, time.monotonic() - t0
    raise AssertionError(f"no error raised{' in case ' + case if case else ''}")


# ---------------------------------------------------------------------------- mismatches

def _mismatch_cases(rank):
    odd = rank == 1
    ones = torch.ones
    big = 70000  # above the default min_numel (65536): compressed when a codec is set

    def with_codec(codec, fn, **kw):
        def run():
            ringzip.set_options(codec=codec, **kw)
            try:
                fn()
            finally:
                ringzip.set_options(codec="none", seed=0)
        return run

    return {
        "size": (lambda: dist.all_reduce(ones(10 + odd)), "element count"),
        "dtype": (lambda: dist.all_reduce(ones(10, dtype=torch.float64 if odd else torch.float32)), "dtype"),
        "op": (lambda: dist.all_reduce(ones(10), op=dist.ReduceOp.MAX if odd else dist.ReduceOp.SUM), "reduce op"),
        "collective": (lambda: dist.broadcast(ones(10), src=0) if odd else dist.all_reduce(ones(10)), "the collective"),
        "root": (lambda: dist.broadcast(ones(10), src=1 if odd else 0), "root rank"),
        "allgather": (lambda: dist.all_gather([ones(5 + odd) for _ in range(WORLD)], ones(5 + odd)), "element count"),
        "reduce_scatter": (lambda: dist.reduce_scatter_tensor(ones(4 + odd), ones(WORLD * (4 + odd))), "element count"),
        "gather": (lambda: dist.gather(ones(6 + odd), [ones(6 + odd) for _ in range(WORLD)] if rank == 0 else None,
                                       dst=0), "element count"),
        "codec_vs_exact": (with_codec("q8" if odd else "none", lambda: dist.all_reduce(ones(big))), "codec"),
        "codec_kind": (with_codec("q4" if odd else "q8", lambda: dist.all_reduce(ones(big))), "codec"),
        "codec_size": (with_codec("topk:0.01", lambda: dist.all_reduce(ones(big + 512 * odd))), "element count"),
        "codec_seed": (with_codec("randomk:0.01", lambda: dist.all_reduce(ones(big)), seed=int(odd)), "codec settings"),
        "async": (lambda: dist.all_reduce(ones(10 + odd), async_op=True).wait(), "element count"),
    }


def rank_mismatch(rank, world, tmp):
    init(tmp, rank, world, pg_options=ringzip.Options(timeout=timedelta(seconds=20), check="on"))
    out = {}
    for name, (fn, what) in _mismatch_cases(rank).items():
        msg, dt = _expect_error(fn, "mismatched collective calls", what, "rank 0 called", "rank 1 called")
        _good_allreduce()  # the group stays usable after a mismatch
        out[name] = [msg, dt]
    ts = [torch.ones(3) for _ in range(2 + (rank == 1))]
    out["coalesced"] = list(_expect_error(lambda: dist.all_reduce_coalesced(ts), "mismatched", "element count"))
    _good_allreduce()

    # A different number of coalesced tensors takes different numbers of sequence numbers:
    # the ranks' call sequences diverge, so the group must refuse further calls.
    def coalesced_gather():
        k = 2 + (rank == 1)
        with dist._coalescing_manager(async_ops=True) as cm:  # noqa: SLF001
            for _ in range(k):
                dist.all_gather_into_tensor(torch.empty(2 * world), torch.ones(2))
        cm.wait()

    _expect_error(coalesced_gather, "mismatched", "the group is now unusable")
    _expect_error(_good_allreduce, "unusable after an earlier failure")
    dist.destroy_process_group()
    return out


def _assert_same_message_everywhere(res, within_s, test=None):
    if test:
        record(test, cases={name: [r[name][1] for r in res] for name in res[0]})
    for name in res[0]:
        msgs = {r[name][0].split(" (detected on rank")[0] for r in res}
        assert len(msgs) == 1, (name, msgs)  # every rank names the same mismatch
        assert max(r[name][1] for r in res) < within_s, (name, [r[name][1] for r in res])


def test_mismatches_raise_on_all_ranks_and_group_stays_usable():
    _assert_same_message_everywhere(check_all_ok(launch(rank_mismatch, WORLD, timeout=90)), 5, "mismatch_check_on")


def _auto_cases(rank):
    """check="auto" (the default) must catch, beyond the cases above: a size or dtype mismatch
    where one rank's tensor is >= 16 MiB and the other's smaller (each rank used to decide from
    its own size whether to check: a 15 s timeout), small mismatches (Gloo aborted the process
    on "Received data size doesn't match expected size"), and a codec set on one rank only."""
    odd = rank == 1
    cases = dict(_mismatch_cases(rank))
    cases.update({
        "size_16MiB_vs_smaller": (lambda: dist.all_reduce(torch.ones((1 << 22) + 8 if odd else 1000)), "element count"),
        "dtype_small": (lambda: dist.all_reduce(torch.ones(1000, dtype=torch.float16 if odd else torch.float32)),
                        "dtype"),
        "size_small_larger_first": (lambda: dist.all_reduce(torch.ones(100 if odd else 3000)), "element count"),
        "codec_on_one_rank": (lambda: (ringzip.set_options(codec="q4") if odd else None,
                                       dist.all_reduce(torch.ones(1 << 20))), "codec"),
        "broadcast_vs_barrier": (lambda: dist.barrier() if odd else dist.broadcast(torch.ones(7), src=0),
                                 "the collective"),
    })
    return cases


def rank_mismatch_auto(rank, world, tmp):
    out = {}
    for i, (name, (fn, what)) in enumerate(_auto_cases(rank).items()):
        init(tmp, rank, world, name=f"auto{i}", pg_options=ringzip.Options(timeout=timedelta(seconds=15)))
        assert ringzip.get_options().check == "auto"
        _good_allreduce()
        needles = ("mismatched collective calls", what, " called ", " but rank ")
        t0 = time.monotonic()
        try:
            fn()
            # This rank's part of the call did not involve a mismatched rank (a broadcast or gather
            # from a root that agrees with it): its next call must raise the same message.
            msg, _ = _expect_error(_good_allreduce, *needles, case=name)
        except AssertionError:
            raise
        except Exception:  # noqa: BLE001
            msg, _ = _expect_error(lambda: (_ for _ in ()).throw(sys.exc_info()[1]), *needles)
        dt = time.monotonic() - t0
        # no message went through, but the stalled calls cannot be withdrawn: the group is done
        _expect_error(_good_allreduce, "unusable after an earlier failure", "mismatched collective calls")
        dist.destroy_process_group()
        out[name] = [msg, dt]
    init(tmp, rank, world, name="after")  # a new group in the same processes works
    _good_allreduce(1 << 16)
    dist.destroy_process_group()
    return out


def rank_mismatch_late(rank, world, tmp):
    init(tmp, rank, world, pg_options=ringzip.Options(timeout=timedelta(seconds=20), check="on"))
    _good_allreduce()
    if rank == 2:
        time.sleep(0.6)  # ranks 0 and 1, whose calls differ, wait for it past the stall watch's age
    msg, _ = _expect_error(lambda: dist.all_reduce(torch.ones(10 + (rank == 1))), "mismatched collective calls",
                           "element count")
    _good_allreduce()  # check="on" found it before the call: the group stays usable
    dist.destroy_process_group()
    return msg


def test_check_on_keeps_the_group_usable_when_the_exchange_waits():
    """Under check="on" the fingerprint exchange finds the mismatch; the stall watch (check="auto"'s
    mechanism) must not diagnose it first while the ranks wait in the exchange for a late one, which
    breaks the transport."""
    msgs = check_all_ok(launch(rank_mismatch_late, WORLD, timeout=90))
    assert all("unusable" not in m for m in msgs), msgs


def test_check_auto_catches_every_mismatch_within_a_second():
    res = check_all_ok(launch(rank_mismatch_auto, WORLD, timeout=240))
    _assert_same_message_everywhere(res, 1.0, "mismatch_check_auto")


def rank_check_off(rank, world, tmp, transport):
    # A named algorithm: under algorithm="auto" the cost model may open a call with its
    # agreement (tag steps of its own, which the barrier never matches), and shared memory then
    # has no matched pair to compare: the stall times out as over Gloo.
    init(tmp, rank, world, pg_options=ringzip.Options(check="off", timeout=timedelta(seconds=3), transport=transport,
                                                      algorithm="star"))
    assert ringzip.get_options().check == "off"
    _good_allreduce()
    # Unchecked, nothing diagnoses the mismatch: over Gloo it is a timeout; shared memory and
    # ringzip's TCP compare the sizes of matched messages and fail at once, naming both.
    msg, dt = _expect_error(lambda: dist.all_reduce(torch.ones(10)) if rank else dist.barrier(), "ringzip")
    assert "mismatched collective calls" not in msg, msg
    if transport == "gloo":
        assert dt > 2.5, (msg, dt)
    elif rank:
        assert "rank 0 sends 1 bytes" in msg and "takes 40 bytes" in msg and dt < 2.5, (msg, dt)
    dist.destroy_process_group()
    return True


@pytest.mark.parametrize("transport", ["gloo", "shm", "tcp"])
def test_check_off_times_out_without_a_diagnosis(transport):
    check_all_ok(launch(rank_check_off, 2, transport, timeout=60))


# ---------------------------------------------------------------------------- timeouts

def rank_timeout(rank, world, tmp, transport):
    t0 = threads_and_fds()
    init(tmp, rank, world, timeout=timedelta(seconds=2), pg_options=ringzip.Options(transport=transport))
    _good_allreduce()
    out = {}
    if rank == world - 1:
        time.sleep(5)  # never arrives within the others' timeout
        msg, dt = _expect_error(_good_allreduce, "ringzip")
        out["late"] = [msg, dt]
    else:
        msg, dt = _expect_error(lambda: _good_allreduce(1000), "allreduce", "group", f"rank {rank} of {world}",
                                "rank ")
        out["timeout"] = [msg, dt]
        msg, dt = _expect_error(_good_allreduce, "unusable after an earlier failure")
        out["after"] = [msg, dt]
        time.sleep(3.5)
    t = time.monotonic()
    dist.destroy_process_group()
    out["destroy_s"] = time.monotonic() - t
    init(tmp, rank, world, name="rdv2")  # a new group in the same processes
    _good_allreduce(1 << 16)
    dist.destroy_process_group()
    out["threads_fds_before"], out["threads_fds_after"] = t0, threads_and_fds()
    return out


@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_timeout_raises_everywhere_then_fails_fast_and_recovers(transport):
    res = check_all_ok(launch(rank_timeout, WORLD, transport, timeout=90))
    record("timeout", timeout_s=2, raised_s=[r["timeout"][1] for r in res[:-1]], late_s=res[-1]["late"][1],
           after_s=[r["after"][1] for r in res[:-1]], destroy_s=[r["destroy_s"] for r in res])
    for r in res[:-1]:
        assert 1.5 < r["timeout"][1] < 2 + 3, r["timeout"]
        assert r["after"][1] < 0.5
    assert res[-1]["late"][1] < 1.0, res[-1]["late"]  # the late rank fails at once
    for r in res:
        assert r["destroy_s"] < 2
        assert r["threads_fds_after"][0] <= r["threads_fds_before"][0] + 1, r
        assert r["threads_fds_after"][1] <= r["threads_fds_before"][1] + 1, r


def rank_stopped_store(rank, world, tmp, port, store_pid):
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", port, world, False, timedelta(seconds=60))
    dist.init_process_group("ringzip", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=2))
    _good_allreduce()
    dist.barrier()
    if rank == 0:
        os.kill(store_pid, signal.SIGSTOP)  # the store's host hangs: its connections stay open, silent
        msg, dt = _expect_error(lambda: _good_allreduce(1000), "allreduce", "group")
        return {"raised_s": dt}
    time.sleep(8)  # never arrives: rank 0's call times out, and its diagnosis asks a silent store
    return {}


def test_a_stopped_store_host_delays_no_failure():
    """The group's store lives in a process that stops (SIGSTOP: its sockets stay open and answer
    nothing; a TCPStore client waits for its own timeout, a minute here). A call that times out
    must fail by its own timeout all the same: the stall diagnosis waits on the store at most
    MismatchWatch::kStoreWait per answer (before, a torchft survivor hung 150 s this way)."""
    host = subprocess.Popen([sys.executable, "-c", _STORE_HOST], stdout=subprocess.PIPE, text=True)
    try:
        port = int(host.stdout.readline())
        res = check_all_ok(launch(rank_stopped_store, 2, port, host.pid, timeout=60))
    finally:
        host.kill()
        host.wait()
    record("stopped_store", timeout_s=2, raised_s=res[0]["raised_s"])
    assert 1.5 < res[0]["raised_s"] < 2 + 3, res[0]


_STORE_HOST = """
import time
from datetime import timedelta
from torch.distributed import TCPStore
s = TCPStore("127.0.0.1", 0, 2, True, timedelta(seconds=60), wait_for_workers=False)
print(s.port, flush=True)
time.sleep(300)
"""


def rank_abort(rank, world, tmp, transport):
    init(tmp, rank, world, timeout=timedelta(seconds=60), pg_options=ringzip.Options(transport=transport))
    _good_allreduce()
    out = {}
    if rank == 0:
        w = dist.all_reduce(torch.ones(1 << 20), async_op=True)  # rank 1 never joins
        threading.Timer(0.5, lambda: ringzip.backend_of().abort()).start()
        msg, dt = _expect_error(w.wait, "ringzip")
        out["abort_wait_s"] = dt
        _expect_error(_good_allreduce, "ringzip")
    else:
        time.sleep(2.5)
    dist.destroy_process_group()
    init(tmp, rank, world, name="rdv2")
    _good_allreduce()
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_abort_unblocks_a_hung_collective(transport):
    res = check_all_ok(launch(rank_abort, 2, transport, timeout=60))
    record("abort", abort_wait_s=res[0]["abort_wait_s"], aborted_after_s=0.5)
    assert res[0]["abort_wait_s"] < 3, res[0]


# ---------------------------------------------------------------------------- dead peer

def rank_dead_peer(rank, world, tmp, codec, algorithm, numel, victim, op, transport="auto"):
    before = threads_and_fds()
    pooled = transport in ("gloo", "tcp")  # large messages striped over a pool of connections
    init(tmp, rank, world, pg_options=ringzip.Options(codec=codec, algorithm=algorithm, min_numel=0,
                                                      timeout=timedelta(seconds=20), transport=transport,
                                                      connections=4 if pooled else 1))
    x = torch.full((numel,), float(rank + 1))
    _good_allreduce()
    kill_file = os.path.join(tmp, "killed_at")
    if rank == victim:
        def die():
            with open(kill_file + ".tmp", "w") as f:
                f.write(repr(time.time()))
            os.replace(kill_file + ".tmp", kill_file)
            os.kill(os.getpid(), signal.SIGKILL)
        threading.Timer(0.3, die).start()
    t_start = time.monotonic()
    calls = 0
    err = None
    while time.monotonic() - t_start < 40:
        try:
            if op == "allreduce":
                y = x.clone()
                dist.all_reduce(y)
            elif op == "mixed":
                k = calls % 3
                if k == 0:
                    dist.all_gather_into_tensor(torch.empty(world * numel), x)
                elif k == 1:
                    dist.broadcast(x.clone(), src=calls % world)
                else:
                    dist.reduce_scatter_tensor(torch.empty(numel), torch.ones(world * numel))
            calls += 1
        except Exception as e:  # noqa: BLE001
            err = str(e).split("\nException raised from")[0]
            break
    t_err = time.time()
    assert err is not None, "no error after the peer died"
    with open(kill_file) as f:
        killed_at = float(f.read())
    out = {"error": err, "detect_s": t_err - killed_at, "calls": calls}
    assert ringzip.backend_of().broken_reason, "group not marked broken"
    _, out["fast_fail_s"] = _expect_error(_good_allreduce, "unusable after an earlier failure")
    t = time.monotonic()
    dist.destroy_process_group()
    out["destroy_s"] = time.monotonic() - t
    # A new group of the survivors in the same processes.
    new_rank = rank if rank < victim else rank - 1
    init(tmp, new_rank, world - 1, name="rdv2")
    y = x.clone()
    dist.all_reduce(y)
    ref = sum(r + 1 for r in range(world) if r != victim)
    assert torch.equal(y, torch.full((numel,), float(ref))), y[:4]
    dist.destroy_process_group()
    out["threads_fds"] = [before, threads_and_fds()]
    return out


DEAD_PEER = [
    # codec, algorithm, elements, victim, op
    ("none", "rd", 1024, 2, "allreduce"),
    ("none", "ring", 1 << 20, 1, "allreduce"),
    ("q8", "sra", 1 << 20, 0, "allreduce"),
    ("q4", "ring", 1 << 20, 2, "allreduce"),
    ("q1", "auto", 1 << 20, 1, "allreduce"),
    ("topk:0.01", "sparse", 1 << 20, 1, "allreduce"),
    ("randomk:0.01", "sparse", 1 << 20, 2, "allreduce"),
    ("fp16", "auto", 1 << 18, 0, "allreduce"),
    ("none", "auto", 1 << 18, 1, "mixed"),
    # over TCP (Gloo's and ringzip's), messages of 4 MiB striped over a pool of connections to each peer
    ("none", "ring", 1 << 22, 1, "allreduce", "gloo"),
    ("none", "direct", 1 << 22, 0, "allreduce", "gloo"),
    ("q8", "sra", 1 << 22, 2, "allreduce", "gloo"),
    ("none", "ring", 1 << 22, 1, "allreduce", "tcp"),
    ("none", "direct", 1 << 22, 0, "allreduce", "tcp"),
    ("q8", "sra", 1 << 22, 2, "allreduce", "tcp"),
    ("none", "auto", 1 << 18, 1, "mixed", "tcp"),
]


@pytest.mark.parametrize("case", DEAD_PEER, ids=lambda c: "-".join(map(str, c)))
def test_dead_peer(case):
    codec, algorithm, numel, victim, op = case[:5]
    res = launch(rank_dead_peer, WORLD, *case, timeout=70)
    assert res[victim].status == "killed", res[victim]
    survivors = check_all_ok([r for r in res if r.rank != victim])
    record("dead_peer", codec=codec, algorithm=algorithm, numel=numel, op=op, timeout_s=20,
           detect_s=[s["detect_s"] for s in survivors], fast_fail_s=[s["fast_fail_s"] for s in survivors],
           destroy_s=[s["destroy_s"] for s in survivors])
    for s in survivors:
        assert s["detect_s"] < 20 + 3, s  # within the timeout (usually well under a second)
        assert s["fast_fail_s"] < 0.5, s
        assert s["destroy_s"] < 2, s
        (t0, f0), (t1, f1) = s["threads_fds"]
        assert t1 <= t0 + 1 and f1 <= f0 + 1, s
