"""All-reduce of sparse COO tensors over ringzip gives gloo's result bit for bit (2 and 3 ranks).

Gloo's semantics (ProcessGroupGloo's sparse all-reduce): SUM only; the result is coalesced, is
written into the input tensor (whose nnz may change) and is the value of work.result() and of
the Work's future. ringzip adds the ranks' tensors in the same order as gloo, so results are
compared bitwise with gloo's on random-normal values (whose sums depend on the order).

One launch per world size runs every case: different nnz per rank, an empty tensor on one rank
and on all, duplicate indices in the input (uncoalesced), float32/float64/int64 values, 1-D and
2-D values, two sparse dims, a large tensor (several ring segments), async calls with the
future's value, non-SUM ops (a clear ValueError, group still usable), DDP training with
nn.Embedding(sparse=True) plus a dense layer against the same DDP over gloo, and tensors of
different sizes on the ranks (check="on": the mismatch check, group usable; check="off": the
same ValueError from the sparse algorithm's header exchange on every rank).
"""
from __future__ import annotations

import zlib

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from tests import mp
from tests.backend._common import init_world, same

BACKEND = "ringzip"


def _sparse(key, rank, sizes, sparse_dim, nnz, dtype, dup=False):
    """A random sparse COO tensor; with dup, about half of its indices repeat (uncoalesced)."""
    g = torch.Generator().manual_seed(zlib.crc32(f"{key}|{rank}".encode()))
    idx = torch.stack([torch.randint(0, sizes[d], (nnz,), generator=g) for d in range(sparse_dim)]) if nnz else \
        torch.zeros((sparse_dim, 0), dtype=torch.int64)
    if dup and nnz > 1:
        idx[:, nnz // 2:] = idx[:, : nnz - nnz // 2].clone()
    vshape = (nnz, *sizes[sparse_dim:])
    if dtype.is_floating_point:
        val = torch.randn(vshape, generator=g, dtype=torch.float64).to(dtype)
    else:
        val = torch.randint(-50, 50, vshape, generator=g).to(dtype)
    return torch.sparse_coo_tensor(idx, val, sizes)


def _cases(ws):
    """name -> (sizes, sparse_dim, nnz per rank, dtype, duplicates)."""
    return {
        "f32_1d_values": ((50,), 1, [5 + 7 * r for r in range(ws)], torch.float32, False),
        "f32_2d_values": ((40, 3), 1, [4 + 9 * r for r in range(ws)], torch.float32, False),
        "f64_2d_values": ((40, 5), 1, [11 - 3 * r for r in range(ws)], torch.float64, False),
        "int64_values": ((30, 2), 1, [6] * ws, torch.int64, False),
        "two_sparse_dims": ((6, 7, 2), 2, [9 + r for r in range(ws)], torch.float32, False),
        "duplicate_indices": ((20, 4), 1, [15 + 2 * r for r in range(ws)], torch.float32, True),
        "empty_on_rank_1": ((40, 3), 1, [0 if r == 1 else 6 + r for r in range(ws)], torch.float32, False),
        "empty_everywhere": ((40, 3), 1, [0] * ws, torch.float64, False),
        "large_embedding_grad": ((50000, 64), 1, [20000 - 3000 * r for r in range(ws)], torch.float32, True),
    }


def _check_result(x, ref, what):
    assert x.is_sparse, f"{what}: result is not sparse"
    assert x.shape == ref.shape, f"{what}: sizes {tuple(x.shape)} != gloo's {tuple(ref.shape)}"
    assert x.is_coalesced() == ref.is_coalesced(), f"{what}: is_coalesced {x.is_coalesced()} != gloo's"
    assert x._nnz() == ref._nnz(), f"{what}: nnz {x._nnz()} != gloo's {ref._nnz()}"
    same(x._indices(), ref._indices(), f"{what}: indices")
    same(x._values(), ref._values(), f"{what}: values")


def _embedding_model(seed):
    torch.manual_seed(seed)
    return torch.nn.ModuleDict({"emb": torch.nn.Embedding(100, 8, sparse=True), "out": torch.nn.Linear(8, 4)})


class _Net(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        self.m = _embedding_model(seed)

    def forward(self, ids):
        return self.m["out"](self.m["emb"](ids).mean(dim=1))


def _train_sparse_ddp(ddp, rank, steps=12):
    opt = torch.optim.SGD(ddp.parameters(), lr=0.5)
    losses = []
    for step in range(steps):
        # a fixed target per rank (so the loss falls) and fresh ids from a few per step
        g = torch.Generator().manual_seed(100 * rank + step % 3)
        ids = torch.randint(0, 100, (6, 5), generator=g)
        y = torch.randn(6, 4, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(ids), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def sparse_matrix(ctx, backend):
    torch.set_num_threads(1)
    rank, ws = ctx.rank, ctx.world_size
    ref = init_world(ctx, backend)
    chk = mp.Checker(rank)
    for name, (sizes, sd, nnz, dtype, dup) in _cases(ws).items():
        with chk.case(f"all_reduce/{name}"):
            mp.progress(name)
            x = _sparse(name, rank, sizes, sd, nnz[rank], dtype, dup)
            y = x.clone()
            w = dist.all_reduce(x, async_op=True)
            dist.all_reduce(y, group=ref)
            w.wait()
            _check_result(x, y, "input after all_reduce")
            _check_result(w.result()[0], y, "work.result()[0]")
            _check_result(w.get_future().value()[0], y, "future value")
    with chk.case("all_reduce/blocking_call"):
        x = _sparse("blocking", rank, (30, 2), 1, 4 + rank, torch.float32)
        y = x.clone()
        dist.all_reduce(x)
        dist.all_reduce(y, group=ref)
        _check_result(x, y, "blocking all_reduce")
    for opname in ("AVG", "MAX", "PRODUCT"):
        with chk.case(f"non_sum/{opname}"):
            x = _sparse("nonsum", rank, (10,), 1, 3, torch.float32)
            try:
                dist.all_reduce(x, op=getattr(dist.ReduceOp, opname))
            except ValueError as e:
                assert "SUM" in str(e) and "sparse" in str(e), f"message does not name the problem: {e}"
            else:
                raise AssertionError("no exception")
            t = torch.full((4,), float(rank))
            dist.all_reduce(t)
            same(t, torch.full((4,), float(sum(range(ws)))), "dense all_reduce after the error")
    with chk.case("ddp/embedding_sparse"):
        mp.progress("ddp")
        a = DDP(_Net(3 + rank), process_group=dist.group.WORLD)
        b = DDP(_Net(3 + rank), process_group=ref)
        la = _train_sparse_ddp(a, rank)
        lb = _train_sparse_ddp(b, rank)
        flat = torch.cat([p.detach().reshape(-1) for p in a.module.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(ws)]
        dist.all_gather(gathered, flat, group=ref)  # before any check: a failed check must not desync ranks
        assert a.module.m["emb"].weight.grad.is_sparse, "the embedding gradient DDP reduced is not sparse"
        assert sum(la[-3:]) < sum(la[:3]), f"loss did not decrease: {la}"
        torch.testing.assert_close(torch.tensor(la), torch.tensor(lb), rtol=1e-5, atol=1e-6)
        for (n, p), q in zip(a.module.named_parameters(), b.module.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7, msg=lambda m: f"{n} ringzip vs gloo: {m}")
        for r, t in enumerate(gathered):
            assert torch.equal(t, gathered[0]), f"rank {r}'s parameters differ from rank 0's"
    import ringzip

    with chk.case("mismatch/checked"):
        # check="on": the fingerprint exchange sees the different sizes before any data moves
        g = dist.new_group(backend="ringzip", pg_options=ringzip.Options(check="on"))
        x = _sparse("mm", rank, (10 + rank, 2), 1, 3, torch.float32)
        try:
            dist.all_reduce(x, group=g)
        except RuntimeError as e:
            assert "mismatch" in str(e), str(e)
        else:
            raise AssertionError("different sizes on the ranks did not raise")
        t = torch.ones(3)
        dist.all_reduce(t, group=g)
        same(t, torch.full((3,), float(ws)), "all_reduce after the mismatch (group stays usable)")
    with chk.case("mismatch/unchecked"):
        # check="off": the header exchange of the sparse algorithm finds it; every rank raises
        g = dist.new_group(backend="ringzip", pg_options=ringzip.Options(check="off"))
        x = _sparse("mm", rank, (10, 2 + rank), 1, 3, torch.float32)
        try:
            dist.all_reduce(x, group=g)
        except ValueError as e:
            assert "sparse tensors differ" in str(e) and "rank 0 has" in str(e), str(e)
        else:
            raise AssertionError("different sizes on the ranks did not raise")
    dist.destroy_process_group()
    return chk.result()


SECTIONS = [f"all_reduce/{n}" for n in _cases(2)] + ["all_reduce/blocking_call", "non_sum/AVG", "non_sum/MAX",
                                                     "non_sum/PRODUCT", "ddp/embedding_sparse", "mismatch/checked",
                                                     "mismatch/unchecked"]
_LAUNCHES: dict = {}


@pytest.mark.parametrize("case", SECTIONS)
@pytest.mark.parametrize("ws", [2, 3])
def test_sparse_allreduce(ws, case):
    if ws not in _LAUNCHES:
        _LAUNCHES[ws] = mp.run_checks(sparse_matrix, ws, args=(BACKEND,), timeout=120 + 30 * ws, stall=60)
    mp.assert_checks(_LAUNCHES[ws], lambda c: c == case, f"{case} on {ws} ranks")
    assert case in _LAUNCHES[ws].passed
