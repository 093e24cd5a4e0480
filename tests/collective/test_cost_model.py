"""The cost model's pure functions (csrc/plan/cost.h through ringzip._C.cost): each
algorithm's terms read off its schedule, the dense choice, the candidates of codec="auto:<codec>"
and the codec choice given fixed parameters (docs/algorithms.md, "Choosing: the cost model")."""
from __future__ import annotations

import math

import pytest

from ringzip import _C

C = _C.cost
MIB = 1 << 20
GBIT = 8e-9  # inv_bw of a 1 Gbit/s link, seconds per byte
SPEED = (1 / 2e9, 1 / 2e9, 1 / 1e9)  # encode, decode, feedback: seconds per input byte
SPEEDS = {name: SPEED for name in ("bf16", "fp16", "q8", "q4", "q2", "q1", "topk:0.01")}


def test_the_per_call_cost_adds_to_every_way_alike():
    for a in ("ring", "rd", "star", "hd", "tree", "direct", "sra"):
        base = C.predict_dense(a, MIB, 4, alpha=1e-4, inv_bw=GBIT)
        e = C.predict_dense(a, MIB, 4, alpha=1e-4, inv_bw=GBIT, call=2e-3)
        assert e["total"] == pytest.approx(base["total"] + 2e-3), a
        assert e["latency"] == pytest.approx(base["latency"] + 2e-3), a  # not the link's: link_sample leaves it out
        assert e["messages"] == base["messages"] and e["wire"] == pytest.approx(base["wire"]), a
    assert C.predict_dense("ring", MIB, 1, alpha=1e-4, inv_bw=GBIT, call=2e-3)["total"] == 0  # one rank: no call


def test_dense_terms_follow_the_schedules():
    S, n = 64 * MIB, 4
    ring = C.predict_dense("ring", S, n, alpha=0.0, inv_bw=GBIT, reduce=0.0)
    assert ring["wire_bytes"] == pytest.approx(2 * (n - 1) / n * S)
    assert ring["total"] == pytest.approx(ring["wire"])
    assert C.predict_dense("hd", S, n, 0.0, GBIT, 0.0)["wire_bytes"] == pytest.approx(ring["wire_bytes"])
    assert C.predict_dense("rd", S, n, 0.0, GBIT, 0.0)["wire_bytes"] == pytest.approx(2 * S)  # log2 4 whole buffers
    assert C.predict_dense("rd", S, 3, 0.0, GBIT, 0.0)["wire_bytes"] == pytest.approx(3 * S)  # + fold in and out
    assert C.predict_dense("star", S, n, 0.0, GBIT, 0.0)["wire_bytes"] == pytest.approx(2 * (n - 1) * S)
    assert C.predict_dense("direct", S, n, 0.0, GBIT, 0.0)["wire_bytes"] == pytest.approx((n - 1) * S)
    # latency: the star's two rounds of few messages beat the ring's 2(n-1) rounds
    star, ring8 = (C.predict_dense(a, 8, n, alpha=1e-4, inv_bw=GBIT)["messages"] for a in ("star", "ring"))
    assert star < ring8
    assert C.predict_dense("ring", 0, n, 1e-4, GBIT)["total"] == 0
    assert C.predict_dense("ring", S, 1, 1e-4, GBIT)["total"] == 0


def test_total_combines_terms_with_overlap():
    e = C.predict_dense("ring", 64 * MIB, 4, alpha=1e-4, inv_bw=GBIT, reduce=1 / 4e9)
    hi, lo = max(e["wire"], e["compute"]), min(e["wire"], e["compute"])
    assert e["total"] == pytest.approx(e["latency"] + hi + (1 - e["overlap"]) * lo)
    assert 0 < e["overlap"] < 1  # segments stream: reduction overlaps the transfer


