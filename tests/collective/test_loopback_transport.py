"""The in-process loopback transport (csrc/transport/loopback/) through raw transport calls:
eager (Gloo-like) matching by (peer, tag), grouped (NCCL-like) matching by posting order and
stream-ordered groups, deadlock and timeout reports, size checks, abort, close."""
import re
import time

import pytest
import torch

from ringzip import _C

L = _C.loopback


def run(programs, mode="eager", timeout_ms=20000):
    return L.script([[(w, p, t, b) for (w, p, t, b) in prog] for prog in programs], mode, timeout_ms)


def fails(programs, mode, *words, timeout_ms=20000, within=5.0):
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as e:
        run(programs, mode, timeout_ms)
    assert time.monotonic() - t0 < within, f"the failure took {time.monotonic() - t0:.1f} s"
    for w in words:
        assert w in str(e.value), f"{w!r} not in: {e.value}"
    return str(e.value)


def S(peer, tag, n=4):
    return ("send", peer, tag, n)


def R(peer, tag, n=4):
    return ("recv", peer, tag, n)


def W(i):
    return ("wait", i, 0, 0)


START, END = ("start", 0, 0, 0), ("end", 0, 0, 0)


def test_eager_matches_by_tag_not_order():
    got = run([[S(1, 5), S(1, 6), W(0), W(1)], [R(0, 6), R(0, 5), W(0), W(1)]])
    assert [int(b[0]) for b in got[1][0]] == [6, 5]
    assert got[1][1] == [0, 0]


def test_eager_receive_from_any_source():
    got = run([[S(1, 7), W(0)], [("recv_any", 0, 7, 4), ("recv_any", 0, 7, 4), W(0), W(1)], [S(1, 7), W(0)]])
    assert sorted(got[1][1]) == [0, 2]


def test_gloo_mode_wants_the_receive_of_an_exchange_before_its_send():
    # Gloo sends a payload once the peer's receive-ready notice came, and a rank's notices queue
    # behind its own payloads: a rank that sends before it posts the receive of an exchange
    # makes its peer wait for the whole payload. Receive first, or other tags / peers, pass.
    first = lambda peer: [R(peer, 4), S(peer, 4), W(0), W(1)]  # noqa: E731
    got = run([first(1), first(0)], "gloo")
    assert got[0][0][0].tolist() == [4] * 4 and got[1][0][0].tolist() == [4] * 4
    run([[S(1, 4), R(1, 5), W(0), W(1)], [S(0, 5), R(0, 4), W(0), W(1)]], "gloo")
    late = [[S(1, 4), R(1, 4), W(0), W(1)], [R(0, 4), S(0, 4), W(0), W(1)]]
    run(late, "eager")
    fails(late, "gloo", "rank 0 posted its receive from rank 1 (tag 0x4) after its send to that rank",
          "one direction at a time")


