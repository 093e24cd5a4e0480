"""Faults over shared memory, as a user meets them: ranks of one machine (shared memory is the
default transport between a node's ranks) and two emulated machines of two ranks each with
hierarchy="node" (RINGZIP_NODE_ID). A rank SIGKILLed inside a 64 MB all-reduce, a rank that
never arrives, a rank that stalls past the group's timeout -- each with every codec. Every live
rank raises torch.distributed.DistBackendError naming the op, the group, the call's sequence
number, its rank and a peer, within the timeout + 20 s; destroy_process_group() and a group on
a new port then work in the same processes. No segment is left in /dev/shm however a job ends,
and one killed during setup is swept by the next job.

Launches are cheap (forked ranks, tests/reliability/_launch.py, each under a hard timeout), the
groups are not: a launch serves every codec. The kill launch keeps one spare victim process per
codec; the skip and stall launches run the nine codecs' groups side by side, so they time out
once, not nine times."""
from __future__ import annotations

import functools
import json
import os
import re
import signal
import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import ringzip
from _launch import check_all_ok, init, launch, record
from _shm import (CODECS, check_names, error_text, exact_allreduce, mapped_segments, segments, tcp_group, touch,
                  wait_for)

# Group ranks per layout, and the node of each (None: the machine's own key, one node).
LAYOUTS = {"flat": (3, None), "2x2": (4, [0, 0, 1, 1])}
KILL_TIMEOUT = timedelta(seconds=20)  # detection must not wait it out: the bound asserted is far below
LATE_TIMEOUT = 3.0  # the skip and stall groups' timeout, in seconds
KILL_NUMEL = 16 << 20  # 64 MB of float32: a call takes 0.3-0.7 s on 2 cores, the kill lands inside one


def _options(layout, codec, timeout):
    _, node_of = LAYOUTS[layout]
    return ringzip.Options(codec=codec, timeout=timeout, hierarchy="node" if node_of else "auto")


def _join_node(layout, group_rank):
    _, node_of = LAYOUTS[layout]
    if node_of:
        os.environ["RINGZIP_NODE_ID"] = f"machine{node_of[group_rank]}"
    else:
        os.environ.pop("RINGZIP_NODE_ID", None)


