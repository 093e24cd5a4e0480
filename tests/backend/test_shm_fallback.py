"""Shared memory that cannot be set up (a /dev/shm too small, as in a container started without
--shm-size): one rank's segment reservation fails (RLIMIT_FSIZE makes its posix_fallocate fail,
as a full tmpfs would). transport='auto' warns, falls back to TCP on every rank of the node
together and the collectives still work; transport='shm' raises on every rank, naming the cause."""
from __future__ import annotations

import resource
import signal
import time
import warnings

import pytest
import torch
import torch.distributed as dist

from tests import mp

FSIZE_LIMIT = 1 << 20  # below the segment of a 2-rank node (2 MiB rings), above the store file


def fallback_checks(ctx):
    import ringzip

    chk = mp.Checker(ctx.rank)
    dist.init_process_group("gloo", rank=ctx.rank, world_size=ctx.world_size, init_method=ctx.init_method)
    if ctx.rank == 1:  # the store is a TCP/file store created before the limit: unaffected
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, resource.RLIM_INFINITY))
    with chk.case("auto_warns_and_falls_back_to_tcp"):
        t0 = time.monotonic()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            g = dist.new_group(backend="ringzip", pg_options=ringzip.Options(transport="auto"))
        took = time.monotonic() - t0
        msgs = [str(w.message) for w in caught if "shared memory" in str(w.message)]
        assert msgs and "TCP over loopback" in msgs[0], [str(w.message) for w in caught]
        assert "rank 1" in msgs[0] or ctx.rank == 1, msgs[0]  # the others name the rank that failed
        assert took < 20, f"fell back after {took:.1f} s (the setup timeout is 60 s)"
        assert ringzip.stats(g)["topology"]["transport"] == "tcp", ringzip.stats(g)["topology"]
        x = torch.full((100_000,), float(ctx.rank + 1))
        dist.all_reduce(x, group=g)
        assert torch.equal(x, torch.full_like(x, 3.0)), x[:4]
    with chk.case("shm_raises"), pytest.raises(RuntimeError, match="transport='shm'.*shared memory"):
        dist.new_group(backend="ringzip", pg_options=ringzip.Options(transport="shm"))
    return chk.result()


def test_unusable_shared_memory_falls_back_or_raises():
    res = mp.run(fallback_checks, 2, timeout=120)
    mp.raise_on_failures(mp.merge(res), "shm fallback")
    assert all(set(r["passed"]) == {"auto_warns_and_falls_back_to_tcp", "shm_raises"} for r in res), res
