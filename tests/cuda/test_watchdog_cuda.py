"""The CUDA path's watchdog (docs/gpu.md): deadlines, the Work's status after a failure, the
mismatch diagnosis on CUDA calls, and re-creating the group. Each scenario runs in fresh
processes under a hard timeout (_watchdog_worker.py), so a hang fails the test instead of
stopping the run. `solo` needs one GPU; `missing` and `mismatch` put 2 ranks on one GPU, which
needs NCCL >= 2.30 (else skipped, saying so)."""
import pytest

import ringzip

pytestmark = pytest.mark.cuda
HARD_TIMEOUT = 60  # per scenario launch (all ranks)


def launch(spawn, tmp_path, scenario, world):
    results, logs = spawn("_watchdog_worker.py", world,
                          lambda r: [scenario, r, world, tmp_path, tmp_path / f"{scenario}{r}.json"], HARD_TIMEOUT,
                          f"{scenario} (a hang: the watchdog did not end the call, or destroying / re-creating the "
                          "group hung)")
    if any(res.get("nccl_init_failed") for res in results):
        pytest.skip(f"NCCL refused several ranks on one GPU: {results[0].get('nccl_init_failed', '')[:300]}")
    for r, res in enumerate(results):
        err = [ln for ln in (res["error"] or "").strip().splitlines() if ln.strip()]
        assert res["error"] is None, f"{scenario} rank {r}: {err[-1][:200] if err else ''}\n{res['error']}\nlog:\n{logs[r]}"
    return results


def needs_multi_rank_gpu():
    v = ringzip._C.cuda.nccl_version()
    if v < 23000:
        pytest.skip(f"NCCL {v} cannot put several ranks on one GPU (needs >= 2.30)")


def test_deadline_short_wait_and_new_group(spawn, tmp_path):
    (res,) = launch(spawn, tmp_path, "solo", 1)
    elapsed, kind, msg = res["short_wait"]
    assert kind == "DistBackendError" and "not completed yet" in msg, res["short_wait"]
    assert elapsed < 1.0, f"wait(timeout=200 ms) returned after {elapsed:.2f} s"
    assert res["short_wait_then_success"] and res["usable_after_short_wait"]

    elapsed, kind, msg = res["timeout"]
    assert kind == "DistBackendError", res["timeout"]
    assert "did not complete within its timeout of 2000 ms" in msg and "seq" in msg and "rank 0 of 1" in msg, msg
    assert 1.8 <= elapsed <= 6.0, f"the watchdog raised after {elapsed:.2f} s for a 2 s timeout"
    st = res["timeout_status"]  # exception(): a string where torch's binding cannot return it (torch 2.11)
    assert st[:2] == [True, False] and (st[2] is True or "Unable to convert function return value" in str(st[2])), \
        f"is_completed, is_success, exception(): {st}"
    elapsed, kind, msg = res["after_timeout"]
    assert kind == "DistBackendError" and "unusable" in msg and elapsed < 1.0, res["after_timeout"]
    assert res["new_group_ok"]


def test_missing_peer_times_out(spawn, tmp_path):
    needs_multi_rank_gpu()
    r0, r1 = launch(spawn, tmp_path, "missing", 2)
    assert r0["first_ok"] and r1["first_ok"]
    elapsed, kind, msg = r0["timeout"]
    assert kind == "DistBackendError", r0["timeout"]
    assert "allreduce" in msg and "rank 0 of 2" in msg and "did not complete within its timeout of 3000 ms" in msg, msg
    assert 2.8 <= elapsed <= 10.0, f"raised after {elapsed:.2f} s for a 3 s timeout"
    assert r0["after_timeout"][1] == "DistBackendError" and "unusable" in r0["after_timeout"][2]
    assert r0["new_group_ok"] and r1["new_group_ok"]


def test_mismatch_on_cuda_calls(spawn, tmp_path):
    needs_multi_rank_gpu()
    r0, r1 = launch(spawn, tmp_path, "mismatch", 2)
    for res in (r0, r1):
        elapsed, kind, msg = res["mismatch"]
        assert kind == "DistBackendError", res["mismatch"]
        assert "mismatched collective calls" in msg and "ALLREDUCE" in msg and "BARRIER" in msg, msg
        assert elapsed < 15.0, f"rank {res['rank']}: the mismatch was reported after {elapsed:.2f} s"
        assert res["new_group_ok"]
    # The same diagnosis on both ranks (one wrote it to the store, the other read it there).
    line = lambda m: m[m.index("mismatched collective calls"):].split(". ")[0]  # noqa: E731
    assert line(r0["mismatch"][2]) == line(r1["mismatch"][2])
