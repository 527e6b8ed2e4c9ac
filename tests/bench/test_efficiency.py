"""The efficiency-length search (CAB's "shortest length at which it beats softmax") on synthetic cost curves: it finds
a known crossing within the tolerance with a bounded number of measurements, each length once, and reports a win at
the start, no win, a non-monotone curve, ties and failed measurements as documented."""
from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import pairwise

import pytest

from lavo_zoo.bench.efficiency import DEFAULT_STEP, beats, efficiency_search, next_length

SWEEP = [256, 1024, 4096, 16384]


class Curves:
    """measure(length) from cost functions of the length: (attention time, baseline time) and (memory, memory)."""

    def __init__(self, time, memory=None):
        self.time = time
        self.memory = memory or (lambda n: (1.0, 1.0))  # a tie: never a win
        self.calls: list[int] = []

    def __call__(self, n: int) -> dict:
        self.calls.append(n)
        (t, tb), (m, mb) = self.time(n), self.memory(n)
        return {"attention": {"time_s": t, "peak_memory_bytes": m}, "baseline": {"time_s": tb, "peak_memory_bytes": mb}}


def max_bisections(lengths: Iterable[int], tolerance: float, step: int = DEFAULT_STEP) -> int:
    """An upper bound on the lengths one criterion's bisection measures for a sweep of ``lengths``: each midpoint
    halves the bracket's log-ratio, and a bracket [lo, hi] inside the sweep's interval (L, H) is done once
    hi / lo <= 1 + max(tolerance, step / H); one more for rounding to the step grid."""
    ordered = sorted(set(lengths))
    worst = 0
    for lo, hi in pairwise(ordered):
        halvings = math.log2(math.log(hi / lo) / math.log1p(max(tolerance, step / hi)))
        worst = max(worst, math.ceil(max(0.0, halvings)) + 1)
    return worst


def linear_vs_quadratic(crossing: float):
    """Linear attention against softmax: a * n against n^2, equal at ``crossing`` (a tie there: not a win)."""
    return lambda n: (crossing * n, float(n) * n)


def assert_bounded(curves: Curves, lengths, tolerance, step=1, criteria=2):
    assert len(curves.calls) == len(set(curves.calls)), "a length was measured twice"
    assert curves.calls[:len(lengths)] == sorted(lengths)  # the sweep first
    assert len(curves.calls) <= len(lengths) + criteria * max_bisections(lengths, tolerance, step)


@pytest.mark.parametrize("crossing", [300, 1000, 1024.5, 3000, 9000, 16000])
@pytest.mark.parametrize("tolerance", [0.1, 0.01])
def test_a_monotone_crossing_is_found_within_the_tolerance(crossing, tolerance):
    curves = Curves(linear_vs_quadratic(crossing))
    found = efficiency_search(curves, SWEEP, tolerance)["time"]
    lo, hi = found["bracket"]
    assert found["bound"] == "crossing" and found["monotone"] and found["length"] == hi
    assert lo <= crossing < hi  # lo loses (a tie loses), hi wins
    assert hi - lo <= max(tolerance * lo, 1)
    assert hi <= crossing * (1 + tolerance) + 1  # the length reported is at most the tolerance above the truth
    assert found["text"] == str(hi)
    assert found["bisection"] == curves.calls[len(SWEEP):]
    assert_bounded(curves, SWEEP, tolerance)


@pytest.mark.parametrize("step", [8, 64, 1000])
def test_bisection_lengths_are_on_the_step_grid(step):
    curves = Curves(linear_vs_quadratic(2500))
    found = efficiency_search(curves, SWEEP, tolerance=0.0, step=step)["time"]
    lo, hi = found["bracket"]
    assert all(n % step == 0 for n in found["bisection"])
    assert lo <= 2500 < hi and hi - lo <= step
    assert_bounded(curves, SWEEP, 0.0, step)


def test_a_zero_tolerance_finds_the_exact_integer_crossing():
    curves = Curves(linear_vs_quadratic(777))
    found = efficiency_search(curves, SWEEP, tolerance=0.0)["time"]
    assert found["bracket"] == [777, 778] and found["length"] == 778
    assert_bounded(curves, SWEEP, 0.0)


