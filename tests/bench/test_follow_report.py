"""`ringzip-bench follow`'s verdict: when the choice before the link change was left for good
(tries, run only to measure a way, do not count) and when the last choice began to hold."""
from ringzip.bench.lab.follow import _followed


def _calls(choices):
    """'n' exact by price, 'q' q4 by price, 'N' / 'Q' the same as a try."""
    name = {"n": "none", "q": "q4"}
    return [{"i": i, "choice": name[c.lower()], "tried": c.isupper()} for i, c in enumerate(choices)]


def test_left_for_good_ignores_tries():
    # 10 exact before the change at call 10; after it q4 by price from call 13, with a try of
    # exact at call 15: left for good 3 calls after the change.
    assert _followed(_calls("nnnnnnnnnn" + "nnnqqNqqqq"), 10) == ("none", 3)


def test_a_return_by_price_counts():
    # Exact chosen by price again at call 16: left for good only after it.
    assert _followed(_calls("nnnnnnnnnn" + "nqqqqqnqqq"), 10) == ("none", 7)


def test_never_left_and_nothing_to_follow():
    assert _followed(_calls("nnnnnnnnnn" + "nnnnnnnnnn"), 10) == ("none", None)
    # The choice before the change is the majority of the 10 calls before it, by price.
    assert _followed(_calls("nnqqqqqqqQ" + "qqqqqqqqqq"), 10) == ("q4", None)
    assert _followed(_calls("NNNN" + "nn"), 4) == (None, None)
