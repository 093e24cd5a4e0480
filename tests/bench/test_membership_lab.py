"""The arithmetic of the membership and idle-link benchmarks (bench/lab/reconfigure.py,
diloco_sites.py, idle.py): what the recorded tables say is computed from the calls and commits
as documented."""
from ringzip.bench.lab import diloco_sites, idle, reconfigure


def test_first_call_over_the_steady_state():
    # Group 0 is the job's start; the steady state is the median of every rank's later halves of
    # groups 1-2; a group's first call runs from the last rank's end of configure to the last
    # rank's result.
    rank0 = [{"configure_s": 1.0, "configured_at": 10.0, "times_s": [0.5, 0.1, 0.1, 0.1]},
             {"configure_s": 0.02, "configured_at": 20.0, "times_s": [0.9, 0.2, 0.1, 0.1]},
             {"configure_s": 0.04, "configured_at": 31.0, "times_s": [0.1, 0.1, 0.1, 0.1]}]
    rank1 = [{"configure_s": 1.0, "configured_at": 10.5, "times_s": [0.4, 0.1, 0.1, 0.1]},
             {"configure_s": 0.6, "configured_at": 20.6, "times_s": [0.3, 0.2, 0.3, 0.1]},
             {"configure_s": 0.03, "configured_at": 30.0, "times_s": [1.3, 0.1, 0.1, 0.1]}]
    s = reconfigure.summarize([rank0, rank1])
    assert s["steady_ms"] == 100.0
    # group 1: from 20.6 to max(20.9, 20.9) = 0.3 s; group 2: from 31.0 to max(31.1, 31.3) = 0.3 s
    assert s["first_over_steady_median"] == 3.0 and s["first_over_steady_worst"] == 3.0
    assert s["second_over_steady_median"] == 1.5  # the slowest rank's: 0.2 and 0.1
    assert s["rank0_first_over_steady_median"] == 5.0  # (9 + 1) / 2
    assert s["configure_ms_median"] == 320.0 and s["first_group_first_over_steady"] == 5.0


def test_time_to_target_and_ranges():
    rows = [{"step": 1, "t": 110.0, "val_bpc": 4.5}, {"step": 2, "t": 130.0, "val_bpc": 3.95},
            {"step": 2, "t": 131.0, "val_bpc": 3.95}, {"step": 3, "t": 150.0, "val_bpc": 3.8}]
    assert diloco_sites.reached(rows, 4.0, 100.0) == 30.0  # the first commit at or below it
    assert diloco_sites.reached(rows, 3.5, 100.0) is None
    assert diloco_sites.parse_range("30-60") == (30.0, 60.0) and diloco_sites.parse_range("5") == (5.0, 5.0)


def test_idle_gaps_over_the_control_and_the_steady_state():
    # The slowest rank's time of every call; the steady state is the median of the later half;
    # a gap's first call is set against the control's call at the same place.
    per_rank = [{"warm": [0.9, 0.2, 0.1, 0.1], "sleeps": [60.0], "gaps": [[0.3, 0.1]]},
                {"warm": [0.5, 0.1, 0.2, 0.1], "sleeps": [60.0], "gaps": [[0.2, 0.15]]}]
    control = [{"warm": [0.9, 0.2, 0.1, 0.1], "sleeps": [0.0], "gaps": [[0.25, 0.1]]},
               {"warm": [0.5, 0.1, 0.2, 0.1], "sleeps": [0.0], "gaps": [[0.1, 0.1]]}]
    s = idle.summarize(per_rank, control)
    assert s["warm_s"] == [0.9, 0.2, 0.2, 0.1] and abs(s["steady_s"] - 0.15) < 1e-12
    g = s["gaps"]["60"]
    assert abs(g["first_over_steady"] - 2.0) < 1e-12 and abs(g["first_over_control"] - 1.2) < 1e-12
    assert abs(g["after_over_steady"][0] - 1.0) < 1e-12
