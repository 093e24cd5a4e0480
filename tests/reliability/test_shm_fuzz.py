"""Corruption of the live shared memory of a 2-rank job: segment headers, ring controls (head,
tail, acknowledgement slots) and the headers of frames in flight are overwritten with random
bytes, truncated sizes, offsets out of range and numbers that jump, from another process,
through /proc/<pid>/map_files (the segments are unlinked once mapped). After each corruption
the ranks run all-reduces whose every value is checked: each rank must end with a correct
result or an error -- never a wrong value, never a hang past the timeout, never a crash.

Layout (csrc/transport/shm/segment.h, ring.h): a segment is a 256-byte SegmentHeader (magic,
version, rank, size, pid, start time, ring bytes, total bytes; then state, bell and sleepers on
cache lines of their own), one 32,896-byte RingControl per rank (head, tail, 4096
acknowledgement slots), padding to a page, then one ring per sender. Frames are a 32-byte
header (kind, tag, payload, total, number) and the payload, padded to 64 bytes; a Data frame's
total is where its payload starts in the message, its number the message's.

A case corrupts either a job paused between calls ("idle": both ranks wait on a file) or the
frames rank 0 parked in rank 1's inbox ("inflight": rank 0 entered the all-reduce, rank 1
waits). Cases and their random bytes come from fixed seeds; a launch runs all of them, one
group each, with faulthandler armed so that a hang leaves every rank's stack behind."""
from __future__ import annotations

import faulthandler
import mmap
import os
import random
import struct
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import ringzip
from ringzip import _C
from _launch import launch
from _shm import error_text, mapped_segments, touch, wait_for

MAGIC = 0x315A52474E495221
HEADER = 256
CONTROL = 32896
ACKS = 4096
STATE, BELL, SLEEPERS = 64, 128, 192
HEAD, TAIL, ACK0 = 0, 64, 128
FRAME = 32
KINDS = {"message": 0x4D534731, "data": 0x44415431, "wrap": 0x57524150}
TIMEOUT = 3.0  # the group's: a corruption that only stalls the ranks ends here
NUMEL = 1 << 20  # 4 MB: each ring step's 2 MB chunk laps the 2 MiB ring
CALLS = 3


def _values(rank, n=NUMEL):
    i = torch.arange(n, dtype=torch.int64)
    return ((i * 7919 + rank * 104729) % 1000003).float()  # exact in float32, no short period


def _expected(world, n=NUMEL):
    return sum(_values(r, n) for r in range(world))


# ---------------------------------------------------------------------------- the mutations


def _u64(buf, off, value):
    struct.pack_into("<Q", buf, off, value & (2**64 - 1))


def _get64(buf, off):
    return struct.unpack_from("<Q", buf, off)[0]


def _u32(buf, off, value):
    struct.pack_into("<I", buf, off, value & (2**32 - 1))


def _rand(buf, off, n, rng):
    buf[off:off + n] = bytes(rng.getrandbits(8) for _ in range(n))


class Segment:
    """A mapped segment of a 2-rank group and the offsets the mutations need."""

    def __init__(self, buf):
        self.buf = buf
        magic, version, rank, size, _pid, _start, ring, total = struct.unpack_from("<QIiiiQQQ", buf, 0)
        data = (HEADER + size * CONTROL + 4095) // 4096 * 4096
        assert (magic, version, size, total) == (MAGIC, _C.shm_segment_version, 2, len(buf)) and data + ring == total, \
            "the segment layout is not the one this test knows"
        self.rank, self.ring, self.data = rank, ring, data

    def control(self):  # the one ring of a 2-rank segment: from the other rank
        return HEADER

    def head(self):
        return _get64(self.buf, self.control() + HEAD)

    def tail(self):
        return _get64(self.buf, self.control() + TAIL)

    def frame(self, skip=0):
        """Offset of the frame header `skip` frames after the consumer's tail."""
        pos = self.tail()
        for _ in range(skip):
            payload = _get64(self.buf, self.data + pos % self.ring + 8)
            pos += (FRAME + payload + 63) // 64 * 64
        return self.data + pos % self.ring