def test_shared_host_limits_the_average_rank_not_the_busiest():
    """Ranks sharing a host share its copies: there the star's root is no bottleneck (its
    traffic averaged over the ranks is the ring's); on separate links it is (6 buffers vs 1.5)."""
    S, n = 16 * MIB, 4
    link = C.predict_dense("star", S, n, 0.0, GBIT, 0.0)
    host = C.predict_dense("star", S, n, 0.0, GBIT / 100, 0.0, inv_host=GBIT)
    ring = C.predict_dense("ring", S, n, 0.0, GBIT / 100, 0.0, inv_host=GBIT)
    assert not link["host_bound"] and link["wire"] == pytest.approx(6 * S * GBIT)
    assert host["host_bound"] and host["wire"] == pytest.approx(1.5 * S * GBIT) == pytest.approx(ring["wire"])
    assert C.best_dense(S, n, 0.0, GBIT) != "star"


def test_best_dense_by_size_and_link():
    assert C.best_dense(8, 4, alpha=1e-4, inv_bw=GBIT) == "star"
    assert C.best_dense(64 * MIB, 4, alpha=1e-4, inv_bw=GBIT) in ("ring", "hd")
    assert C.best_dense(64 * MIB, 3, alpha=1e-4, inv_bw=GBIT) == "ring"  # hd's fold costs a whole buffer
    with pytest.raises(ValueError):
        C.predict_dense("zz", 8, 4, 1e-4, GBIT)


@pytest.mark.parametrize("setting,want", [
    ("auto", ["none", "bf16", "fp16", "q8", "q4"]),
    ("auto:q4", ["none", "bf16", "fp16", "q8", "q4"]),
    ("auto:q8", ["none", "bf16", "fp16", "q8"]),
    ("auto:q1", ["none", "bf16", "fp16", "q8", "q4", "q2", "q1"]),
    ("auto:fp16", ["none", "fp16", "bf16"]),
    ("auto:bf16", ["none", "bf16", "fp16"]),
    ("auto:none", ["none"]),
    ("auto:topk:0.01", ["none", "topk:0.01"]),
    ("auto:randomk:0.1", ["none", "randomk:0.1"]),
    ("q4", []),
])
def test_candidates(setting, want):
    assert C.candidates(setting) == want


@pytest.mark.parametrize("bad", ["auto:zz", "auto:", "auto:auto", "auto:topk:2", "autoq4", "auto:q4:1"])
def test_bad_codec_strings_raise(bad):
    with pytest.raises(ValueError):
        C.candidates(bad)


def test_codec_choice_by_link_and_size():
    fast = dict(alpha=10e-6, inv_bw=GBIT / 100, reduce=1 / 4e9, speeds=SPEEDS)  # 100 Gbit/s
    slow = dict(alpha=100e-6, inv_bw=GBIT, reduce=1 / 4e9, speeds=SPEEDS)       # 1 Gbit/s
    assert C.choose_codec("auto", 64 * MIB, 4, **fast)[0] == "none"
    choice, algo, dense, predicted = C.choose_codec("auto", 64 * MIB, 4, **slow)
    assert choice == "q4" and algo in ("sra", "ring"), (choice, predicted)
    assert set(predicted) == {"none", "bf16", "fp16", "q8", "q4"}
    assert predicted["q4"] < predicted["q8"] < predicted["bf16"] < predicted["none"]
    # small calls are latency-bound: exact wins even on the slow link (at 4 KiB: from 16 KiB on, the
    # exact ways auto may choose -- ring, direct, star, which add in one order -- cost 1.3x recursive
    # doubling's time here and q4 wins)
    assert C.choose_codec("auto", 4 * 1024, 4, **slow)[0] == "none"
    # the named codec bounds the lossiness
    assert C.choose_codec("auto:q8", 64 * MIB, 4, **slow)[0] == "q8"
    assert C.choose_codec("auto:topk:0.01", 64 * MIB, 4, **slow)[0] == "topk:0.01"
    assert C.choose_codec("auto", 64 * MIB, 1, **slow)[0] == "none"  # one rank: nothing to send


def test_codec_bound_by_cpu_is_not_chosen():
    """A codec slower than the link it saves is not worth it: with a slow codec on a fast link
    exact wins, and q4's prediction is bounded below by its codec time."""
    slow_codec = {k: (1 / 0.2e9,) * 3 for k in SPEEDS}
    args = dict(alpha=20e-6, inv_bw=GBIT / 10, reduce=1 / 4e9, speeds=slow_codec)
    choice, _, _, predicted = C.choose_codec("auto", 64 * MIB, 4, **args)
    assert choice == "none"
    assert predicted["q4"] >= 64 * MIB / 0.2e9


