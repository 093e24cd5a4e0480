"""Fork-based launcher for the reliability tests.

Each launch forks ``world`` ranks from the (already torch-importing) test process, so a
scenario costs milliseconds instead of a fresh interpreter per rank: fault scenarios can each
sacrifice a rank process. Every rank runs ``fn(rank, world, tmpdir, *args)``; its return value
(JSON-able) or exception text is written to a file. Hard timeout: ranks still alive after
``timeout`` seconds are SIGKILLed and reported as hung. A rank that kills itself (fault
injection) is reported with its signal.
"""
from __future__ import annotations

import json
import os
import signal
import tempfile
import time
import traceback
from dataclasses import dataclass


@dataclass
class RankResult:
    rank: int
    status: str  # "ok", "error", "killed", "hung", "exit"
    value: object = None
    error: str = ""
    code: int = 0


def _child(fn, rank, world, tmp, args):
    out = os.path.join(tmp, f"result{rank}.json")
    try:
        import torch

        torch.set_num_threads(1)
        value = fn(rank, world, tmp, *args)
        res = {"status": "ok", "value": value}
    except BaseException as e:  # noqa: BLE001
        res = {"status": "error", "error": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"}
    with open(out + ".tmp", "w") as f:
        json.dump(res, f)
    os.replace(out + ".tmp", out)
    os._exit(0)  # no interpreter teardown: a stuck backend thread must not hide the result


def launch(fn, world: int, *args, timeout: float = 60.0) -> list[RankResult]:
    with tempfile.TemporaryDirectory(prefix="rz_rel_") as tmp:
        pids = []
        for rank in range(world):
            pid = os.fork()
            if pid == 0:
                try:
                    os.setpgid(0, 0)
                    _child(fn, rank, world, tmp, args)
                finally:
                    os._exit(3)
            pids.append(pid)
        deadline = time.monotonic() + timeout
        codes: dict[int, int] = {}
        while len(codes) < world and time.monotonic() < deadline:
            for r, pid in enumerate(pids):
                if r in codes:
                    continue
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[r] = status
            time.sleep(0.02)
        results = []
        for r, pid in enumerate(pids):
            if r not in codes:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.waitpid(pid, 0)
                results.append(RankResult(r, "hung"))
                continue
            st = codes[r]
            path = os.path.join(tmp, f"result{r}.json")
            if os.WIFSIGNALED(st):
                results.append(RankResult(r, "killed", code=os.WTERMSIG(st)))
            elif os.path.exists(path):
                with open(path) as f:
                    res = json.load(f)
                results.append(RankResult(r, res["status"], res.get("value"), res.get("error", "")))
            else:
                results.append(RankResult(r, "exit", code=os.WEXITSTATUS(st)))
        return results


def record(test: str, **fields) -> None:
    """With RINGZIP_FAULT_LOG=FILE, appends one JSON line of what a fault test measured (how long
    a fault took to surface, per rank and case): docs/reliability.md's table is made from it."""
    path = os.environ.get("RINGZIP_FAULT_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"test": test, **fields}) + "\n")


def check_all_ok(results: list[RankResult]) -> list:
    bad = [r for r in results if r.status != "ok"]
    assert not bad, "\n".join(f"rank {r.rank}: {r.status} {r.code} {r.error}" for r in bad)
    return [r.value for r in results]


def init(tmp: str, rank: int, world: int, name: str = "rdv", **kw):
    """init_process_group('ringzip') on a fresh file store under tmp."""
    import torch.distributed as dist

    import ringzip  # noqa: F401

    dist.init_process_group("ringzip", init_method="file://" + os.path.join(tmp, name), rank=rank,
                            world_size=world, **kw)


def threads_and_fds() -> tuple[int, int]:
    from ringzip.bench.common import threads_and_fds as count  # the kept TCP connections aside

    return count()


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