def _mutate(seg, what, rng):
    b, ctl = seg.buf, seg.control()
    cap = seg.ring
    if what == "header random bytes":
        _rand(b, 0, 48, rng)
    elif what == "header magic and version":
        _u64(b, 0, rng.getrandbits(64))
        _u32(b, 8, rng.getrandbits(32))
    elif what == "header rank and size":
        _u32(b, 12, rng.choice([-1, 7, 2**31 - 1]))
        _u32(b, 16, rng.choice([0, -5, 1 << 20]))
    elif what == "header pid of init, start time 0":
        _u32(b, 20, 1)
        _u64(b, 24, 0)
    elif what == "header truncated sizes":
        _u64(b, 32, 4096)
        _u64(b, 40, 64)
    elif what == "header huge sizes":
        _u64(b, 32, 2**63)
        _u64(b, 40, 2**64 - 1)
    elif what == "state random":
        _u32(b, STATE, rng.getrandbits(32) | 4)
    elif what == "state closed":
        _u32(b, STATE, 1)
    elif what == "bell and sleepers random":
        _u32(b, BELL, rng.getrandbits(32))
        _u32(b, SLEEPERS, rng.getrandbits(32))
    elif what == "sleepers wrapped negative":
        _u32(b, SLEEPERS, 2**32 - 1)
    elif what.startswith(("head ", "tail ")):  # "head +64", "tail +ring/2", "head random", ...
        word, change = what.split(" ")
        off = ctl + (HEAD if word == "head" else TAIL)
        steps = {"+64": 64, "-64": -64, "+ring": cap, "+ring/2": cap // 2}
        _u64(b, off, rng.getrandbits(64) if change == "random" else _get64(b, off) + steps[change])
    elif what == "acks random":
        _rand(b, ctl + ACK0, ACKS * 8, rng)
    elif what == "acks jump ahead":
        for i in range(ACKS):
            _u64(b, ctl + ACK0 + 8 * i, i + ACKS * rng.randrange(1, 1000))
    elif what == "control random bytes":
        _rand(b, ctl, 256, rng)
    elif what == "stale ring bytes":
        _rand(b, seg.data + rng.randrange(0, cap - 4096), 4096, rng)
    elif what.startswith(("message ", "data ")):
        f = seg.frame(0 if what.startswith("message ") else 1)
        field = what.split(" ", 1)[1]
        kind, tag, payload, total, number = struct.unpack_from("<IIQQQ", b, f)
        if field == "random header":
            _rand(b, f, FRAME, rng)
        elif field.startswith("kind "):
            _u32(b, f, KINDS[field[5:]] if field[5:] in KINDS else rng.getrandbits(32))
        elif field == "tag random":
            _u32(b, f + 4, tag ^ (1 + rng.getrandbits(30)))
        elif field == "payload -64":
            _u64(b, f + 8, payload - 64)
        elif field == "payload +64":
            _u64(b, f + 8, payload + 64)
        elif field == "payload huge":
            _u64(b, f + 8, 2**63 + rng.getrandbits(32))
        elif field == "total -4":
            _u64(b, f + 16, total - 4)
        elif field == "total +4096":
            _u64(b, f + 16, total + 4096)
        elif field == "total huge":
            _u64(b, f + 16, 2**62)
        elif field == "number +1":
            _u64(b, f + 24, number + 1)
        elif field == "number +4096":
            _u64(b, f + 24, number + ACKS)
        elif field == "number random":
            _u64(b, f + 24, rng.getrandbits(64))
        else:
            raise ValueError(what)
    else:
        raise ValueError(what)


# (mode, target rank's segment, mutation, what the ranks may end with). "error": every rank
# raises; "any": each rank raises or is right -- a field read only at setup, a hint, or a
# control word its owner may store again before the other side reads it (the producer
# republishes head with its next frame). A tail is the consumer's: it finds any other value there
# before it frees its next frame (ring.h), so a moved tail is always an error.
CASES = [
    ("idle", 1, "header random bytes", "any"),
    ("idle", 0, "header magic and version", "any"),
    ("idle", 1, "header rank and size", "any"),
    ("idle", 1, "header pid of init, start time 0", "any"),
    ("idle", 0, "header truncated sizes", "any"),
    ("idle", 1, "header huge sizes", "any"),
    ("idle", 1, "state random", "error"),
    ("idle", 0, "state closed", "error"),
    ("idle", 1, "bell and sleepers random", "any"),
    ("idle", 0, "sleepers wrapped negative", "any"),
    ("idle", 1, "head +64", "any"),
    ("idle", 1, "head +ring/2", "any"),
    ("idle", 0, "head +ring", "any"),
    ("idle", 1, "head -64", "any"),
    ("idle", 0, "head random", "any"),
    ("idle", 1, "tail +64", "error"),
    ("idle", 1, "tail +ring/2", "error"),
    ("idle", 0, "tail +ring", "error"),
    ("idle", 1, "tail -64", "error"),
    ("idle", 0, "tail random", "error"),
    ("idle", 1, "acks random", "any"),
    ("idle", 0, "acks jump ahead", "any"),
    ("idle", 1, "control random bytes", "any"),
    ("idle", 1, "stale ring bytes", "any"),
    ("inflight", 1, "message random header", "error"),
    ("inflight", 1, "message kind random", "error"),
    ("inflight", 1, "message kind data", "error"),
    ("inflight", 1, "message kind wrap", "error"),
    ("inflight", 1, "message tag random", "error"),
    ("inflight", 1, "message payload -64", "error"),
    ("inflight", 1, "message payload huge", "error"),
    ("inflight", 1, "message total -4", "error"),
    ("inflight", 1, "message total +4096", "error"),
    ("inflight", 1, "message total huge", "error"),
    ("inflight", 1, "message number +1", "error"),
    ("inflight", 1, "message number +4096", "error"),
    ("inflight", 1, "message number random", "error"),
    ("inflight", 1, "data kind message", "error"),
    ("inflight", 1, "data payload -64", "error"),
    ("inflight", 1, "data payload +64", "error"),
    ("inflight", 1, "data random header", "error"),
    ("inflight", 1, "data tag random", "any"),  # a Data frame's tag is not read: its payload is still right
    ("inflight", 1, "data number random", "error"),
    ("inflight", 1, "data total -4", "error"),  # its place in the message
    ("inflight", 1, "head +ring/2", "any"),
    ("inflight", 1, "head +ring", "any"),
    ("inflight", 1, "tail +ring/2", "error"),
]
SEED = 20261203


# ---------------------------------------------------------------------------- the processes


def _run_calls(rank, world, first_started=None):
    """CALLS all-reduces, every value checked; 'ok', or the first error."""
    want = _expected(world)
    for i in range(CALLS):
        x = _values(rank)
        try:
            if i == 0 and first_started is not None:
                first_started()
            dist.all_reduce(x)
        except Exception as e:  # noqa: BLE001
            return {"outcome": "error", "type": type(e).__name__, "msg": error_text(e)[:400], "call": i}
        if not torch.equal(x, want):
            bad = (x != want).nonzero().flatten()
            return {"outcome": "wrong", "call": i, "wrong": int(bad.numel()), "first": int(bad[0])}
    return {"outcome": "ok"}


def rank_fuzzed(proc, nprocs, tmp, out_dir):
    """Processes 0 and 1 are the ranks, process 2 corrupts their memory."""
    if proc == 2:
        return _fuzzer(tmp)
    rank, world = proc, 2
    out = {}
    for k, (mode, _target, what, _) in enumerate(CASES):
        with open(os.path.join(out_dir, f"stacks{rank}"), "a") as stacks:
            stacks.write(f"--- case {k}: {mode} {what}\n")
            stacks.flush()
            faulthandler.dump_traceback_later(TIMEOUT * CALLS + 20, file=stacks)
            dist.init_process_group("ringzip", init_method="file://" + os.path.join(tmp, f"fz{k}"), rank=rank,
                                    world_size=world, pg_options=ringzip.Options(
                                        algorithm="ring", timeout=timedelta(seconds=TIMEOUT)))
            warm = _run_calls(rank, world)  # the rings lap: stale frames fill them
            assert warm["outcome"] == "ok", (k, warm)
            touch(os.path.join(tmp, f"ready{k}.{rank}"), str(os.getpid()))
            if mode == "idle" or rank == 1:
                wait_for(os.path.join(tmp, f"go{k}"), 60)
                res = _run_calls(rank, world)
            else:
                res = _run_calls(rank, world, lambda: touch(os.path.join(tmp, f"posted{k}")))
            out[k] = res
            dist.destroy_process_group()
            faulthandler.cancel_dump_traceback_later()
    return out


def _open_segment(pid, rank):
    """The segment of `rank`, as process `pid` maps it (unlinked: reached through map_files)."""
    for rng_, _name in mapped_segments(pid):
        fd = os.open(f"/proc/{pid}/map_files/{rng_}", os.O_RDWR)
        try:
            m = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        if struct.unpack_from("<i", m, 12)[0] == rank:
            return m
        m.close()
    raise AssertionError(f"process {pid} maps no segment of rank {rank}")


def _fuzzer(tmp):
    done = {}
    for k, (mode, target, what, _) in enumerate(CASES):
        rng = random.Random(SEED * 1000 + k)
        for r in (0, 1):
            wait_for(os.path.join(tmp, f"ready{k}.{r}"), 60)
        with open(os.path.join(tmp, f"ready{k}.0")) as f:
            pid0 = int(f.read())
        m = _open_segment(pid0, target)
        seg = Segment(m)
        if mode == "inflight":
            # Rank 0's first message fills rank 1's ring; wait until it stops moving.
            wait_for(os.path.join(tmp, f"posted{k}"), 30)
            last, still = seg.head(), time.monotonic()
            while time.monotonic() - still < 0.1:
                time.sleep(0.005)
                if seg.head() != last:
                    last, still = seg.head(), time.monotonic()
            done[k] = {"parked": seg.head() - seg.tail()}
        _mutate(seg, what, rng)
        m.flush()
        m.close()
        touch(os.path.join(tmp, f"go{k}"))
    return done


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    out_dir = str(tmp_path_factory.mktemp("shm_fuzz"))
    t0 = time.monotonic()
    res = launch(rank_fuzzed, 3, out_dir, timeout=150)
    took = time.monotonic() - t0
    stacks = ""
    for r in (0, 1):
        p = os.path.join(out_dir, f"stacks{r}")
        if os.path.exists(p):
            with open(p) as f:
                stacks += f"=== rank {r}\n" + f.read()[-6000:]
    bad = [r for r in res if r.status != "ok"]
    assert not bad, "\n".join(f"process {r.rank}: {r.status} {r.code} {r.error[-2000:]}" for r in bad) + "\n" + stacks
    return {"ranks": [r.value for r in res[:2]], "fuzzer": res[2].value, "seconds": took}


def _case_id(case):
    return f"{case[0]}-{case[1]}-{case[2].replace(' ', '_')}"


@pytest.mark.parametrize("k", range(len(CASES)), ids=[_case_id(c) for c in CASES])
def test_corruption_is_an_error_or_harmless(fuzzed, k):
    mode, target, what, expect = CASES[k]
    outs = [ranks[str(k)] for ranks in fuzzed["ranks"]]  # JSON keys
    for r, o in enumerate(outs):
        assert o["outcome"] != "wrong", f"rank {r} accepted a wrong value after '{what}': {o}"
        if o["outcome"] == "error":
            assert o["type"] == "DistBackendError" and "allreduce" in o["msg"], (r, o)
    if expect == "error":
        assert all(o["outcome"] == "error" for o in outs), outs
    if mode == "inflight":
        assert fuzzed["fuzzer"][str(k)]["parked"] > 0, fuzzed["fuzzer"][str(k)]
