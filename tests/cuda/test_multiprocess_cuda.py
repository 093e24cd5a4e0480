"""Several processes sharing one GPU: host-staged Gloo transport, and the NCCL transport where
NCCL allows several ranks on one GPU (NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1; else
skipped, saying so). Each rank checks that its CUDA results equal, bit for bit, the CPU path's
on the same data: all-reduce per codec and algorithm (_worker.py), and every collective of
_cases.py at 2 ranks (_collectives_worker.py). Hard timeouts: a hung rank is killed and the
test fails."""
import pytest

import ringzip

pytestmark = pytest.mark.cuda
TIMEOUT = 60  # per launch (all ranks); a hung rank is killed and the test fails


def launch(spawn, tmp_path, world, mode, script="_worker.py"):
    store = str(tmp_path / "store")

    def args(r):
        out = tmp_path / f"rank{r}.json"
        return [r, world, store, mode, out] if script == "_worker.py" else [r, world, store, out]

    return spawn(script, world, args, TIMEOUT, f"{mode} world {world}")


def last_line(tb):
    """The exception line of a traceback: pytest's one-line summary shows the message's first line."""
    lines = [ln for ln in (tb or "").strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def check(results, logs):
    for r, res in enumerate(results):
        assert res["error"] is None, f"rank {r}: {last_line(res['error'])}\n{res['error']}\nlog:\n{logs[r]}"
        bad = [c for c in res["cases"] if not c["same"]]
        assert not bad, f"rank {r}: CUDA path differs from the CPU path: {bad}"


@pytest.mark.parametrize("world", [2, 3])
def test_gloo_transport_shared_gpu(spawn, tmp_path, world):
    results, logs = launch(spawn, tmp_path, world, "gloo")
    check(results, logs)


@pytest.mark.parametrize("world", [2, 3])
def test_nccl_transport_shared_gpu(spawn, tmp_path, world):
    v = ringzip._C.cuda.nccl_version()
    if v < 23000:
        pytest.skip(f"NCCL {v} does not support several ranks on one GPU (needs >= 2.30)")
    results, logs = launch(spawn, tmp_path, world, "nccl")
    failed = [r.get("nccl_init_failed") for r in results if r.get("nccl_init_failed")]
    if failed:
        pytest.skip(f"NCCL {v} refused several ranks on one GPU: {failed[0][:300]}")
    check(results, logs)
    assert all(len(r["cases"]) == 13 for r in results)


def test_every_collective_two_ranks_nccl(spawn, tmp_path):
    """_cases.py at world size 2 over NCCL: every collective on the CUDA path (send / recv too)
    against the host path."""
    v = ringzip._C.cuda.nccl_version()
    if v < 23000:
        pytest.skip(f"NCCL {v} does not support several ranks on one GPU (needs >= 2.30)")
    results, logs = launch(spawn, tmp_path, 2, "nccl", script="_collectives_worker.py")
    if any(r.get("nccl_init_failed") for r in results):
        pytest.skip(f"NCCL {v} refused several ranks on one GPU: {results[0].get('nccl_init_failed', '')[:300]}")
    for r, res in enumerate(results):
        assert res["error"] is None, f"rank {r}: {last_line(res['error'])}\n{res['error']}\nlog:\n{logs[r]}"
        assert not res["failed"], f"rank {r}: {len(res['failed'])} case(s) failed: " + "\n".join(
            f"{k}: {v}" for k, v in list(res["failed"].items())[:10])
        assert len(res["passed"]) > 100, f"rank {r}: only {len(res['passed'])} cases ran"
