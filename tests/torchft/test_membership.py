"""ringzip.torchft.ProcessGroupRingzip through torchft's own configure(), as its Manager calls
it at each quorum: 3 -> 2 -> 1 -> 3 members with top-k and error feedback against the pure-torch
reference under the documented rule (a member's residual stays with its process; the random
streams continue from the members' furthest), the cost model's figures carried (no probe after a
change), options set at run time kept by later groups and
taken by a member that joins, world size 1 exact, and the public API for a group of one's own
(ringzip.new_process_group)."""
from __future__ import annotations

import os
import time

import pytest
import torch

from tests import mp

pytest.importorskip("torchft")

N = 4099  # floats per all-reduce: uneven, one top-k block


def _store(ctx):
    """A TCPStore served by rank 0 of the launch; its address for torchft's configure."""
    from torch.distributed import TCPStore

    path = os.path.join(ctx.tmpdir, "port")
    if ctx.rank == 0:
        store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        with open(path + ".tmp", "w") as f:
            f.write(str(store.port))
        os.replace(path + ".tmp", path)
        return store, store.port
    while not os.path.exists(path):
        time.sleep(0.01)
    port = int(open(path).read())
    return TCPStore("127.0.0.1", port, is_master=False), port


def _data(step, member, k):
    return torch.randn(N, generator=torch.Generator().manual_seed(1000 * step + 10 * member + k))


# (quorum, members in rank order): member 2 sits out quorum 2; member 0 is alone in quorum 3;
# quorum 4 numbers them anew.
QUORUMS = [(1, [0, 1, 2]), (2, [0, 1]), (3, [0]), (4, [2, 0, 1])]
CALLS = 2  # all-reduces per quorum


def membership_checks(ctx):
    torch.set_num_threads(1)
    import torch.distributed as dist

    import ringzip
    from ringzip.torchft import ProcessGroupRingzip

    me = ctx.rank  # the member (replica); its rank changes with the quorum
    store, port = _store(ctx)
    pg = ProcessGroupRingzip(ringzip.Options(codec="topk:0.1", error_feedback=True, min_numel=0),
                             timeout=__import__("datetime").timedelta(seconds=30))
    chk = mp.Checker(me)
    with chk.case("before_first_group"):
        assert ringzip.get_options(pg).codec == "topk:0.1"
        try:
            ringzip.stats(pg)
            raise AssertionError("stats of a group not built yet")
        except ValueError as e:
            assert "no group yet" in str(e), e
    outs, calls, figures = {}, {}, {}
    buf = torch.empty(N)  # one tensor all along, as DiLoCo's pseudo-gradients: one residual
    for q, members in QUORUMS:
        if me not in members:
            continue
        mp.progress(f"quorum {q}")
        pg.configure(f"127.0.0.1:{port}/torchft/{q}", f"replica{me}", members.index(me), len(members))
        for k in range(CALLS):
            buf.copy_(_data(q, me, k))
            pg.allreduce([buf], dist.AllreduceOptions()).wait()
            outs[q, k] = buf.clone()
        exact = torch.ones(1 << 16)  # exact, algorithm="auto": the cost model plans it
        with ringzip.exact():
            pg.allreduce([exact], dist.AllreduceOptions()).wait()
        with chk.case(f"quorum{q}_cost_model"):
            if len(members) > 1:
                auto = ringzip.stats(pg)["auto"]
                # The first group probes and agrees; a later one starts from the figures its
                # members carried (every member the same): no probe, no agreement yet.
                assert auto["refreshes"] == (1 if q == 1 else 0), (q, auto["refreshes"])
                figures[q] = auto["params"]
        if q == 1 and me in (0, 1):  # at run time, on the members that go on: kept by later groups
            ringzip.set_options(pg, codec="topk:0.05")
        with chk.case(f"quorum{q}_rank_and_size"):
            st = ringzip.error_feedback_state(pg)
            assert (st["rank"], st["world_size"]) == (members.index(me), len(members)), st
            calls[q] = st["calls"]
            assert ringzip.stats(pg)["topology"]["layout"], ringzip.stats(pg)
    with chk.case("options_of_the_last_group"):
        assert ringzip.get_options(pg).codec == "topk:0.05", ringzip.get_options(pg)
    state = ringzip.error_feedback_state(pg)
    pg.shutdown()
    with chk.case("shutdown_lets_the_group_go"):
        try:
            ringzip.stats(pg)
            raise AssertionError("stats of a group after shutdown")
        except ValueError:
            pass
    return {"result": chk.result(), "outs": outs, "state": state, "calls": calls, "figures": figures}


def _reference():
    """What each member's calls return, and its residual at the end, under the rule."""
    from ringzip.reference import collectives as RC

    res = {m: torch.zeros(N) for m in range(3)}
    outs = {}
    codec = "topk:0.1"
    for q, members in QUORUMS:
        for k in range(CALLS):
            xs = [_data(q, m, k) for m in members]
            if len(members) == 1:
                got = [xs[0]]  # one member: exact, the residual untouched
            else:
                got, new = RC.compressed_allreduce(xs, codec, residuals=[res[m] for m in members])
                for m, r in zip(members, new):
                    res[m] = r
            for m, o in zip(members, got):
                outs[m, q, k] = o
        if q == 1:
            codec = "topk:0.05"  # set on members 0 and 1 after quorum 1; member 2 takes it at 4
    return outs, res


def test_members_come_and_go():
    res = mp.run(membership_checks, 3, timeout=180)
    mp.raise_on_failures(mp.merge([r["result"] for r in res]), "torchft membership")
    for q, members in QUORUMS:  # the random streams' position: the same on every member
        assert len({res[m]["calls"][q] for m in members}) == 1, (q, [res[m]["calls"][q] for m in members])
    assert res[2]["calls"][4] == res[0]["calls"][3] + CALLS, [r["calls"] for r in res]  # continued from the furthest
    for q in (1, 2, 4):  # the cost model's figures: agreed in quorum 1, carried to 2 and (through 3) to 4
        assert all(res[m]["figures"][q] == res[0]["figures"][1] for m in range(3) if q in res[m]["figures"]), q
    want, want_res = _reference()
    for m, r in enumerate(res):
        for (q, k), out in r["outs"].items():
            assert torch.equal(out, want[m, q, k]), f"member {m}, quorum {q}, call {k}: differs from the reference"
        held = [t for _, t in r["state"]["residuals"]]
        assert len(held) == 1 and torch.equal(held[0], want_res[m]), f"member {m}: residual differs from the reference"