def test_eager_larger_receive_takes_a_smaller_message():
    got = run([[S(1, 9, 3), W(0)], [R(0, 9, 8), W(0)]])
    assert got[1][0][0].tolist() == [9, 9, 9, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("mode", ["eager", "grouped"])
def test_receive_smaller_than_the_send_fails_clearly(mode):
    fails([[S(1, 3, 8), W(0)], [R(0, 3, 4), W(0)]], mode, "sends 8 bytes", "takes 4 bytes")


def test_grouped_needs_equal_sizes():
    fails([[S(1, 3, 4), W(0)], [R(0, 3, 8), W(0)]], "grouped", "must be equal")


def test_grouped_matches_by_posting_order_and_ignores_tags():
    got = run([[START, S(1, 5), S(1, 6), END, W(0), W(1)], [START, R(0, 6), R(0, 5), END, W(0), W(1)]], "grouped")
    assert [int(b[0]) for b in got[1][0]] == [5, 6]


def test_posts_outside_a_group_form_one_at_the_next_wait():
    # NcclTransport's rule: both ranks post send and receive, then wait: one implicit group each.
    prog = lambda peer: [S(peer, 1), R(peer, 1), W(1), W(0)]  # noqa: E731
    got = run([prog(1), prog(0)], "grouped")
    assert got[0][0][0].tolist() == [1] * 4 and got[1][0][0].tolist() == [1] * 4


def test_receive_whose_send_sits_in_a_later_group_deadlocks_in_grouped_mode_only():
    prog = lambda peer: [START, R(peer, 1), END, START, S(peer, 1), END, W(0), W(1)]  # noqa: E731
    run([prog(1), prog(0)], "eager")  # Gloo: receives are posted eagerly, fine
    msg = fails([prog(1), prog(0)], "grouped", "deadlock", "cannot start before rank")
    assert "rank 0: waits for its receive of 4 bytes from rank 1" in msg


def test_eager_deadlock_is_reported_at_once():
    fails([[R(1, 1), W(0)], [R(0, 1), W(0)]], "eager", "deadlock", "rank 1: waits for its receive")


def test_deadlock_when_a_peer_finished_without_sending():
    fails([[R(1, 1), W(0)], []], "eager", "deadlock", "finished")


def test_timeout_when_a_peer_is_slow():
    msg = fails([[R(1, 1), W(0)], [("sleep", 1500, 0, 0), S(0, 1), W(0)]], "eager", "timed out after 200 ms",
                timeout_ms=200)
    assert "receive of 4 bytes from rank 1" in msg


def test_abort_wakes_every_waiter():
    fails([[("sleep", 50, 0, 0), ("abort", 0, 0, 0)], [R(0, 1), W(0)], [R(0, 1), W(0)]], "eager",
          "rank 0 aborted the transport")


@pytest.mark.parametrize("mode", ["eager", "grouped"])
def test_posting_after_close_fails(mode):
    fails([[("close", 0, 0, 0), S(1, 1)], []], mode, "closed")


def test_dropping_an_unfinished_request_fails_the_hub():
    fails([[S(1, 1), ("drop", 0, 0, 0)], [("sleep", 50, 0, 0), R(0, 1), W(0)]], "eager", "dropped its unfinished send")


def test_grouped_mode_refuses_waits_inside_the_open_group_and_any_source():
    fails([[START, S(1, 1), W(0)], []], "grouped", "inside the group that posts the transfer")
    fails([[("recv_any", 0, 1, 4)], []], "grouped", "any source")
    fails([[END], []], "grouped", "group_end without group_start")


def test_bad_peer_and_zero_bytes():
    fails([[S(0, 1)]], "eager", "bad peer 0")
    fails([[S(3, 1), W(0)], []], "grouped", "bad peer 3")
    got = run([[S(1, 1, 0), W(0)], [R(0, 1, 0), W(0)]], "grouped")  # never reaches the hub
    assert got[1][0][0].numel() == 0


def test_failures_come_back_from_the_collectives_too():
    with pytest.raises(ValueError, match="alltoall needs splits"):
        L.collective("alltoall", [torch.zeros(3), torch.zeros(3)], splits=[[1, 2], [2, 1], [0, 0]])
    with pytest.raises(ValueError, match="unknown mode"):
        L.collective("barrier", [torch.zeros(1)], mode="nccl")


@pytest.mark.parametrize("mode", ["eager", "grouped"])
@pytest.mark.parametrize("algo", ["star", "ring", "rd"])
def test_a_collective_of_mismatched_sizes_fails_on_every_rank_at_once(mode, algo):
    xs = [torch.ones(10), torch.ones(12), torch.ones(10)]  # rank 1 disagrees
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as e:
        L.collective("allreduce", xs, mode=mode, algorithm=algo)
    assert time.monotonic() - t0 < 5
    msg = str(e.value)
    assert re.search(r"rank \d sends \d+ bytes .* takes \d+ bytes", msg), msg
    assert "ringzip allreduce (seq 0, rank" in msg, msg  # Comm::fail names the call


def test_reduce_op_errors_reach_the_caller():
    with pytest.raises(RuntimeError, match="needs an integer or bool dtype"):
        L.collective("allreduce", [torch.ones(3)] * 2, reduce_op="band", algorithm="direct")
    with pytest.raises(ValueError, match="unknown compressed algorithm"):
        L.compressed("allreduce", [torch.ones(3)] * 2, "q8", algorithm="tree")
