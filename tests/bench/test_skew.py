"""The skew study's statistics (ringzip.bench.lab.skew): an every-other-call pattern is told from
noise by its lag-1 autocorrelation, and even and odd calls are split as the report says."""
import random

from ringzip.bench.lab import skew


def test_an_alternating_series_has_lag1_near_minus_one():
    s = [52.0 if i % 2 else 30.0 for i in range(30)]
    assert skew.lag1(s) < -0.9
    got = skew.summary(s)
    assert got["even_ms"] == 30.0 and got["odd_ms"] == 52.0 and got["median_ms"] == 41.0


def test_noise_and_a_trend_are_not_alternation():
    rng = random.Random(0)
    noise = [40 + rng.gauss(0, 5) for _ in range(200)]
    assert abs(skew.lag1(noise)) < 0.2
    assert skew.lag1([float(i) for i in range(30)]) > 0.8
    assert skew.lag1([7.0] * 10) == 0.0
