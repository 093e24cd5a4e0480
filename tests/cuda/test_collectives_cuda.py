"""Every collective on the CUDA path at world size 1 (in process): the result on CUDA tensors
equals the host path's on the same data, bit for bit (cases in _cases.py); and the CUDA Work's
status methods. The 2-rank version of the same cases: test_multiprocess_cuda.py."""
import os
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import ringzip
from tests.backend._common import work_exception

pytestmark = pytest.mark.cuda

HERE = os.path.dirname(os.path.abspath(__file__))


def _cases_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("ringzip_cuda_cases", os.path.join(HERE, "_cases.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def cases():
    if not torch.cuda.is_available() or not hasattr(ringzip._C, "cuda"):
        pytest.skip("no CUDA")
    return _cases_module()


def _names():
    # Collected without a GPU too (then skipped): the list does not depend on the device.
    try:
        return list(_cases_module().cases(1))
    except Exception:  # noqa: BLE001 -- e.g. a CPU-only torch: the tests are skipped anyway
        return ["unavailable"]


@pytest.mark.parametrize("name", _names())
def test_matches_host_path(group, cases, name):
    table = cases.cases(1)
    cases.run(name, table[name], 0, 1)


def test_work_status_and_stream_semantics(group, cases):
    cases.options()
    x = torch.ones(1 << 20, device="cuda")
    w = dist.all_reduce(x, async_op=True)
    assert w.wait()  # the current stream waits; the host need not
    torch.cuda.synchronize()
    assert w.is_completed() and w.is_success() and work_exception(w) is None
    assert torch.equal(x, torch.ones_like(x))
    # An explicit timeout blocks the host until the work is done.
    w = dist.all_reduce(x, async_op=True)
    assert w.wait(timeout=timedelta(seconds=30))
    assert w.is_completed()


def test_barrier_on_device_blocks_the_host(group, cases):
    cases.options()
    w = dist.barrier(device_ids=[torch.cuda.current_device()], async_op=True)
    w.wait()  # a device barrier's wait blocks the host until done
    assert w.is_completed() and w.is_success()


def test_recv_from_any_source_is_refused(group):
    with pytest.raises(ValueError, match="any source"):
        dist.recv(torch.zeros(4, device="cuda"))


def test_codec_auto_is_the_tuners_choice_on_cuda(group, cases):
    # codec="auto" on CUDA tensors: the CUDA calls' own tuner chooses, from the device's kernel
    # speeds measured through its Compute, and stats() reports it as for CPU calls.
    g = dist.new_group(backend="ringzip", pg_options=ringzip.Options(codec="auto", min_numel=0))
    x = torch.randn(1 << 20, device="cuda")
    want = x.clone()
    dist.all_reduce(x, group=g)
    torch.cuda.synchronize()
    auto = ringzip.stats(g)["auto"]
    assert auto["device"] == "cuda" and auto["kernels"] == "device" and auto["calls"] == 1, auto
    speeds = auto["params"]["codecs"]
    assert "q4" in speeds and speeds["q4"]["encode_gbyte_s"] > 0, speeds
    # A kernel's launch, measured through the device's Compute: microseconds, where a host
    # function call takes tens of nanoseconds (the cost model's per-kernel term).
    assert 2e-7 < auto["params"]["launch_s"] < 1e-3, auto["params"]
    rel = float((x - want).norm() / want.norm())
    assert rel < (1e-6 if auto["last"]["choice"] == "none" else 0.2), (auto["last"], rel)