def test_time_and_memory_cross_apart_and_share_measurements():
    curves = Curves(linear_vs_quadratic(600), memory=lambda n: (5000.0 * n, float(n) * n))
    found = efficiency_search(curves, SWEEP, 0.05)
    assert 600 < found["time"]["length"] <= 600 * 1.05 + 1
    assert 5000 < found["memory"]["length"] <= 5000 * 1.05 + 1
    assert_bounded(curves, SWEEP, 0.05)


def test_a_win_at_the_shortest_length():
    curves = Curves(lambda n: (1.0, 2.0))
    found = efficiency_search(curves, SWEEP)["time"]
    assert (found["bound"], found["length"], found["text"], found["monotone"]) == ("at_start", 256, "<= 256", True)
    assert curves.calls == SWEEP and found["bisection"] == []


def test_never_a_win_up_to_the_longest_length():
    curves = Curves(lambda n: (2.0 * n, 1.0 * n))
    found = efficiency_search(curves, SWEEP)["time"]
    assert (found["bound"], found["length"], found["text"]) == ("never", None, "> 16384")
    assert curves.calls == SWEEP


def test_ties_are_not_wins():
    curves = Curves(lambda n: (1.0, 1.0), memory=lambda n: (0, 0))  # memory: both 0 bytes, as tiny runs measure
    found = efficiency_search(curves, SWEEP)
    assert found["time"]["text"] == found["memory"]["text"] == "> 16384"
    touching = Curves(lambda n: (1.0, 1.0 if n <= 4096 else 2.0))  # equal up to 4096, then cheaper
    found = efficiency_search(touching, SWEEP, tolerance=0.0, step=1)["time"]
    assert found["bracket"] == [4096, 4097] and found["monotone"]


def test_a_non_monotone_curve_reports_the_first_crossing():
    """Cheaper only between 500 and 2000 (e.g. a kernel that switches to a slower path at long lengths)."""
    curves = Curves(lambda n: (1.0, 2.0 if 500 <= n < 2000 else 0.5))
    found = efficiency_search(curves, SWEEP, 0.1)["time"]
    assert found["bound"] == "crossing" and 500 <= found["length"] <= 550 and not found["monotone"]
    assert found["text"] == f"{found['length']} (not monotone)"
    at_start = efficiency_search(Curves(lambda n: (1.0, 2.0 if n < 2000 else 0.5)), SWEEP)["time"]
    assert at_start["text"] == "<= 256 (not monotone)"
    late = efficiency_search(Curves(lambda n: (1.0, 2.0 if n == 16384 else 0.5)), [256, 1024, 4096, 16384, 65536])
    assert late["time"]["bound"] == "crossing" and not late["time"]["monotone"]  # wins only near 16384


def test_failed_measurements():
    """The baseline failing where the attention runs is a win (out of memory: it runs where softmax does not); the
    attention failing is a loss; both failing is skipped."""
    def measure(n):
        ok = {"time_s": 1.0, "peak_memory_bytes": 10}
        return {"attention": ok if n < 65536 else {"error": "timeout"},
                "baseline": ok if n < 4096 else {"error": "OutOfMemoryError"}}
    found = efficiency_search(measure, [1024, 4096, 16384, 65536], tolerance=0.5)
    assert found["time"]["bound"] == found["memory"]["bound"] == "crossing"
    assert found["time"]["length"] <= 4096 and found["time"]["monotone"]  # 65536: both failed, skipped
    assert efficiency_search(lambda n: {"attention": {"error": "x"}, "baseline": {"error": "y"}},
                             SWEEP)["time"]["text"] == "?"
    assert beats({"attention": {"error": "x"}, "baseline": {"time_s": 1.0}}, "time") is False


def test_next_length_and_the_bound():
    assert next_length(256, 1024, 0.1) == 512  # the geometric midpoint
    assert next_length(1000, 1099, 0.1) is None  # within 10 %
    assert next_length(10, 11, 0.0) is None  # adjacent integers
    assert next_length(256, 1024, 0.1, step=100) == 500
    assert next_length(1000, 1100, 0.0, step=64) == 1024  # the only multiple of 64 inside
    assert max_bisections([256], 0.1) == 0  # one length: nothing to bisect
    assert max_bisections(SWEEP, 0.1) == 5  # ratio 4 -> within 10 % in ceil(log2(ln 4 / ln 1.1)) = 4 halvings, + 1
    with pytest.raises(ValueError):
        efficiency_search(lambda n: {}, SWEEP, tolerance=-1)
