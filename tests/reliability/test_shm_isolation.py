"""Jobs on one machine keep to their own shared memory. Segment names are not derived from
MASTER_ADDR/MASTER_PORT: a rank creates /dev/shm/ringzip-<pid>-<pid namespace>-<64 random bits>
and tells its peers the name through the group's store, so what could pair one job's rank with
another job's segment is the store. Covered: two jobs at once on their own stores; a second job
started with the first one's MASTER_ADDR/MASTER_PORT (its rank 0 cannot bind the port, its other
ranks reach the first job's store); a job restarted on the store of one killed in setup, whose
keys and segment are still there; segments that are not what a rank's peer would create (wrong
header, size, owner, mode, a symlink). Each second job gets its own segments or fails at init,
and no value ever crosses from one job to the other."""
from __future__ import annotations

import functools
import json
import os
import pwd
import secrets
import signal
import socket
import struct
import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from ringzip import _C
from _launch import check_all_ok, launch
from _shm import error_text, mapped_segments, pid_namespace, segments, tcp_group, touch, wait_for


def _segment_pids(names):
    return {int(n.split("-")[1]) for n in names}


def _job_values(job, rank, n):
    return torch.full((n,), float(rank + 1 + 1000 * job))


def _expected(job, world, n):
    return torch.full((n,), float(world * (world + 1) // 2 + 1000 * job * world))


# ---------------------------------------------------------------------------- two jobs at once


def rank_two_jobs(proc, nprocs, tmp):
    """Processes 0-1 are job 0, 2-3 job 1; all four set up at the same moment."""
    job, rank = divmod(proc, 2)
    touch(os.path.join(tmp, f"ready{proc}"))
    for p in range(nprocs):
        wait_for(os.path.join(tmp, f"ready{p}"), 30)
    tcp_group(tmp, f"job{job}", rank, 2)
    mapped = [name for _, name in mapped_segments(os.getpid())]
    for i in range(60):
        n = [1, 1000, 1 << 16, 1 << 20][i % 4]
        x = _job_values(job, rank, n)
        dist.all_reduce(x)
        assert torch.equal(x, _expected(job, 2, n)), (job, i, n, x[:4])
    dist.destroy_process_group()
    return {"job": job, "pid": os.getpid(), "mapped": mapped}


def test_two_jobs_at_once_keep_to_their_own_segments():
    out = check_all_ok(launch(rank_two_jobs, 4, timeout=90))
    for job in (0, 1):
        mine = [o for o in out if o["job"] == job]
        pids = {o["pid"] for o in mine}
        for o in mine:
            assert len(o["mapped"]) == 2 and _segment_pids(o["mapped"]) == pids, (job, o, pids)
    assert not set(out[0]["mapped"]) & set(out[2]["mapped"])
    assert not segments({o["pid"] for o in out}), segments()


# ---------------------------------------------------------------------------- the same port


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


B_TIMEOUT = 3.0  # the second job's init timeout (its shared-memory rendezvous waits that long)


def rank_same_port(proc, nprocs, tmp, port):
    """Job 0 (processes 0-1) runs all-reduces while job 1 (2-3) starts with the same
    MASTER_ADDR/MASTER_PORT; job 0 stops once job 1 has failed."""
    job, rank = divmod(proc, 2)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if job == 0:
        dist.init_process_group("ringzip", init_method="env://", rank=rank, world_size=2,
                                timeout=timedelta(seconds=30))
        mapped = [name for _, name in mapped_segments(os.getpid())]
        touch(os.path.join(tmp, f"running{rank}"))
        calls, stop = 0, time.monotonic() + 60
        while True:
            # Both ranks stop after the same call: each seeing the files on its own, one ran an
            # all-reduce more than the other, which the mismatch check then reported.
            done = time.monotonic() >= stop or all(os.path.exists(os.path.join(tmp, f"failed{r}")) for r in (0, 1))
            flag = torch.tensor([1.0 if done else 0.0])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if flag.item():
                break
            x = _job_values(0, rank, 1000)
            dist.all_reduce(x)
            assert torch.equal(x, _expected(0, 2, 1000)), (calls, x[:4])
            calls += 1
            time.sleep(0.01)
        dist.barrier()
        dist.destroy_process_group()
        return {"job": 0, "pid": os.getpid(), "mapped": mapped, "calls": calls}
    for r in (0, 1):
        wait_for(os.path.join(tmp, f"running{r}"), 60)
    out = {"job": 1, "pid": os.getpid(), "mapped": [], "stage": "init"}
    t0 = time.monotonic()
    try:
        dist.init_process_group("ringzip", init_method="env://", rank=rank, world_size=2,
                                timeout=timedelta(seconds=B_TIMEOUT))
        out["mapped"] = [name for _, name in mapped_segments(os.getpid())]
        out["stage"] = "call"
        x = _job_values(1, rank, 1000)
        dist.all_reduce(x)
        out["stage"], out["value"] = "done", float(x[0])
    except Exception as e:  # noqa: BLE001
        out["error"] = f"{type(e).__name__}: {error_text(e)}"
    out["after"] = time.monotonic() - t0
    touch(os.path.join(tmp, f"failed{rank}"))
    return out


def test_a_second_job_on_the_same_master_port_fails_and_the_first_runs_on():
    out = check_all_ok(launch(rank_same_port, 4, _free_port(), timeout=120))
    first, second = out[:2], out[2:]
    pids = {o["pid"] for o in first}
    for o in first:
        assert o["calls"] > 0 and _segment_pids(o["mapped"]) == pids, o
    # Its rank 0 cannot host the store; its rank 1 reaches the first job's store, finds no
    # partner for its shared memory and no peer for Gloo: it never completes a call.
    assert second[0]["stage"] == "init" and "EADDRINUSE" in second[0]["error"], second[0]
    for o in second:
        assert o["stage"] != "done" and o["error"], o
        assert not _segment_pids(o["mapped"]) & pids, o
        assert o["after"] < B_TIMEOUT + 20, o
    assert not segments({o["pid"] for o in out}), segments()


# ---------------------------------------------------------------------------- a reused store


def rank_killed_in_setup(rank, world, tmp, store_path, out_dir):
    """Rank 0 of a 2-rank job whose rank 1 never comes: SIGKILLed once its segment exists and
    its name is in the store."""

    def die():
        probe, end = dist.FileStore(store_path, 2), time.monotonic() + 30
        while not (segments({os.getpid()}) and probe.check(["shm/1/segment/0"])) and time.monotonic() < end:
            time.sleep(0.005)
        touch(os.path.join(out_dir, "dead"), json.dumps([os.getpid(), segments({os.getpid()})]))
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=die, daemon=True).start()
    _C.ShmTransport(dist.FileStore(store_path, 2), 0, 2, 60.0)
    raise AssertionError("a rendezvous of 2 completed with 1")


def rank_restarted(rank, world, tmp, store_path, dead_pid):
    t0 = time.monotonic()
    try:
        t = _C.ShmTransport(dist.FileStore(store_path, world), rank, world, 3.0)
    except Exception as e:  # noqa: BLE001
        return {"error": error_text(e), "after": time.monotonic() - t0}
    mapped = [name for _, name in mapped_segments(os.getpid())]
    peer = 1 - rank
    got = torch.empty(1 << 16, dtype=torch.int64)
    s = t.isend(torch.full((1 << 16,), 7 + rank, dtype=torch.int64), peer, 1)
    t.recv(got, peer, 1)
    s.wait()
    t.close()
    return {"mapped": mapped, "ok": bool(torch.equal(got, torch.full_like(got, 7 + peer)))}


def test_a_job_restarted_on_the_store_of_one_killed_in_setup(tmp_path):
    """The killed job's rank 0 took generation 1 and published its segment, rank 1 never came:
    the restarted job's rank 0 takes generation 2, its rank 1 generation 1 and finds the dead
    rank's segment name under it. It must not map that segment, and the ranks either pair up
    with segments of their own or fail at init, saying why."""
    store_path = str(tmp_path / "store")
    res = launch(rank_killed_in_setup, 1, store_path, str(tmp_path), timeout=60)
    assert res[0].status == "killed", res
    dead_pid, dead = json.loads((tmp_path / "dead").read_text())
    assert dead and segments({dead_pid}) == dead
    out = check_all_ok(launch(rank_restarted, 2, store_path, dead_pid, timeout=60))
    for o in out:
        if "error" in o:
            assert "setup failed" in o["error"] and o["after"] < 3.0 + 20, o
        else:
            assert o["ok"] and dead_pid not in _segment_pids(o["mapped"]), o
    # Failing, they say why: the store's keys from the killed job put them out of step.
    errors = [o["error"] for o in out if "error" in o]
    assert not errors or any("out of step" in e and "fresh store" in e for e in errors), errors
    assert not segments({dead_pid}), "the dead job's segment survived the restarted job's setup"


# ---------------------------------------------------------------------------- foreign segments

RING = 64 << 10
# csrc/transport/shm/segment.h: SegmentHeader (256 bytes) then one 32,896-byte RingControl per
# rank, padded to a page, then the rings.
DATA_OFFSET = (256 + 2 * 32896 + 4095) // 4096 * 4096
TOTAL = DATA_OFFSET + RING
MAGIC = 0x315A52474E495221
VERSION = _C.shm_segment_version


def _start_time(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    return int(s[s.rindex(")") + 2:].split()[19])


def _craft(path, variant):
    """A segment as rank 0 of 2 would create it, of a live process (the launcher: no sweep
    removes it), but for `variant`."""
    fields = {"magic": MAGIC, "version": VERSION, "rank": 0, "size": 2, "ring": RING, "total": TOTAL}
    fields.update({"bad magic": {"magic": MAGIC ^ 1}, "other version": {"version": VERSION + 1},
                   "other rank": {"rank": 1}, "other ring size": {"ring": RING * 2},
                   "wrong total": {"total": TOTAL + 4096}}.get(variant, {}))
    with open(path, "wb") as f:
        f.truncate(64 if variant == "truncated" else TOTAL + (4096 if variant == "longer file" else 0))
        if variant != "truncated":
            f.write(struct.pack("<QIiiiQQQ", fields["magic"], fields["version"], fields["rank"], fields["size"],
                                os.getppid(), _start_time(os.getppid()), fields["ring"], fields["total"]))
    os.chmod(path, 0o666 if variant == "mode 0666" else 0o600)
    if variant == "owner nobody":
        nobody = pwd.getpwnam("nobody")
        os.chown(path, nobody.pw_uid, nobody.pw_gid)


REFUSED = {  # variant: what the refusal names
    "bad magic": "is not a ringzip segment of this version",
    "other version": "is not a ringzip segment of this version",
    "other rank": "belongs to rank 1 of 2",
    "other ring size": "has rings of 131072 bytes",
    "wrong total": "has the wrong size",
    "longer file": "has the wrong size",
    "truncated": "cannot map the shared-memory segment",
    "symlink": "Too many levels of symbolic links",
    "missing": "is that rank on another host, or did it exit?",
}
UNSAFE = ["owner nobody", "mode 0666"]


def rank_meets_foreign_segments(rank, world, tmp, variants):
    """For each variant: a store in which rank 0 published the crafted segment and marked it
    mapped; this process sets up as rank 1 of 2."""
    out = {}
    for i, v in enumerate(variants):
        name = f"{_shm_prefix()}-{i:016x}"
        path = "/dev/shm/" + name
        if v == "symlink":
            _craft(path + "-target", "valid")
            os.symlink(path + "-target", path)
        elif v != "missing":
            _craft(path, v)
        store = dist.FileStore(os.path.join(tmp, f"store{i}"), 1)
        store.add("shm/generation/0", 1)
        store.set("shm/1/segment/0", "/" + name)
        store.set("shm/1/mapped/0", "1")
        t0 = time.monotonic()
        try:
            _C.ShmTransport(store, 1, 2, 5.0, RING).close()
            out[v] = {"accepted": True}
        except Exception as e:  # noqa: BLE001
            out[v] = {"accepted": False, "error": str(e), "after": time.monotonic() - t0}
        out[v]["left"] = segments({os.getpid()})
        for p in (path, path + "-target"):
            if os.path.lexists(p):
                os.unlink(p)
    return out


def _shm_prefix():
    """A name of the shape segment.cc gives, of the launcher (alive: no sweep removes it)."""
    return f"ringzip-{os.getppid()}-{pid_namespace():x}-{secrets.randbits(32):08x}"


@functools.cache
def _foreign():
    return check_all_ok(launch(rank_meets_foreign_segments, 1, list(REFUSED) + UNSAFE, timeout=60))[0]


@pytest.mark.parametrize("variant", list(REFUSED))
def test_a_segment_that_is_not_a_peers_is_refused(variant):
    o = _foreign()[variant]
    assert not o["accepted"], o
    assert "setup failed" in o["error"] and REFUSED[variant] in o["error"], o
    assert o["after"] < 2, o
    assert not o["left"], o


@pytest.mark.parametrize("variant", UNSAFE)
def test_a_segment_of_another_owner_or_open_to_others_is_refused(variant):
    o = _foreign()[variant]
    assert not o["left"], o
    assert not o["accepted"], o
    assert "setup failed" in o["error"], o
