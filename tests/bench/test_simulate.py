"""The simulator (ringzip.bench.simulate): what the loopback records, and the replay's link and
kernel model on cases whose time is known in closed form."""
from __future__ import annotations

import pytest
import torch

from ringzip import _C
from ringzip.bench import simulate as S

GB = 1e9
# A link model with nothing but bandwidth: 8 Gbit/s = 1 GB/s per NIC and direction.
BANDWIDTH_ONLY = dict(net_gbit=8.0, net_latency_us=0.0, intra_gbyte=1e6, intra_latency_us=0.0)
FREE = S.Kernels({"copy": 1e9, "encode": 1e9, "decode_accumulate": 1e9, "decode_add_encode": 1e9, "feedback": 1e9})


def sent(trace, r):
    return sum(e[2] for e in trace.events(r) if e[0] == "send")


@pytest.mark.parametrize("codec,algo", [("none", "ring"), ("none", "rd"), ("q4", "sra"), ("q4", "ring"),
                                        ("topk:0.01", "sparse")])
def test_recording_leaves_results_alone_and_pairs_every_message(codec, algo):
    n, count = 5, 10_001
    xs = [torch.randn(count, generator=torch.Generator().manual_seed(r)) for r in range(n)]
    trace = _C.sim.Trace()
    if codec == "none":
        plain = _C.loopback.collective("allreduce", xs, algorithm=algo)
        got = _C.loopback.collective("allreduce", xs, algorithm=algo, trace=trace)
    else:
        plain = _C.loopback.compressed("allreduce", xs, codec, algorithm=algo)[0]
        got = _C.loopback.compressed("allreduce", xs, codec, algorithm=algo, trace=trace)[0]
    assert all(torch.equal(a, b) for a, b in zip(plain, got))
    assert len(trace) == n
    ev = [trace.events(r) for r in range(n)]
    sends = sorted((r, p, t, b) for r in range(n) for k, p, b, _, t, _ in ev[r] if k == "send")
    recvs = sorted((p, r, t, b) for r in range(n) for k, p, b, _, t, _ in ev[r] if k == "recv")
    assert sends == recvs  # every send has its receive, same bytes, same tag
    for r in range(n):  # every request is waited for once, after it was posted
        posted = [i for k, _, _, i, _, _ in ev[r] if k in ("send", "recv")]
        waited = [i for k, _, _, i, _, _ in ev[r] if k == "wait"]
        assert sorted(waited) == posted
    if codec != "none":
        assert any(k == "encode" or k.endswith("feedback") or k == "reduce_encode" for k, *_ in ev[0])