def _codec_allreduce(codec, n=1 << 17):
    """A float all-reduce under the group's codec: constant inputs of small integers come back
    exact from the dense codecs; top-k and random-k keep a fraction of the elements (the others
    stay 0 in the first call)."""
    x = torch.full((n,), float(dist.get_rank() + 1))
    dist.all_reduce(x)
    w = dist.get_world_size()
    if codec.startswith(("topk", "randomk")):
        assert torch.isin(x, torch.tensor([0.0, w * (w + 1) // 2])).all() and x.any(), (codec, x.unique())
    else:
        assert torch.equal(x, torch.full((n,), float(w * (w + 1) // 2))), (codec, x[:4])


def _recover(tmp, name, rank, world, codec):
    """A new group on a new port, in the processes that saw the failure."""
    tcp_group(tmp, name, rank, world, pg_options=ringzip.Options(codec=codec, timeout=timedelta(seconds=30)))
    exact_allreduce()
    _codec_allreduce(codec)
    dist.destroy_process_group()


def _default_group_name():
    return dist.distributed_c10d._get_default_group().group_name  # noqa: SLF001


# ---------------------------------------------------------------------------- SIGKILL


def _victim_rank(layout, i):
    world, _ = LAYOUTS[layout]
    return i % world  # every position in turn: leader, follower, either node


def rank_kill(proc, nprocs, tmp, layout):
    """Processes 0..world-2 survive every codec; process world-1+i is codec i's victim."""
    world, _ = LAYOUTS[layout]
    survivors = world - 1
    if proc >= survivors:
        i = proc - survivors
        wait_for(os.path.join(tmp, f"turn{i}"), 300)
        g = _victim_rank(layout, i)
        _join_node(layout, g)
        init(tmp, g, world, name=f"kill{i}", pg_options=_options(layout, CODECS[i], KILL_TIMEOUT))
        x = torch.full((KILL_NUMEL,), float(g + 1))
        exact_allreduce()
        dist.all_reduce(x.clone())  # the tuner's first-call work and first touches are behind us
        took = []
        for _ in range(2):  # later calls can be several times faster than the first
            t = time.monotonic()
            dist.all_reduce(x.clone())
            took.append(time.monotonic() - t)
        took = min(took)

        # A quarter of the quickest call's time into the next: amid its payload, while the
        # ranks write and read the rings.
        def die():
            time.sleep(took / 4)
            touch(os.path.join(tmp, f"killed{i}"), repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Thread(target=die, daemon=True).start()
        while True:
            dist.all_reduce(x.clone())
    out = {"pid": os.getpid()}
    for i, codec in enumerate(CODECS):
        victim = _victim_rank(layout, i)
        g = proc if proc < victim else proc + 1
        if proc == 0:
            touch(os.path.join(tmp, f"turn{i}"))
        _join_node(layout, g)
        init(tmp, g, world, name=f"kill{i}", pg_options=_options(layout, codec, KILL_TIMEOUT))
        group = _default_group_name()
        x = torch.full((KILL_NUMEL,), float(g + 1))
        exact_allreduce()  # seq 0: every rank is in
        dist.all_reduce(x.clone())  # seq 1; seq 2 and 3 are the victim's measure of a call
        seq, rec, starts = 2, None, []
        stop = time.monotonic() + KILL_TIMEOUT.total_seconds() + 25
        while rec is None and time.monotonic() < stop:
            starts.append(time.time())
            try:
                dist.all_reduce(x.clone())
                seq += 1
            except Exception as e:  # noqa: BLE001
                rec = {"type": type(e).__name__, "msg": error_text(e), "at": time.time(), "started": starts[-1],
                       "seq": seq, "rank": g, "world": world, "group": group}
        assert rec is not None, f"{codec}: no error within {stop} s of the victim's death"
        with open(os.path.join(tmp, f"killed{i}")) as f:
            rec["killed"] = float(f.read())
        rec["calls_after_kill"] = sum(t > rec["killed"] for t in starts)
        dist.destroy_process_group()
        _recover(tmp, f"after-kill{i}", proc, survivors, codec)
        out[codec] = rec
    return out


@functools.cache
def _kill_outcomes(layout):
    """One launch per layout, shared by the tests that read it."""
    world, _ = LAYOUTS[layout]
    return launch(rank_kill, world - 1 + len(CODECS), layout, timeout=240)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_sigkill_mid_allreduce_every_codec(layout):
    world, _ = LAYOUTS[layout]
    survivors = world - 1
    res = _kill_outcomes(layout)
    victims = res[survivors:]
    assert all(r.status == "killed" and r.code == signal.SIGKILL for r in victims), victims
    out = check_all_ok(res[:survivors])
    record("shm_sigkill", layout=layout, timeout_s=KILL_TIMEOUT.total_seconds(),
           detect_s={c: [o[c]["at"] - o[c]["killed"] for o in out] for c in CODECS})
    for codec in CODECS:
        # The death interrupts a call -- some survivor was inside it (one that needed the victim's
        # data) -- or falls between two: a short call (random-k's few values) whose every byte the
        # victim had sent completes on every survivor, and all fail the next one (seen once in CI).
        # None completes more than one call after it.
        inside = any(o[codec]["calls_after_kill"] == 0 for o in out)
        assert inside or len({o[codec]["seq"] for o in out}) == 1, (codec, [o[codec] for o in out])
        for o in out:
            r = o[codec]
            assert r["type"] == "DistBackendError", (codec, r)
            check_names(r["msg"], "allreduce", r["group"], r["seq"], r["rank"], r["world"])
            assert r["calls_after_kill"] <= 1, (codec, r)
            detect = r["at"] - r["killed"]
            assert detect < KILL_TIMEOUT.total_seconds() + 20, (codec, detect, r)
            # A dead peer is noticed by its pid (shared memory) or its closed sockets (Gloo), not
            # by the timeout.
            assert detect < 5, (codec, detect, r)
    assert not segments({o["pid"] for o in out}), segments()


# ---------------------------------------------------------------------------- skip, stall

LATE_RANK = {("skip", "flat"): 1, ("skip", "2x2"): 3, ("stall", "flat"): 2, ("stall", "2x2"): 1}


def rank_late(rank, world, tmp, layout, kind):
    """Nine groups, one per codec, all-reduce at once; the late rank skips the call (and makes its
    next one, a barrier, once the others raised) or sleeps past the timeout and then makes it."""
    late = LATE_RANK[(kind, layout)]
    _join_node(layout, rank)
    init(tmp, rank, world, name="base", pg_options=_options(layout, "none", timedelta(seconds=60)))
    groups = {c: dist.new_group(pg_options=_options(layout, c, timedelta(seconds=LATE_TIMEOUT))) for c in CODECS}
    names = {c: g.group_name for c, g in groups.items()}
    for g in groups.values():
        exact_allreduce(group=g)  # seq 0 of each group
    dist.barrier()
    out = {"pid": os.getpid(), "calls": {}}
    xs = {c: torch.full((1 << 20,), float(rank + 1)) for c in CODECS}

    def call(c):
        if rank == late and kind == "skip":
            dist.barrier(group=groups[c])
        else:
            dist.all_reduce(xs[c], group=groups[c])

    if rank == late:
        for r in range(world):
            if r != late:
                wait_for(os.path.join(tmp, f"raised{r}"), LATE_TIMEOUT + 30)
        if kind == "stall":
            time.sleep(0.2)  # past the others' timeout, not only past their failure
    works = {}
    t0 = time.monotonic()
    for c in CODECS:
        try:
            works[c] = dist.all_reduce(xs[c], group=groups[c], async_op=True) if rank != late else None
        except Exception as e:  # noqa: BLE001
            raise AssertionError(f"{c}: posting the all-reduce raised {e}") from e
    for c in CODECS:
        t = time.monotonic()
        try:
            works[c].wait() if rank != late else call(c)
        except Exception as e:  # noqa: BLE001
            out["calls"][c] = {"type": type(e).__name__, "msg": error_text(e), "group": names[c],
                               "after": time.monotonic() - (t if rank == late else t0)}
            continue
        raise AssertionError(f"{c}: rank {rank} got no error")
    touch(os.path.join(tmp, f"raised{rank}"))
    dist.destroy_process_group()
    for c in CODECS:
        _recover(tmp, f"after-{c}", rank, world, c)
    return out


@functools.cache
def _late_outcomes(kind, layout):
    world, _ = LAYOUTS[layout]
    return launch(rank_late, world, layout, kind, timeout=120)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("kind", ["skip", "stall"])
def test_late_rank_every_codec(kind, layout):
    world, _ = LAYOUTS[layout]
    late = LATE_RANK[(kind, layout)]
    out = check_all_ok(_late_outcomes(kind, layout))
    record("shm_late", kind=kind, layout=layout, timeout_s=LATE_TIMEOUT,
           raised_s={c: [o["calls"][c]["after"] for o in out] for c in CODECS}, late_rank=late)
    for r, o in enumerate(out):
        for c in CODECS:
            rec = o["calls"][c]
            assert rec["type"] == "DistBackendError", (c, r, rec)
            check_names(rec["msg"], "barrier" if r == late and kind == "skip" else "allreduce", rec["group"], 1, r,
                        world)
            if r == late:
                assert rec["after"] < 1.0, (c, r, rec)  # the others are gone: fail at once
            else:
                assert "mismatched" not in rec["msg"], (c, r, rec)
                assert LATE_TIMEOUT - 0.5 < rec["after"] < LATE_TIMEOUT + 20, (c, r, rec)
    assert not segments({o["pid"] for o in out}), segments()


def test_node_aware_errors_name_ranks_as_the_group_does():
    world, _ = LAYOUTS["2x2"]
    kill = check_all_ok(_kill_outcomes("2x2")[: world - 1])
    late = check_all_ok(_late_outcomes("stall", "2x2"))
    msgs = [o["calls"][c]["msg"] for o in late for c in CODECS]
    for i, c in enumerate(CODECS):
        victim = _victim_rank("2x2", i)
        for o in kill:
            msg = o[c]["msg"]
            msgs.append(msg)
            died = re.findall(r"rank (\d+) \(pid \d+\) died", msg)
            assert all(int(d) == victim for d in died), (c, victim, msg)
    for msg in msgs:
        sizes = {int(n) for n in re.findall(r"rank \d+ of (\d+)", msg)}
        assert sizes == {world}, msg


# ---------------------------------------------------------------------------- /dev/shm


def rank_ending(rank, world, tmp, out_dir, how):
    """A job that ends cleanly, by an exception out of every rank, or by SIGKILL of every rank
    inside a 64 MB all-reduce. Each rank first records its pid and how many segments it maps
    (its own and its peers'): proof that there was something to leak."""
    init(tmp, rank, world, pg_options=ringzip.Options(timeout=timedelta(seconds=30)))
    x = torch.full((KILL_NUMEL,), float(rank + 1))
    exact_allreduce()
    touch(os.path.join(out_dir, f"mapped{rank}"), json.dumps([os.getpid(), len(mapped_segments(os.getpid()))]))
    if how == "clean":
        dist.all_reduce(x)
        dist.destroy_process_group()
        return True
    if how == "exception":
        dist.all_reduce(x)
        raise ValueError("the training script failed")
    t = time.monotonic()
    dist.all_reduce(x.clone())
    threading.Timer((time.monotonic() - t) / 4, os.kill, (os.getpid(), signal.SIGKILL)).start()
    while True:
        dist.all_reduce(x.clone())


@pytest.mark.parametrize("how", ["clean", "exception", "sigkill"])
def test_no_segment_left_however_the_job_ends(how, tmp_path):
    world = 3
    res = launch(rank_ending, world, str(tmp_path), how, timeout=60)
    want = {"clean": "ok", "exception": "error", "sigkill": "killed"}[how]
    assert all(r.status == want for r in res), [(r.status, r.error[-300:]) for r in res]
    if how == "exception":
        assert all("the training script failed" in r.error for r in res)
    mapped = [json.loads((tmp_path / f"mapped{r}").read_text()) for r in range(world)]
    assert all(n == world for _, n in mapped), mapped
    assert not segments({pid for pid, _ in mapped}), segments()


def rank_dies_in_setup(rank, world, tmp, out_dir):
    """Both ranks wait in the shared-memory rendezvous for a third that never comes, each with
    its segment created and not yet unlinked, and are SIGKILLed there."""
    from ringzip import _C

    def die_once_all_created():
        wait_for_segment = time.monotonic() + 30
        while not segments({os.getpid()}) and time.monotonic() < wait_for_segment:
            time.sleep(0.005)
        touch(os.path.join(out_dir, f"created{rank}"), json.dumps([os.getpid(), segments({os.getpid()})]))
        for r in range(world):
            wait_for(os.path.join(out_dir, f"created{r}"), 30)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=die_once_all_created, daemon=True).start()
    store = dist.FileStore(os.path.join(tmp, "setup-store"), world)
    _C.ShmTransport(store, rank, world + 1, 60.0)
    raise AssertionError("the rendezvous of 3 ranks completed with 2")


def rank_next_job(rank, world, tmp):
    init(tmp, rank, world, pg_options=ringzip.Options(transport="shm", timeout=timedelta(seconds=30)))
    exact_allreduce(1 << 16)
    dist.destroy_process_group()
    return os.getpid()


def test_the_next_job_sweeps_the_segments_of_a_job_killed_in_setup(tmp_path):
    res = launch(rank_dies_in_setup, 2, str(tmp_path), timeout=60)
    assert all(r.status == "killed" and r.code == signal.SIGKILL for r in res), res
    created = [json.loads((tmp_path / f"created{r}").read_text()) for r in range(2)]
    dead = {pid for pid, _ in created}
    left = segments(dead)
    assert left and left == sorted(n for _, names in created for n in names), (left, created)
    pids = check_all_ok(launch(rank_next_job, 2, timeout=60))
    assert not segments(dead), f"the next job left the killed job's segments: {segments(dead)}"
    assert not segments(set(pids)), segments()
