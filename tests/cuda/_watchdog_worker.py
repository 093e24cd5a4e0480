"""One rank of a CUDA watchdog scenario (run by test_watchdog_cuda.py under a hard timeout).

argv: scenario rank world store_dir out_json
  solo      world 1: a call held behind a long kernel on the caller's stream (torch.cuda._sleep)
            past its 2 s timeout must fail with DistBackendError at ~2 s; a wait(timeout) shorter
            than a call must raise without harming the group; the group is poisoned after the
            failure, and a new group works after destroy_process_group().
  missing   world 2: rank 1 never makes rank 0's second all_reduce; rank 0 must raise
            DistBackendError at its 3 s timeout; then both destroy the group and a new one works.
  mismatch  world 2: rank 0 calls all_reduce while rank 1 calls a device barrier; both must raise
            the same mismatch message (diagnosed through the store) well before the 30 s timeout.
Every step's outcome goes to out_json; the test asserts on it.
"""
import json
import os
import sys
import time
import traceback
from datetime import timedelta

scenario, rank, world, store_dir, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
os.environ.setdefault("NCCL_MULTI_RANK_GPU_ENABLE", "1")
os.environ.pop("RINGZIP_TRANSPORT", None)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import ringzip  # noqa: E402

R = {"scenario": scenario, "rank": rank, "error": None}


def step(what):
    """Progress on stdout: the test shows the log of a rank that crashed or hung."""
    print(f"[{scenario} rank {rank}] {what}", flush=True)


def save():
    with open(out, "w") as f:
        json.dump(R, f)


def init(name, seconds):
    store = dist.FileStore(os.path.join(store_dir, name), world)
    # Meet first (processes start and import torch at their own pace): the group's short timeout
    # then covers the scenario, not the other rank's start-up.
    store.set(f"test/up/{rank}", "1")
    store.wait([f"test/up/{r}" for r in range(world)], timedelta(seconds=90))
    dist.init_process_group("ringzip", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=seconds))
    return store


def expect_failure(fn):
    """(elapsed seconds, exception type name, message) of fn(), which must raise."""
    t0 = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return time.monotonic() - t0, type(e).__name__, str(e)[:2000]
    return time.monotonic() - t0, None, ""


def status(w):
    """[is_completed, is_success, exception() is not None] of a Work."""
    out = [bool(w.is_completed()), bool(w.is_success())]
    try:
        out.append(w.exception() is not None)
    except Exception as e:  # noqa: BLE001 -- a torch whose binding cannot return it
        out.append(f"exception() raised {type(e).__name__}: {e}")
    return out


def destroy_and_recreate():
    """destroy_process_group() once the device is idle (timed), then a new group ("b") must work:
    an all_reduce on CUDA tensors is right."""
    torch.cuda.synchronize()
    step("device idle; destroying the group")
    t0 = time.monotonic()
    dist.destroy_process_group()
    R["destroy_seconds"] = time.monotonic() - t0
    step(f"destroyed in {R['destroy_seconds']:.2f} s")
    init("b", 60)
    x = torch.full((1000,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    R["new_group_ok"] = bool((x == world * (world + 1) / 2).all())
    dist.destroy_process_group()


def cycles_per_second():
    torch.cuda._sleep(1_000_000)  # warm-up
    torch.cuda.synchronize()
    c = 200_000_000
    t0 = time.perf_counter()
    torch.cuda._sleep(c)
    torch.cuda.synchronize()
    return c / (time.perf_counter() - t0)


def solo():
    init("a", 2)
    ringzip.set_options(algorithm="ring")  # world 1: no NCCL kernel in flight when it is aborted
    x = torch.ones(1000, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    step("first all_reduce done")
    cps = cycles_per_second()
    R["cycles_per_second"] = cps
    step(f"{cps:.3g} GPU cycles/s")

    # wait(timeout) shorter than the call: raises, the call completes, the group stays usable.
    torch.cuda._sleep(int(1.0 * cps))
    w = dist.all_reduce(x, async_op=True)
    R["short_wait"] = expect_failure(lambda: w.wait(timeout=timedelta(milliseconds=200)))
    step(f"short wait: {R['short_wait']}")
    w.wait()
    torch.cuda.synchronize()
    R["short_wait_then_success"] = bool(w.is_completed() and w.is_success())
    y = torch.ones(10, device="cuda")
    dist.all_reduce(y)
    torch.cuda.synchronize()
    R["usable_after_short_wait"] = bool((y == 1).all())

    # A call held past its deadline: the watchdog fails it at ~2 s.
    torch.cuda._sleep(int(6.0 * cps))
    w = dist.all_reduce(x, async_op=True)
    R["timeout"] = expect_failure(lambda: w.wait(timeout=timedelta(seconds=30)))
    step(f"timeout: {R['timeout']}")
    R["timeout_status"] = status(w)
    R["after_timeout"] = expect_failure(lambda: dist.all_reduce(y))
    step(f"after timeout: {R['after_timeout']}")
    destroy_and_recreate()


def missing():
    store = init("a", 3)
    x = torch.full((1000,), float(rank + 1), device="cuda")
    dist.all_reduce(x)  # both ranks: the communicator exists and is connected
    torch.cuda.synchronize()
    R["first_ok"] = bool((x == 3).all())
    if rank == 0:
        w = dist.all_reduce(x, async_op=True)  # rank 1 never makes this call
        R["timeout"] = expect_failure(lambda: w.wait(timeout=timedelta(seconds=60)))
        R["after_timeout"] = expect_failure(lambda: dist.all_reduce(x))
        store.set("test/rank0_done", "1")
    else:
        store.wait(["test/rank0_done"], timedelta(seconds=90))
    destroy_and_recreate()


def mismatch():
    init("a", 30)
    x = torch.ones(1000, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    if rank == 0:
        w = dist.all_reduce(x, async_op=True)
        R["mismatch"] = expect_failure(lambda: w.wait(timeout=timedelta(seconds=60)))
    else:
        R["mismatch"] = expect_failure(lambda: dist.barrier(device_ids=[0]))
    destroy_and_recreate()


try:
    torch.cuda.set_device(0)
    {"solo": solo, "missing": missing, "mismatch": mismatch}[scenario]()
except Exception as e:  # noqa: BLE001
    R["error"] = traceback.format_exc()[-3000:]
    if "could not create the NCCL communicator" in str(e):
        R["nccl_init_failed"] = str(e)[:500]
save()
