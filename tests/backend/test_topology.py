"""Node layouts in real process groups (4 processes; nodes emulated with RINGZIP_NODE_ID = rank // 2,
so 2 nodes x 2 ranks): the layout every rank computes from the store, the node-aware all-reduce
and reduce-scatter (dense and compressed, with error feedback) bit for bit against the pure-torch
oracle (ringzip.reference.hierarchy), the flat path for small dense calls, hierarchy='flat',
an uneven subgroup (hierarchy='node' warns and runs flat), codec='auto' node-aware (the same
choice on every rank), and DDP training with q4 on 2 x 2 (parameters identical on every rank)."""
from __future__ import annotations

import os
import warnings

import torch
import torch.distributed as dist

from tests import mp

NODES = [0, 0, 1, 1]


def _inputs(key: int, count: int, n: int = 4) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(key)
    return [torch.randn(count, generator=g) for _ in range(n)]


def _bits_equal(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    diff = (got.view(torch.int32) != want.view(torch.int32)).sum().item()
    assert diff == 0, f"{what}: {diff} of {got.numel()} elements differ from the reference"


def topology_checks(ctx):
    torch.set_num_threads(1)
    os.environ["RINGZIP_NODE_ID"] = str(NODES[ctx.rank])
    import ringzip
    from ringzip.reference import collectives as RC
    from ringzip.reference import hierarchy as RH

    rank, n = ctx.rank, ctx.world_size
    chk = mp.Checker(rank)
    dist.init_process_group("ringzip", rank=rank, world_size=n, init_method=ctx.init_method)
    with chk.case("layout"):
        t = ringzip.stats()["topology"]
        assert t["node_of"] == NODES and t["nodes"] == 2 and t["ranks_per_node"] == 2, t
        assert t["node_aware"] and t["flat_reason"] == "" and t["hierarchy"] == "auto", t
        assert t["transport"] == "shm+tcp", t  # shared memory inside a node, ringzip's TCP between, by default
    with chk.case("dense_allreduce_node_aware"):
        xs = _inputs(1, 300_000)  # 1.2 MB: node-aware
        x = xs[rank].clone()
        dist.all_reduce(x)
        _bits_equal(x, RH.allreduce(xs, NODES)[rank], "dense all_reduce")
    with chk.case("small_dense_allreduce_flat"):
        xs = _inputs(2, 1000)
        x = xs[rank].clone()
        dist.all_reduce(x)
        _bits_equal(x, RC.allreduce(xs)[rank], "small all_reduce")
    with chk.case("dense_reduce_scatter_node_aware"):
        xs = _inputs(3, 4 * 100_000)
        out = torch.empty(100_000)
        dist.reduce_scatter_tensor(out, xs[rank].clone())
        _bits_equal(out, RH.reduce_scatter(xs, NODES)[rank], "dense reduce_scatter_tensor")

    q4 = dist.new_group(pg_options=ringzip.Options(codec="q4", transport="shm"))
    with chk.case("shm_inside_nodes"):
        assert ringzip.stats(q4)["topology"]["transport"] == "shm+tcp", ringzip.stats(q4)["topology"]
    with chk.case("transport_gloo_keeps_nodes_on_gloo"):
        g = dist.new_group(pg_options=ringzip.Options(transport="gloo"))
        assert ringzip.stats(g)["topology"]["transport"] == "gloo", ringzip.stats(g)["topology"]
        xs = _inputs(6, 300_000)
        x = xs[rank].clone()
        dist.all_reduce(x, group=g)
        _bits_equal(x, RH.allreduce(xs, NODES)[rank], "dense all_reduce over gloo only")
    with chk.case("q4_allreduce_and_reduce_scatter"):
        xs = _inputs(4, 200_000)
        x = xs[rank].clone()
        dist.all_reduce(x, group=q4)
        _bits_equal(x, RH.compressed_allreduce(xs, NODES, "q4", rng_seq=0)[0][rank], "q4 all_reduce")
        xs = _inputs(5, 4 * 50_000)
        out = torch.empty(50_000)
        dist.reduce_scatter_tensor(out, xs[rank].clone(), group=q4)
        _bits_equal(out, RH.compressed_reduce_scatter(xs, NODES, "q4", rng_seq=1)[0][rank], "q4 reduce_scatter")
        st = ringzip.stats(q4)["q4"]
        assert st["calls"] == 2, st
        # bytes_wire: between nodes only, so the ratio is the codec's; the exact steps inside the node apart
        assert 7.0 < st["ratio"] < 8.0 and st["bytes_intra_node"] > st["bytes_wire"], st

    auto = dist.new_group(pg_options=ringzip.Options(codec="auto", min_numel=0))
    with chk.case("codec_auto_node_aware"):
        # The cost model chooses for the inter-node step (node-aware calls are not measured);
        # every rank runs the same choice, and the stats count the node's exact steps apart.
        for call in range(3):
            xs = _inputs(20 + call, 300_000)
            x = xs[rank].clone()
            dist.all_reduce(x, group=auto)
            every = [torch.empty_like(x) for _ in range(n)]
            dist.all_gather(every, x)
            for r in range(n):
                _bits_equal(every[r], x, f"auto call {call}: result of rank {r}")
        xs = _inputs(23, 4 * 50_000)
        out = torch.empty(50_000)
        dist.reduce_scatter_tensor(out, xs[rank].clone(), group=auto)
        st = ringzip.stats(auto)
        assert st["auto"]["calls"] == 4, st["auto"]
        ran = {k: v for k, v in st.items() if isinstance(v, dict) and "bytes_wire" in v}
        assert sum(v["calls"] for v in ran.values()) == 4, ran
        assert all(v["bytes_intra_node"] > 0 for v in ran.values()), ran

    topk = dist.new_group(pg_options=ringzip.Options(codec="topk:0.01"))
    with chk.case("topk_error_feedback_per_shard"):
        res = None
        for call in range(3):
            xs = _inputs(10 + call, 100_000)
            x = xs[rank].clone()
            dist.all_reduce(x, group=topk)
            want, res = RH.compressed_allreduce(xs, NODES, "topk:0.01", rng_seq=call, seq=0,
                                                residuals=res or [torch.zeros(100_000)] * n)
            _bits_equal(x, want[rank], f"top-k call {call}")

    flat = dist.new_group(pg_options=ringzip.Options(codec="q4", hierarchy="flat"))
    with chk.case("hierarchy_flat"):
        t = ringzip.stats(flat)["topology"]
        assert not t["node_aware"] and t["flat_reason"] == "hierarchy='flat'", t
        xs = _inputs(6, 200_000)
        x = xs[rank].clone()
        dist.all_reduce(x, group=flat)
        _bits_equal(x, RC.compressed_allreduce(xs, "q4")[0][rank], "flat q4 all_reduce")
        st = ringzip.stats(flat)["q4"]
        assert st["bytes_intra_node"] == 0 and 7.0 < st["ratio"] < 8.0, st

    with chk.case("flat_ring_over_shm_and_gloo_large_segments"):
        # ring 0 -> 1 (shm) -> 2 (Gloo) -> 3 (shm) -> 0 (Gloo) with 2.5 MB segments, more than a
        # 2 MiB shm ring holds: rank 0 waits on Gloo while its shm send must keep streaming (the
        # shm progress thread), or the ring deadlocks
        ring = dist.new_group(pg_options=ringzip.Options(hierarchy="flat", algorithm="ring"))
        xs = _inputs(7, 10_000_000)
        x = xs[rank].clone()
        dist.all_reduce(x, group=ring)
        _bits_equal(x, RC.allreduce(xs, algo="ring")[rank], "flat ring all_reduce")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        uneven = dist.new_group([0, 1, 2], pg_options=ringzip.Options(hierarchy="node", codec="q4"))
    if rank < 3:
        with chk.case("uneven_nodes_fall_back_to_flat"):
            t = ringzip.stats(uneven)["topology"]
            assert t["node_of"] == [0, 0, 1] and not t["node_aware"], t
            assert "different numbers of ranks" in t["flat_reason"], t
            assert any("run flat" in str(w.message) for w in caught), [str(w.message) for w in caught]
            xs = _inputs(7, 200_000, 3)
            x = xs[rank].clone()
            dist.all_reduce(x, group=uneven)
            _bits_equal(x, RC.compressed_allreduce(xs, "q4")[0][rank], "uneven q4 all_reduce")

    with chk.case("ddp_q4_identical_parameters"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
        ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=q4)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(100 + rank)
        for _ in range(4):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(torch.randn(32, 256, generator=g)),
                                                     torch.randint(0, 10, (32,), generator=g))
            loss.backward()
            opt.step()
        flat_params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        every = [torch.empty_like(flat_params) for _ in range(n)]
        dist.all_gather(every, flat_params)
        for r in range(n):
            _bits_equal(every[r], flat_params, f"parameters of rank {r}")
        assert ringzip.stats(q4)["q4"]["calls"] > 2, "DDP's buckets were not compressed"
    dist.destroy_process_group()
    return chk.result()


def test_node_layouts_in_process_groups():
    res = mp.run(topology_checks, 4, timeout=180)
    mp.raise_on_failures(mp.merge(res), "node layouts")
    assert len(set().union(*(r["passed"] for r in res))) == 13, [sorted(r["passed"]) for r in res]
