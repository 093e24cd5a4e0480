"""ringzip.new_process_group: a ringzip group outside torch's registry, through public API only:
torch's collectives with group=, ringzip's functions on it, two groups over one store (each under
its own PrefixStore), and bad options refused."""
from __future__ import annotations

import os

import torch

from tests import mp


def standalone_checks(ctx):
    torch.set_num_threads(1)
    import torch.distributed as dist

    import ringzip

    rank, n = ctx.rank, ctx.world_size
    chk = mp.Checker(rank)
    store = dist.FileStore(os.path.join(ctx.tmpdir, "store"), n)
    a = ringzip.new_process_group(dist.PrefixStore("a/", store), rank, n, ringzip.Options(codec="q8", min_numel=0))
    b = ringzip.new_process_group(dist.PrefixStore("b/", store), rank, n)
    with chk.case("not_in_torch_registry"):
        assert not dist.is_initialized()
    with chk.case("compressed_on_a_exact_on_b"):
        x = torch.randn(5000, generator=torch.Generator().manual_seed(rank))
        want = sum(torch.randn(5000, generator=torch.Generator().manual_seed(r)) for r in range(n))
        qa, eb = x.clone(), x.clone()
        dist.all_reduce(qa, group=a)
        dist.all_reduce(eb, group=b)
        assert ringzip.stats(a)["q8"]["calls"] == 1 and "q8" not in ringzip.stats(b), (ringzip.stats(a), ringzip.stats(b))
        rel = ((qa - want).norm() / want.norm()).item()
        assert 0 < rel < 0.02, rel
        assert ((eb - want).abs().max() < 1e-5).item()
    with chk.case("set_options_and_state"):
        ringzip.set_options(b, codec="q4", min_numel=0)
        y = torch.randn(5000)
        dist.all_reduce(y, group=b)
        assert ringzip.stats(b)["q4"]["calls"] == 1
        st = ringzip.error_feedback_state(b)
        assert (st["rank"], st["world_size"]) == (rank, n), st
    with chk.case("other_collectives"):
        t = torch.tensor([float(rank)])
        out = [torch.zeros(1) for _ in range(n)]
        dist.all_gather(out, t, group=a)
        assert [o.item() for o in out] == [float(r) for r in range(n)]
        dist.barrier(group=a)
    with chk.case("bad_options"):
        try:
            ringzip.new_process_group(dist.PrefixStore("c/", store), rank, n, options={"codec": "q4"})
            raise AssertionError("a dict taken as options")
        except TypeError as e:
            assert "ringzip.Options" in str(e), e
    return chk.result()


def test_new_process_group():
    res = mp.run(standalone_checks, 2, timeout=120)
    mp.raise_on_failures(mp.merge(res), "new_process_group")
    assert len(set().union(*(r["passed"] for r in res))) == 5