def test_margin_prefers_less_lossy_on_near_ties():
    """bf16 and fp16 cost the same: the first listed wins (the named one, else bf16)."""
    slow = dict(alpha=100e-6, inv_bw=GBIT, reduce=1 / 4e9, speeds=SPEEDS)
    assert C.choose_codec("auto:bf16", 64 * MIB, 4, **slow)[0] == "bf16"
    assert C.choose_codec("auto:fp16", 64 * MIB, 4, **slow)[0] == "fp16"


def test_reduce_scatter_prices_half_the_traffic():
    args = dict(alpha=0.0, inv_bw=GBIT, reduce=0.0, speed=SPEED)
    ar = C.predict("q4", "sra", 64 * MIB, 4, **args)
    rs = C.predict("q4", "sra", 64 * MIB, 4, reduce_scatter=True, **args)
    assert rs["wire_bytes"] == pytest.approx(ar["wire_bytes"] / 2)
    exact = C.predict("none", "auto", 64 * MIB, 4, **args)
    part = 64 * MIB // 4 // 4  # elements per rank's part
    assert ar["wire_bytes"] == pytest.approx(2 * 3 * _C.codec.encoded_bytes("q4", part, 512))
    assert exact["wire_bytes"] == pytest.approx(2 * 3 / 4 * 64 * MIB)


def test_host_speeds_are_measured_and_cached():
    a = C.host_codec_speed("q4")
    assert all(0 < x < 1e-6 for x in a) and C.host_codec_speed("q4") == a
    assert 0 < C.host_reduce_speed() < 1e-6 and not math.isnan(C.host_reduce_speed())


def test_sra_segments_grow_where_the_codec_bounds_the_call():
    # codec="auto" runs SRA in 4x longer segments where the model finds the codec, not the link,
    # the bound: fewer messages, whose wake-ups take the codec's cores (cost.h)
    fine = C.sra_segment_elems("q8", 64 * MIB, 4, 1e-4, GBIT, SPEED)  # 1 Gbit/s: the link bounds q8
    fast = C.sra_segment_elems("q8", 64 * MIB, 4, 1e-4, GBIT / 10, SPEED)  # 10 Gbit/s: the codec does
    assert fast == 4 * fine
    for codec in ("q8", "q4", "q2"):
        e = C.predict(codec, "sra", 64 * MIB, 4, 1e-4, GBIT / 10, 0.0, SPEED)
        assert e["compute"] > e["wire"]
        assert C.sra_segment_elems(codec, 64 * MIB, 4, 1e-4, GBIT / 10, SPEED) == fast
    slow = C.predict("q8", "sra", 64 * MIB, 4, 1e-4, GBIT, 0.0, SPEED)
    assert slow["wire"] > slow["compute"]


def test_link_samples_come_from_calls_that_move_a_megabyte():
    """What a measured exact call teaches the tuner about the link (cost::link_sample): nothing
    from calls whose bytes a shaper's burst or a switch's buffer could pass at once (the star's
    384 KiB through its root at 64 KiB over 4 ranks), the link's rate from one that moves
    megabytes, the host's from one the host's copies bound."""
    n, alpha, host = 4, 50e-6, GBIT / 4  # 4 Gbit/s of host copies
    # 64 KiB star over a 1 Gbit/s link that passed it in 1.2 ms (a burst: 2.6 Gbit/s): no sample.
    assert C.link_sample_dense("star", 64 << 10, n, alpha, GBIT, host, seconds=1.2e-3) is None
    # 4 MiB star at the link's rate (6 x 4 MiB through the root at 1 Gbit/s): about 1 Gbit/s.
    star = C.predict_dense("star", 4 * MIB, n, alpha, GBIT, inv_host=host)
    kind, spb = C.link_sample_dense("star", 4 * MIB, n, alpha, GBIT, host, seconds=star["total"])
    assert kind == "link" and spb == pytest.approx(GBIT, rel=0.1)
    # twice as slow: the sample says so (a slower link is learned, not hidden)
    _, slow = C.link_sample_dense("star", 4 * MIB, n, alpha, GBIT, host, seconds=2 * star["total"])
    assert slow > 1.8 * GBIT
    # a ring whose host's copies bound it (a 16 Gbit/s link on a 4 Gbit/s host) teaches the host
    ring = C.predict_dense("ring", 64 * MIB, n, alpha, GBIT / 16, inv_host=host)
    kind, spb = C.link_sample_dense("ring", 64 * MIB, n, alpha, GBIT / 16, host, seconds=ring["total"])
    assert kind == "host" and spb == pytest.approx(host, rel=0.1)
    # a call that was all latency (no time left beyond its messages) teaches nothing about bytes
    assert C.link_sample_dense("star", 4 * MIB, n, alpha=10.0, inv_bw=GBIT, inv_host=host, seconds=1.0) is None


