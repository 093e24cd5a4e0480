"""Several processes sharing one GPU: host-staged Gloo transport, and the NCCL transport where
NCCL allows several ranks on one GPU (NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1; else
skipped, saying so). Each rank checks that its CUDA results equal, bit for bit, the CPU path's
on the same data. Hard timeouts: a hung rank is killed and the test fails."""
import json
import os
import subprocess
import sys

import pytest

import ringzip

pytestmark = pytest.mark.cuda
HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 150


def launch(tmp_path, world, mode):
    store = str(tmp_path / "store")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(ringzip.__file__)), env.get("PYTHONPATH", "")])
    procs, outs = [], []
    for r in range(world):
        out = str(tmp_path / f"rank{r}.json")
        outs.append(out)
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "_worker.py"), str(r), str(world), store, mode, out],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=TIMEOUT)[0].decode(errors="replace")[-2000:])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"{mode} world {world}: a rank hung for {TIMEOUT} s")
    results = []
    for r, out in enumerate(outs):
        assert os.path.exists(out), f"rank {r} wrote no result; log:\n{logs[r]}"
        with open(out) as f:
            results.append(json.load(f))
    return results, logs


def check(results, logs):
    for r, res in enumerate(results):
        assert res["error"] is None, f"rank {r}:\n{res['error']}\nlog:\n{logs[r]}"
        bad = [c for c in res["cases"] if not c["same"]]
        assert not bad, f"rank {r}: CUDA path differs from the CPU path: {bad}"


@pytest.mark.parametrize("world", [2, 3])
def test_gloo_transport_shared_gpu(tmp_path, world):
    results, logs = launch(tmp_path, world, "gloo")
    check(results, logs)


@pytest.mark.parametrize("world", [2, 3])
def test_nccl_transport_shared_gpu(tmp_path, world):
    v = ringzip._C.cuda.nccl_version()
    if v < 23000:
        pytest.skip(f"NCCL {v} does not support several ranks on one GPU (needs >= 2.30)")
    results, logs = launch(tmp_path, world, "nccl")
    failed = [r.get("nccl_init_failed") for r in results if r.get("nccl_init_failed")]
    if failed:
        pytest.skip(f"NCCL {v} refused several ranks on one GPU: {failed[0][:300]}")
    check(results, logs)
    assert all(len(r["cases"]) == 13 for r in results)
