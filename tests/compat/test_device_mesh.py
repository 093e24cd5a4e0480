"""DeviceMesh over ringzip on CPU, and where torch's group splitting stands (4 ranks, one launch).

* ``init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))`` on a ringzip default group:
  both dimensions are ringzip groups over the right ranks (exact sums of integers). On CPU torch
  makes them with ``new_group`` (it splits groups only where an accelerator is), so they take
  the RINGZIP_* environment, not the default group's ``pg_options``;
* ``backend_override={"dp": ("ringzip", ringzip.Options(...))}`` configures one dimension: its
  calls run that codec, the other dimension stays exact;
* ``dist.split_group`` refuses on a CPU-only machine whatever the backend (gloo too): the check
  fails if a torch lets it through, so that docs/usage.md is updated;
* what it would call, ``ProcessGroup.split_group`` (c10d ``Backend::split``), works on ringzip:
  each half of the group gets a child ringzip backend over its ranks, with the parent's options
  (q4 here), that sums over its own ranks only; a rank outside ``ranks`` gets no group.
"""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests import mp

WS = 4


def _ints(rank, n=1 << 17):
    # integer-valued floats: one exact sum in any order, which a codec would not keep
    return torch.randint(-50, 50, (n,), generator=torch.Generator().manual_seed(rank)).float()


def checks(ctx):
    import ringzip
    from torch.distributed.device_mesh import init_device_mesh

    torch.set_num_threads(1)
    rank = ctx.rank
    chk = mp.Checker(rank)
    dist.init_process_group("ringzip", rank=rank, world_size=WS, init_method=ctx.init_method,
                            pg_options=ringzip.Options(codec="q4"))
    # rank = 2 * dp_index + tp_index: "tp" groups {0, 1}, {2, 3}; "dp" groups {0, 2}, {1, 3}
    peers = {"tp": [rank - rank % 2, rank - rank % 2 + 1], "dp": [rank % 2, rank % 2 + 2]}

    with chk.case("mesh/dims_are_ringzip_groups"):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        for dim in ("dp", "tp"):
            g = mesh.get_group(dim)
            assert isinstance(g._get_backend(torch.device("cpu")), ringzip._C.RingzipBackend), dim  # noqa: SLF001
            assert dist.get_process_group_ranks(g) == peers[dim], (dim, dist.get_process_group_ranks(g))
            x = _ints(rank)
            dist.all_reduce(x, group=g)
            assert torch.equal(x, sum(_ints(r) for r in peers[dim])), f"{dim}: not the exact sum of its ranks"
            assert ringzip.get_options(g).codec == "none", ringzip.get_options(g)

    with chk.case("mesh/backend_override_options"):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"),
                                backend_override={"dp": ("ringzip", ringzip.Options(codec="q8"))})
        dp, tp = mesh.get_group("dp"), mesh.get_group("tp")
        assert (ringzip.get_options(dp).codec, ringzip.get_options(tp).codec) == ("q8", "none")
        x = _ints(rank)
        dist.all_reduce(x, group=dp)
        assert ringzip.stats(dp)["q8"]["calls"] == 1 and "q8" not in ringzip.stats(tp)
        assert not torch.equal(x, sum(_ints(r) for r in peers["dp"])), "q8 kept every integer exactly"

    with chk.case("split_group/backend_split"):
        mine = peers["tp"]
        sub = dist.group.WORLD.split_group(mine, group_name=f"half{rank // 2}")
        backend = sub._get_backend(torch.device("cpu"))  # noqa: SLF001
        assert isinstance(backend, ringzip._C.RingzipBackend), type(backend)
        assert (sub.rank(), sub.size()) == (mine.index(rank), 2), (sub.rank(), sub.size())
        assert ringzip.get_options(sub).codec == "q4", ringzip.get_options(sub)
        x = _ints(rank)
        sub.allreduce([x]).wait()
        assert ringzip.stats(sub)["q4"]["calls"] == 1, ringzip.stats(sub)
        want = sum(_ints(r) for r in mine)
        # q4 rounds each input to 1/15 of its bucket's range (~100 here), then the sum (~200): ~20 at most
        assert not torch.equal(x, want) and (x - want).abs().max() < 30, "not the q4 sum of the half's ranks"
        y = torch.full((3,), float(rank))
        sub.broadcast([y], dist.BroadcastOptions()).wait()  # root 0 of the child: its first rank
        assert torch.equal(y, torch.full((3,), float(mine[0]))), y
        other = [r for r in range(WS) if r not in mine]
        assert dist.group.WORLD.split_group(other, group_name=f"other{rank // 2}") is None

    with chk.case("split_group/refused_on_cpu"):
        with pytest.raises(RuntimeError, match="device"):
            dist.split_group(split_ranks=[[0, 1], [2, 3]])
    dist.destroy_process_group()
    return chk.result()


CASES = ["mesh/dims_are_ringzip_groups", "mesh/backend_override_options", "split_group/backend_split",
         "split_group/refused_on_cpu"]
_LAUNCH: list = []


@pytest.mark.parametrize("case", CASES)
def test_device_mesh(case):
    if not _LAUNCH:
        _LAUNCH.append(mp.run_checks(checks, WS, timeout=120, stall=60))
    mp.assert_checks(_LAUNCH[0], lambda c: c == case, case)