def test_call_samples_are_judged_by_the_ways_usual_time():
    """The per-call cost c (cost::call_sample) is learned from small calls whose bytes the model
    puts at a quarter of the way's usual time at most: a call slowed by a retransmit timer or
    other work is no likelier a sample than the ordinary calls around it."""
    n, alpha, bw = 3, 100e-6, GBIT  # 64 KiB over 1 Gbit/s: ~0.5 ms of bytes through the busiest link
    model = C.predict_dense("rd", 64 << 10, n, alpha, bw)
    # ordinary calls of 1.5 ms: too much of them is bytes to say what a call costs beyond them
    assert C.call_sample_dense("rd", 64 << 10, n, alpha, bw, call=0.0, seconds=1.5e-3, typical=1.5e-3) is None
    # one of them hit a 200 ms retransmit timer: judged by its own time it would teach c ~ 200 ms
    assert C.call_sample_dense("rd", 64 << 10, n, alpha, bw, call=0.0, seconds=0.2, typical=1.5e-3) is None
    # a way whose calls usually take 8 ms: mostly per-call cost, so each call is a sample, the slow
    # one too (the median of the samples leaves it out), measured beyond the model without c
    ok = C.call_sample_dense("rd", 64 << 10, n, alpha, bw, call=1e-3, seconds=8e-3, typical=8e-3)
    assert ok == pytest.approx(8e-3 - model["total"], rel=1e-6)
    assert C.call_sample_dense("rd", 64 << 10, n, alpha, bw, call=1e-3, seconds=0.2, typical=8e-3) > 0.19
    # a call through the busiest link of 1 MiB or more teaches the link, not c
    assert C.call_sample_dense("star", 4 << 20, n, alpha, bw, call=0.0, seconds=1.0, typical=1.0) is None


def _kernels_of_busiest_rank(trace, n):
    skip = {"send", "recv", "wait", "mark", "after"}
    return max(sum(e[0] not in skip for e in trace.events(r)) for r in range(n))


@pytest.mark.parametrize("codec,algo", [("none", "ring"), ("none", "star"), ("none", "direct"), ("none", "rd"),
                                        ("none", "hd"), ("q4", "sra"), ("q4", "ring"), ("topk:0.01", "sparse")])
@pytest.mark.parametrize("n", [4, 6, 8])
def test_launches_are_the_kernels_the_schedule_runs(codec, algo, n):
    """The model's kernel count (what each pays in launches) against the busiest rank's kernels
    in a recorded call of that schedule (one segment, one block)."""
    from ringzip.bench import simulate

    count = n * (16 if codec == "none" or codec.startswith("topk") else 512)
    trace = simulate.record(n, count, codec, algo)
    if codec == "none":
        est = C.predict_dense(algo, 4 * count, n, alpha=1e-5, inv_bw=GBIT)
    else:
        est = C.predict(codec, algo, 4 * count, n, 1e-5, GBIT, 1 / 4e9, SPEED, simulate.default_feedback(codec))
    assert est["launches"] == _kernels_of_busiest_rank(trace, n)


@pytest.mark.parametrize("codec,algo,part,segments", [("none", "ring", 1 << 17, 1), ("none", "ring", 1 << 19, 2),
                                                      ("q4", "sra", 1 << 19, 1), ("q4", "sra", 1 << 20, 2)])
