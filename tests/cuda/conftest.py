"""CUDA tests: skipped, with the reason, where there is no GPU or no CUDA build."""
import json
import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import ringzip


def cuda_skip_reason():
    if not hasattr(ringzip._C, "cuda"):
        return "ringzip was built without CUDA (torch without CUDA, no nvcc, or RINGZIP_CUDA=0)"
    if not torch.cuda.is_available():
        return "no CUDA device visible"
    return None


def pytest_collection_modifyitems(config, items):
    reason = cuda_skip_reason()
    for item in items:
        if "tests/cuda" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.cuda)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """A ringzip default group of world size 1 (the NCCL transport for CUDA tensors), per module."""
    if cuda_skip_reason():
        pytest.skip(cuda_skip_reason())
    os.environ.pop("RINGZIP_TRANSPORT", None)
    store = dist.FileStore(str(tmp_path_factory.mktemp("s") / "store"), 1)
    dist.init_process_group("ringzip", store=store, rank=0, world_size=1, timeout=timedelta(seconds=60))
    assert ringzip._C.cuda.enabled(ringzip.backend_of())
    yield
    dist.destroy_process_group()


def run_ranks(script, world, args_of, timeout, what):
    """Runs tests/cuda/<script> once per rank, in fresh processes (PYTHONPATH: this ringzip),
    argv = args_of(rank); kills all and fails the test if one outlives `timeout` seconds.
    Returns (results read from each rank's JSON file -- args_of(rank)[-1] --, logs)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(ringzip.__file__)), env.get("PYTHONPATH", "")])
    here = os.path.dirname(os.path.abspath(__file__))
    argv = [[str(a) for a in args_of(r)] for r in range(world)]
    procs = [subprocess.Popen([sys.executable, "-X", "faulthandler", os.path.join(here, script), *a], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for a in argv]
    logs = []
    deadline = time.monotonic() + timeout  # one deadline for all ranks, not `timeout` per rank
    for r, p in enumerate(procs):
        try:
            logs.append(p.communicate(timeout=max(0.1, deadline - time.monotonic()))[0].decode(errors="replace")[-3000:])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            tails = []
            for q in procs:
                try:
                    tails.append(q.communicate(timeout=5)[0].decode(errors="replace")[-1500:])
                except subprocess.TimeoutExpired:
                    tails.append("<no output>")
            pytest.fail(f"{what}: rank {r} still running after {timeout} s (all ranks killed); output:\n" +
                        "\n".join(f"--- rank {i}:\n{t}" for i, t in enumerate(tails)))
    results = []
    for r, a in enumerate(argv):
        assert os.path.exists(a[-1]), f"{what}: rank {r} wrote no result (exit code {procs[r].returncode}); log:\n{logs[r]}"
        with open(a[-1]) as f:
            results.append(json.load(f))
    return results, logs


@pytest.fixture
def spawn():
    return run_ranks