def test_the_ring_moves_2_n_minus_1_over_n_of_the_data_at_the_link_rate():
    n, count = 4, 1 << 18
    trace = S.record(n, count, "none", "ring")
    size = 4 * count
    assert all(sent(trace, r) == 2 * (n - 1) * size // n for r in range(n))
    t = S.replay(trace, S.Links.layout(n, 1, **BANDWIDTH_ONLY), FREE)["time"]
    assert t == pytest.approx(2 * (n - 1) / n * size / GB, rel=0.02)
    # Twice the bytes, twice the time; a quarter of the rate, four times.
    assert S.replay(trace, S.Links.layout(n, 1, **BANDWIDTH_ONLY), FREE, scale=2)["time"] == \
        pytest.approx(2 * t, rel=1e-6)
    quarter = dict(BANDWIDTH_ONLY, net_gbit=2.0)
    assert S.replay(trace, S.Links.layout(n, 1, **quarter), FREE)["time"] == pytest.approx(4 * t, rel=1e-6)


def test_ranks_of_one_machine_share_its_nic():
    n, count = 4, 1 << 16
    trace = S.record(n, count, "none", "ring")
    links = lambda machine_of: S.Links(machine_of, **BANDWIDTH_ONLY)  # noqa: E731
    one_each = S.replay(trace, links([0, 1, 2, 3]), FREE)
    node_major = S.replay(trace, links([0, 0, 1, 1]), FREE)  # the ring crosses each NIC once per step
    interleaved = S.replay(trace, links([0, 1, 0, 1]), FREE)  # every hop crosses: two flows per NIC
    assert node_major["wire_bytes"] == one_each["wire_bytes"] // 2
    assert node_major["time"] == pytest.approx(one_each["time"], rel=0.02)
    assert interleaved["time"] == pytest.approx(2 * one_each["time"], rel=0.02)


@pytest.mark.parametrize("n", [4, 8])
def test_an_all_to_all_keeps_every_link_busy(n):
    """The direct exchange: every rank sends its buffer to the n-1 others at once. Each NIC sends
    and receives n-1 buffers, so the call takes (n-1) buffer times, plus at most a chunk (1/16 of
    a buffer) per sender where the first chunks of several senders meet at one receiver. Whole
    messages served in turn left a receiver's link idle while the messages for it waited behind
    others: (2n-3) buffer times."""
    trace = S.record(n, n, "none", "direct")
    size = 64 << 20
    t = S.replay(trace, S.Links.layout(n, 1, **BANDWIDTH_ONLY), FREE, scale=size / (4 * n))["time"]
    buffer_time = size / GB
    assert (n - 1) * buffer_time < t <= (n - 1) * (1 + 1 / 16) * buffer_time * 1.001


def test_each_send_costs_its_thread_the_send_overhead():
    """LogP's o: a rank's n-1 sends of the direct exchange are posted one after another."""
    n, o_us = 8, 5.0
    trace = S.record(n, n, "none", "direct")  # 4-byte buffers: the wire takes nothing
    base = S.replay(trace, S.Links.layout(n, 1, **BANDWIDTH_ONLY), FREE)["time"]
    slow = S.replay(trace, S.Links.layout(n, 1, **BANDWIDTH_ONLY, send_us=o_us), FREE)["time"]
    assert slow == pytest.approx((n - 1) * o_us * 1e-6, rel=0.01)
    assert base < 0.02 * slow


def test_each_received_message_costs_its_receiver_the_receive_overhead():
    """LogP's o at the receiver: a ping-pong pays it once per hop, on top of the sender's."""
    ms = 1e-3
    trace = _C.sim.Trace([[("send", 1, 1, 0, 7), ("wait", -1, 0, 0, 0), ("recv", 1, 1, 1, 8), ("wait", -1, 0, 1, 0)],
                          [("recv", 0, 1, 0, 7), ("wait", -1, 0, 0, 0), ("send", 0, 1, 1, 8), ("wait", -1, 0, 1, 0)]])
    links = lambda **kw: S.Links.layout(2, 1, **BANDWIDTH_ONLY, **kw)  # noqa: E731
    assert S.replay(trace, links(recv_us=1000.0), FREE)["time"] == pytest.approx(2 * ms, rel=0.01)
    assert S.replay(trace, links(recv_us=1000.0, send_us=500.0), FREE)["time"] == pytest.approx(3 * ms, rel=0.01)
    # On one core for both ranks, a receiver's overhead waits for the core like any kernel.
    busy = _C.sim.Trace([[("send", 1, 1, 0, 7), ("wait", -1, 0, 0, 0)],
                         [("recv", 0, 1, 0, 7), ("copy", -1, 2_000_000, -1, 0), ("wait", -1, 0, 0, 0)]])
    kern = S.Kernels({"copy": 1.0})  # 2 ms of copy on rank 1 while the message arrives
    assert S.replay(busy, links(recv_us=1000.0, cores=1), kern)["time"] == pytest.approx(3 * ms, rel=0.01)
    assert S.replay(busy, links(recv_us=1000.0), kern)["time"] == pytest.approx(2 * ms, rel=0.01)


def test_bytes_between_machines_take_the_shared_cores_only_where_they_are_counted():
    """Emulated machines on one host: every byte their TCP/IP stacks move costs the host's cores.
    A 1 MB message at 1 GB/s takes 1 ms of wire. On the only core it waits for the two ranks'
    2 ms copies; at 0.5 ns a byte the stack keeps up with the wire, at 2 ns it sets the rate. With
    a core per rank (a real cluster) nothing of it shows."""
    ms = 1e-3
    trace = _C.sim.Trace([[("copy", -1, 2_000_000, -1, 0), ("send", 1, 1_000_000, 0, 7), ("wait", -1, 0, 0, 0)],
                          [("copy", -1, 2_000_000, -1, 0), ("recv", 0, 1_000_000, 0, 7), ("wait", -1, 0, 0, 0)]])
    kern = S.Kernels({"copy": 1.0})
    links = lambda **kw: S.Links.layout(2, 1, **BANDWIDTH_ONLY, **kw)  # noqa: E731
    assert S.replay(trace, links(cores=2), kern)["time"] == pytest.approx(3 * ms, rel=0.01)
    assert S.replay(trace, links(cores=1, net_cpu_ns_per_byte=0.5), kern)["time"] == pytest.approx(5 * ms, rel=0.02)
    assert S.replay(trace, links(cores=1, net_cpu_ns_per_byte=2.0), kern)["time"] == pytest.approx(6 * ms, rel=0.02)
    assert S.replay(trace, links(net_cpu_ns_per_byte=2.0), kern)["time"] == pytest.approx(3 * ms, rel=0.01)


def test_a_message_waits_for_its_receive_and_kernels_queue_for_cores():
    ms = 1e-3
    kern = S.Kernels({"copy": 1.0})  # a copy of 1e6 bytes: 1 ms
    # Rank 1 copies 10 ms before it posts the receive: the payload moves after that (rendezvous).
    trace = _C.sim.Trace([[("send", 1, 1_000_000, 0, 7), ("wait", -1, 0, 0, 0)],
                          [("copy", -1, 10_000_000, -1, 0), ("recv", 0, 1_000_000, 0, 7), ("wait", -1, 0, 0, 0)]])
    res = S.replay(trace, S.Links.layout(2, 1, **BANDWIDTH_ONLY), kern)
    assert res["time"] == pytest.approx(10 * ms + 1 * ms)
    # Four ranks with one 10 ms kernel each on two cores: two rounds.
    four = _C.sim.Trace([[("copy", -1, 10_000_000, -1, 0)] for _ in range(4)])
    assert S.replay(four, S.Links.layout(4, 1, **BANDWIDTH_ONLY, cores=2), kern)["time"] == pytest.approx(20 * ms)
    assert S.replay(four, S.Links.layout(4, 1, **BANDWIDTH_ONLY), kern)["time"] == pytest.approx(10 * ms)


def test_a_long_link_delays_the_payload_and_a_rendezvous_notice_crosses_it_first():
    ms = 1e-3
    kern = S.Kernels({"copy": 1.0})  # a copy of 1e6 bytes: 1 ms

    def late_receive(copy_ms):
        return _C.sim.Trace([[("send", 1, 1_000_000, 0, 7), ("wait", -1, 0, 0, 0)],
                             [("copy", -1, int(copy_ms * 1e6), -1, 0), ("recv", 0, 1_000_000, 0, 7),
                              ("wait", -1, 0, 0, 0)]])

    far = dict(BANDWIDTH_ONLY, delay_ms=50.0)  # 1 ms on the NICs, 50 ms on the way
    links = lambda **kw: S.Links.layout(2, 1, **far, **kw)  # noqa: E731
    # Gloo: the receive is posted at 10 ms, its notice reaches the sender at 60, the payload arrives at 111.
    assert S.replay(late_receive(10), links(), kern)["time"] == pytest.approx(111 * ms)
    # Eager: the payload left at once and is there at 51 ms, waiting for a receive posted by then ...
    res = S.replay(late_receive(10), links(eager=True), kern)
    assert res["time"] == pytest.approx(51 * ms) and res["finish"][0] == pytest.approx(1 * ms)
    # ... or taken by a receive posted later, at once.
    assert S.replay(late_receive(100), links(eager=True), kern)["time"] == pytest.approx(100 * ms)
    # A receive posted a delay before the send: its notice is there, both move the payload at once.
    late_send = _C.sim.Trace([[("copy", -1, 60_000_000, -1, 0), ("send", 1, 1_000_000, 0, 7), ("wait", -1, 0, 0, 0)],
                              [("recv", 0, 1_000_000, 0, 7), ("wait", -1, 0, 0, 0)]])
    assert S.replay(late_send, links(), kern)["time"] == pytest.approx(111 * ms)
    assert S.replay(late_send, links(eager=True), kern)["time"] == pytest.approx(111 * ms)
    # Messages inside a machine never cross the long link.
    assert S.replay(late_receive(10), S.Links([0, 0], **dict(far, intra_gbyte=1.0)), kern)["time"] == \
        pytest.approx(11 * ms, rel=0.01)


def test_a_connections_window_bounds_the_bytes_in_flight_and_a_pool_multiplies_it():
    ms = 1e-3
    # RTT 100 ms, a window of 1e6 bytes, NICs of 1 GB/s: 8e6 bytes leave in 8 windows, one a round
    # trip (1 ms each on the NIC), the last at 700 ms, there 51 ms later.
    far = dict(BANDWIDTH_ONLY, delay_ms=50.0, window_bytes=1e6, eager=True)
    one = _C.sim.Trace([[("send", 1, 8_000_000, 0, 7), ("wait", -1, 0, 0, 0)],
                        [("recv", 0, 8_000_000, 0, 7), ("wait", -1, 0, 0, 0)]])
    assert S.replay(one, S.Links.layout(2, 1, **far), FREE)["time"] == pytest.approx(751 * ms, rel=0.005)
    # Four connections: two windows of 4e6 bytes (4 ms on the NIC each).
    assert S.replay(one, S.Links.layout(2, 1, **far, pool=4), FREE)["time"] == pytest.approx(154 * ms, rel=0.005)
    no_window = dict(far, window_bytes=0.0)
    assert S.replay(one, S.Links.layout(2, 1, **no_window), FREE)["time"] == pytest.approx(58 * ms, rel=0.005)
    # Three peers at once: three connections, each with its window, side by side on one NIC.
    fan = _C.sim.Trace([[("send", p, 8_000_000, p - 1, 7) for p in (1, 2, 3)] +
                        [("wait", -1, 0, i, 0) for i in range(3)]] +
                       [[("recv", 0, 8_000_000, 0, 7), ("wait", -1, 0, 0, 0)] for _ in range(3)])
    assert S.replay(fan, S.Links.layout(4, 1, **far), FREE)["time"] == pytest.approx(753 * ms, rel=0.005)
    # Where the NIC is the narrower (a window of 1e9 bytes), the three share it: 24 ms of bytes.
    wide = dict(far, window_bytes=1e9)
    assert S.replay(fan, S.Links.layout(4, 1, **wide), FREE)["time"] == pytest.approx(74 * ms, rel=0.02)


def test_a_paced_pair_sends_no_faster_than_its_rate_however_idle_the_nic():
    """Options.link_gbit: each pair of ranks between machines paced to its share. Three pairs paced
    to 0.25 GB/s each on a 1 GB/s NIC: 8e6 bytes each take 32 ms (chunks of 0.5e6 leave every 2 ms,
    the last a 0.5 ms burst), where unpaced the NIC's 24 ms; paced above the NIC's share, the NIC."""
    fan = _C.sim.Trace([[("send", p, 8_000_000, p - 1, 7) for p in (1, 2, 3)] +
                        [("wait", -1, 0, i, 0) for i in range(3)]] +
                       [[("recv", 0, 8_000_000, 0, 7), ("wait", -1, 0, 0, 0)] for _ in range(3)])
    time = lambda **kw: S.replay(fan, S.Links.layout(4, 1, **dict(BANDWIDTH_ONLY, eager=True, **kw)), FREE)["time"]  # noqa: E731
    assert time(pace_gbit=2.0) == pytest.approx(32e-3, rel=0.03)
    assert time(pace_gbit=8.0) == pytest.approx(time(), rel=1e-6) == pytest.approx(24e-3, rel=0.07)
    # The sweeps' pacing, read from their command as the transport sets it.
    header = {"argv": ["collective", "--ropt", "link_gbit=1", "--ropt", "codec=q4"]}
    assert S._pace_gbit(header, 4) == pytest.approx(_C.pace_share / 3)  # noqa: SLF001
    assert S._pace_gbit({"argv": ["collective"]}, 4) == 0  # noqa: SLF001


def test_copies_inside_a_machine_take_its_cores():
    """Shared memory: the sender's copy in and the receiver's copy out each take a core; with one
    core they run one after the other, with a core each they overlap (cut-through)."""
    ms = 1e-3
    trace = _C.sim.Trace([[("send", 1, 1_000_000, 0, 7), ("wait", -1, 0, 0, 0)],
                          [("recv", 0, 1_000_000, 0, 7), ("wait", -1, 0, 0, 0)]])
    one_machine = dict(BANDWIDTH_ONLY, intra_gbyte=1.0)  # 1 ms per copy of 1e6 bytes
    links = lambda cores: S.Links([0, 0], **one_machine, cores=cores)  # noqa: E731
    assert S.replay(trace, links(None), FREE)["time"] == pytest.approx(1 * ms, rel=0.01)
    assert S.replay(trace, links(1), FREE)["time"] == pytest.approx(2 * ms, rel=0.01)


def test_the_kernels_slowdown_inside_calls_is_read_from_their_codec_timers():
    header = {"nproc_per_node": 1, "link_gbit": 8.0, "topology": {}}
    row = {"nproc": 2, "count": 1 << 16, "size_bytes": 4 << 16, "codec": "q4", "algorithm": "sra", "hierarchy": None}
    rows_k = [{"codec": "q4", "bytes": 4 << 16, "numel": 1 << 16, "memcpy_gbps": 10.0, "encode_gbps": 2.0,
               "decode_acc_gbps": 4.0, "decode_add_encode_gbps": 2.0, "feedback_gbps": 1.0}]
    rec = S.Recorder()
    compute = S.simulate_row(header, dict(row, key="k"), rows_k, rec, net_latency_us=0.0)["compute"]
    measured = dict(row, time_us=1e6 * 4 * compute, codec_share=0.75)  # the codec's timers: 3x the replay's kernels
    assert S.calibrate_kernels([(header, measured)], rows_k, net_latency_us=0.0) == pytest.approx(3.0)
    slower = S.simulate_row(header, dict(row, key="k"), rows_k, rec, 3.0, net_latency_us=0.0)["compute"]
    assert slower == pytest.approx(3 * compute, rel=0.05)  # all but the element-wise copies


def test_a_receive_nobody_sends_is_reported_not_hung():
    trace = _C.sim.Trace([[("recv", 1, 8, 0, 3), ("wait", -1, 0, 0, 0)], [("send", 0, 8, 0, 4), ("wait", -1, 0, 0, 0)]])
    with pytest.raises(RuntimeError, match="ranks \\[0, 1\\] wait for messages never sent"):
        S.replay(trace, S.Links.layout(2, 1, **BANDWIDTH_ONLY), FREE)


def test_a_node_aware_trace_crosses_the_nics_with_one_shard_per_rank():
    nodes, per, count = 2, 2, 1 << 16
    node_of = [r // per for r in range(nodes * per)]
    trace = S.record(nodes * per, count, "none", "ring", nodes=node_of)
    res = S.replay(trace, S.Links(node_of, **BANDWIDTH_ONLY), FREE)
    # Between the 2 nodes each rank all-reduces its shard (count/per) with its twin: 2 (N-1)/N of it.
    assert res["wire_bytes"] == nodes * per * 2 * (nodes - 1) * (4 * count // per) // nodes


def test_threads_of_a_rank_replay_as_lanes_that_wait_for_each_others_hand_offs():
    ms = 1e-3
    kern = S.Kernels({"copy": 1.0})
    # Lane 1 copies for 10 ms, then marks point 0; lane 0 sends only after that point.
    trace = _C.sim.Trace([[("after", -1, 0, 0, 0, 0), ("send", 1, 1_000_000, 0, 7, 0), ("wait", -1, 0, 0, 0, 0),
                           ("copy", -1, 10_000_000, -1, 0, 1), ("mark", -1, 0, 0, 0, 1)],
                          [("recv", 0, 1_000_000, 0, 7), ("wait", -1, 0, 0, 0)]])
    assert S.replay(trace, S.Links.layout(2, 1, **BANDWIDTH_ONLY), kern)["time"] == pytest.approx(11 * ms)


def test_the_node_aware_pipeline_is_recorded_with_its_second_thread_and_hand_offs():
    nodes, per, count = 2, 2, 4 << 20  # 16 MiB per rank: two chunks, pipelined on two threads
    node_of = [r // per for r in range(nodes * per)]
    trace = S.record(nodes * per, count, "none", "ring", nodes=node_of)
    ev = trace.events(0)
    assert {e[5] for e in ev} == {0, 1}
    assert sorted(e[3] for e in ev if e[0] == "mark") == [0, 1, 2, 3]  # inside and between stage of each chunk
    assert sorted(e[3] for e in ev if e[0] == "after") == [0, 1, 2, 3]
    slow_inside = dict(BANDWIDTH_ONLY, intra_gbyte=1.0)
    threaded = S.replay(trace, S.Links(node_of, **slow_inside), FREE)["time"]
    # Each NIC carries its node's shards (per x 2 (N-1)/N of a shard); inside the node the
    # reduce-scatter and the all-gather move 2 (P-1)/P of the data per rank. Pipelined, the two
    # chunks' stages overlap: less than the stages one after the other, no less than the NIC's time.
    wire = per * 2 * (nodes - 1) / nodes * (4 * count / per) / GB
    inside = 2 * (per - 1) / per * 4 * count / GB
    assert wire <= threaded < 0.9 * (wire + inside)


def test_calibration_recovers_the_costs_a_measurement_was_made_with():
    """Calls 'measured' by the replay itself at known latency, message overhead and kernel cost:
    the calibration finds those on its grids (the call cost is what the replay leaves over)."""
    rows_k = [{"codec": c, "bytes": 1 << 16, "numel": 1 << 14, "memcpy_gbps": 10.0, "encode_gbps": 2.0,
               "decode_acc_gbps": 4.0, "decode_add_encode_gbps": 2.0, "feedback_gbps": 1.0} for c in ("none", "q4")]
    truth = dict(net_latency_us=50.0, send_us=75.0, recv_us=75.0)
    rec, rows = S.Recorder(), []
    for n, codec, algo in ((2, "none", "ring"), (4, "none", "ring"), (3, "q4", "sra"), (4, "q4", "ring")):
        header = {"nproc_per_node": 1, "link_gbit": 8.0, "topology": {}}
        row = {"nproc": n, "count": 4096, "size_bytes": 4 * 4096, "codec": codec, "algorithm": algo, "hierarchy": None}
        t = S.simulate_row(header, dict(row, key=S._key(row)), rows_k, rec, 1.0, 25.0, cores=2, **truth)["time"]
        rows.append((header, dict(row, time_us=t * 1e6 + 30.0)))
    fit = S.calibrate(rows, rows_k, cores=2)
    assert (fit["net_latency_us"], fit["send_us"], fit["launch_us"]) == (50.0, 75.0, 25.0)
    assert fit["call_us"] == pytest.approx(30.0, abs=0.5) and fit["median_error"] < 1e-6


def test_calls_measured_twice_bound_the_best_error_any_prediction_reaches():
    rows = [{"measured_ms": 3.0, "repeat_ms": 1.0}, {"measured_ms": 2.0, "repeat_ms": 2.2},
            {"measured_ms": 5.0, "repeat_ms": None}]
    floor = S.repeat_floor(rows)
    assert floor["pairs"] == 2 and floor["worst"] == pytest.approx(0.5) and floor["over_25_percent"] == 1
    assert floor["median"] == pytest.approx((0.5 + 0.2 / 4.2) / 2)
    # 2 ms, between 3 and 1: 33 % and 100 % off -- 1.5 ms is the best there is, 50 % off either way.
    assert max(abs(1.5 / 3.0 - 1), abs(1.5 / 1.0 - 1)) == pytest.approx(floor["worst"])


def test_the_command_line_replays_a_long_link_with_its_window_and_pool(tmp_path, capsys):
    """`ringzip-bench simulate --delay --window --connections`: SRA pays two delays, the ring its
    2(n-1) steps' (less what its pipelined segments overlap), a window held to one connection slows
    the ring, a second connection relieves it; SRA has n-1 windows."""
    import json

    from ringzip.bench.cli import main

    kernels = tmp_path / "k.json"
    kernels.write_text(json.dumps([{"codec": "q8", "bytes": 16 << 20, "numel": 4 << 20, "memcpy_gbps": 10.0,
                                    "encode_gbps": 5.0, "decode_acc_gbps": 5.0, "decode_add_encode_gbps": 5.0}]))

    def times(*extra):
        out = tmp_path / "rows.json"
        assert main(["simulate", "--machines", "4", "--net", "1gbit", "-b", "16M", "-e", "16M", "--codec", "none",
                     "--algorithm", "ring,sra", "--kernels", str(kernels), "--json", str(out), *extra]) == 0
        return {r["algorithm"]: r["time_s"] for r in json.loads(out.read_text())["rows"]}

    near = times()
    far = times("--delay", "50ms")
    assert far["sra"] == pytest.approx(near["sra"] + 2 * 0.05, rel=0.01)  # two rounds, each a delay
    assert far["ring"] > near["ring"] + 4 * 0.05 and far["sra"] < far["ring"]
    held = times("--delay", "50ms", "--window", "1M")  # 1 MiB per round trip: 10 Mbyte/s per connection
    two = times("--delay", "50ms", "--window", "1M", "--connections", "2")
    assert held["ring"] > 2 * far["ring"] and two["ring"] < 0.6 * held["ring"]
    assert held["sra"] < held["ring"]  # three peers at once: three windows
    assert "one-way delay 50ms, window 1M x 2 connection(s)" in capsys.readouterr().out


def test_a_sweeps_pool_is_what_its_ranks_got_else_what_its_command_asked():
    got = {"topology": {"none/ring": {"connections": [0, 2, 2, 2]}, "q4/sra": {"connections": [2, 0, 2, 2]}},
           "argv": ["collective", "--ropt", "connections=4"]}
    assert S._connections(got) == 2  # noqa: SLF001 - what the ranks reported wins over the command
    assert S._connections({"argv": ["collective", "--ropt", "codec=q4", "--ropt", "connections=3"]}) == 3  # noqa: SLF001
    chosen = {"argv": ["collective", "--ropt", "connections=0"]}  # each pair by its round trip
    assert S._connections(dict(chosen, delay_ms=50.0)) == 2  # noqa: SLF001
    assert S._connections(dict(chosen, delay_ms=1.0)) == 1  # noqa: SLF001
    assert S._connections({"topology": {"x": {"layout": "flat"}}}) == 1  # noqa: SLF001 - recorded before