def test_segments_are_the_pieces_the_schedule_cuts(codec, algo, part, segments):
    """The model's pipelining segments (the dense ring's parts in pieces of 1-4 MiB, SRA's of 2^19
    elements) at a part that fits one and at one that needs two, against the recorded call: its
    kernels on the busiest rank are the model's launches, which count the segments."""
    from ringzip.bench import simulate

    n = 3
    trace = simulate.record(n, n * part, codec, algo)
    if codec == "none":
        est = C.predict_dense(algo, 4 * n * part, n, alpha=1e-5, inv_bw=GBIT)
    else:
        est = C.predict(codec, algo, 4 * n * part, n, 1e-5, GBIT, 1 / 4e9, SPEED, simulate.default_feedback(codec))
    assert est["segments"] == segments
    assert est["launches"] == _kernels_of_busiest_rank(trace, n)


def test_launch_cost_keeps_many_ranks_off_the_n_squared_reductions():
    """At 64 GPU ranks (4 us a launch) the star's and the direct exchange's 4,097 kernels cost
    16 ms: a way of n-1 reductions (the ring's, SRA's) wins a 64 KiB call that, launches unpriced,
    the star would take."""
    size, n, fast = 64 << 10, 64, 8 / 400e9
    assert C.best_dense(size, n, alpha=1e-5, inv_bw=fast, reduce=1 / 2e12) == "star"
    best = C.best_dense(size, n, alpha=1e-5, inv_bw=fast, reduce=1 / 2e12, launch=4e-6)
    assert best in ("ring", "sra")
    assert C.predict_dense(best, size, n, 1e-5, fast, launch=4e-6)["launches"] < 2 * n
    star = C.predict_dense("star", size, n, 1e-5, fast, launch=4e-6)
    assert star["launches"] == n * n + 1
    assert star["latency"] == pytest.approx(star["messages"] * 1e-5 + (n * n + 1) * 4e-6)


def test_a_long_links_delay_is_paid_per_round_not_per_message():
    """Beyond what a message costs the hosts (cost.h kMessageCost), alpha is the link's delay:
    the messages of one round pay it once, together. At a 100 ms round trip the fewest rounds
    win (the direct exchange's one for a small call, SRA's two for a large one: the ring's bytes
    without its 2(n-1) steps); on a short link nothing changes (the star's few messages)."""
    n, far = 4, 0.1  # alpha of a ring step over a 100 ms round trip
    assert C.best_dense(MIB, n, alpha=far, inv_bw=GBIT) == "direct"
    assert C.best_dense(64 * MIB, n, alpha=far, inv_bw=GBIT) == "sra"
    assert C.best_dense(256 * MIB, n, alpha=far, inv_bw=GBIT) == "sra"
    # one round trip a round: the n-1 sends of the direct exchange's round ride along
    direct = C.predict_dense("direct", 8, n, alpha=far, inv_bw=GBIT, reduce=0.0)
    assert far <= direct["latency"] < 1.05 * far
    ring = C.predict_dense("ring", 64 * MIB, n, alpha=far, inv_bw=GBIT)
    assert ring["latency"] > 2 * (n - 1) * 0.95 * far
    # short links: the hosts' part is all of alpha, as before (rounds and sends alike)
    for a in ("star", "ring", "direct", "sra"):
        near = C.predict_dense(a, 8, n, alpha=1e-4, inv_bw=GBIT)
        assert near["messages"] == pytest.approx(C.predict_dense(a, 8, n, alpha=2e-3, inv_bw=GBIT)["messages"]), a
    assert C.best_dense(8, n, alpha=1e-4, inv_bw=GBIT) == "star"


def test_sra_runs_its_reductions_behind_its_sends_on_a_long_link():
    """Compressed SRA's segments each waited a step for the one before: a one-way delay each on a
    long link. There its reductions run enough segments behind its sends that the segments' own
    time covers the delay (CompressedCall::lag): the call waits for it once per lag, not once a
    segment. On a short link, or a call of one segment, the lag stays one step."""
    far = 0.1  # alpha of a 100 ms round trip
    big = C.predict("q4", "sra", 256 * MIB, 4, far, GBIT, 1 / 4e9, SPEED)
    lag = C.sra_lag("q4", 256 * MIB, 4, far, GBIT, SPEED)
    step = max(big["wire"], big["compute"]) / big["segments"]
    assert 1 < lag < big["segments"] and (lag - 1) * step >= far / 2 > (lag - 2) * step, (lag, step)
    assert big["latency"] < 0.4 * (big["segments"] + 2) * far  # not a delay per segment
    assert C.sra_lag("q4", 256 * MIB, 4, 0.2, GBIT, SPEED) > lag  # a longer delay, more segments ahead
    assert C.sra_lag("q4", 256 * MIB, 4, 1e-4, GBIT, SPEED) == 1  # short link
    assert C.sra_lag("q4", MIB, 4, far, GBIT, SPEED) == 1  # one segment
    near = C.predict("q4", "sra", 256 * MIB, 4, 1e-4, GBIT, 1 / 4e9, SPEED)  # lag of one step: a round a segment
    assert near["messages"] > near["segments"]
    # Over ringzip's TCP transport (its window known) alpha is the one-way delay itself, not a
    # round trip: the segments ahead cover all of it.
    tcp = C.sra_lag("q4", 256 * MIB, 4, far, GBIT, SPEED, inv_window=1 / 0.3e9)
    assert (tcp - 1) * step >= far > (tcp - 2) * step and tcp > lag, (tcp, lag, step)


def test_a_connections_window_holds_a_peer_at_a_time_to_it_and_n_minus_1_peers_to_n_minus_1():
    """Over a long link TCP keeps at most its buffers' worth in flight per connection and round trip
    (Link::inv_window: round trip / bytes in flight). A rank streaming to one peer at a time (the
    ring) gets one window a round trip; SRA and the direct exchange stream to n-1 peers, n-1
    windows. So where one window carries less than the link, auto leaves the ring, and such a
    call teaches nothing about the link's rate."""
    n, far = 4, 0.05
    window = 0.1 / 5.9e6  # RTT 100 ms, 5.9 MB in flight: 0.47 Gbit/s a connection
    ring = C.predict_dense("ring", 64 * MIB, n, alpha=far, inv_bw=GBIT, inv_window=window)
    assert ring["window_bound"] and ring["wire"] == pytest.approx(ring["wire_bytes"] * window)
    sra = C.predict_dense("sra", 64 * MIB, n, alpha=far, inv_bw=GBIT, inv_window=window)
    assert not sra["window_bound"] and sra["wire"] == pytest.approx(sra["wire_bytes"] * GBIT)
    assert sra["peers"] == n - 1 and ring["peers"] == 1
    # without the window the ring's bytes cost what SRA's do
    plain = C.predict_dense("ring", 64 * MIB, n, alpha=far, inv_bw=GBIT)
    assert plain["wire"] == pytest.approx(sra["wire"]) and not plain["window_bound"]
    # a short alpha, where rounds cost little: the window alone moves auto off the ring
    assert C.best_dense(64 * MIB, n, alpha=1e-4, inv_bw=GBIT) == "ring"
    assert C.best_dense(64 * MIB, n, alpha=1e-4, inv_bw=GBIT, inv_window=window) != "ring"
    # compressed: the ring's hops one peer at a time, SRA's n-1
    q4_ring = C.predict("q4", "ring", 64 * MIB, n, far, GBIT, 1 / 4e9, SPEED, inv_window=window)
    q4_sra = C.predict("q4", "sra", 64 * MIB, n, far, GBIT, 1 / 4e9, SPEED, inv_window=window)
    assert q4_ring["window_bound"] and not q4_sra["window_bound"]
    # a window-bound call's time says how fast a window crosses, not the link: no sample
    slow = ring["total"] * 1.1
    assert C.link_sample_dense("ring", 64 * MIB, n, far, GBIT, 0.0, slow, inv_window=window) is None
    assert C.link_sample_dense("ring", 64 * MIB, n, far, GBIT, 0.0, slow) is not None
