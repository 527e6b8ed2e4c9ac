"""Efficiency lengths, as CAB (the Comprehensive Attention Benchmark) reports them: for an efficient attention, the
shortest sequence length at which it beats softmax attention (``sdpa``) in time, and the shortest at which it beats
it in peak memory.

The search is a pure function of a ``measure(length) -> {"attention": record, "baseline": record}`` callable (records
as ``lavo-zoo bench attention`` makes them: ``time_s`` and ``peak_memory_bytes``, or ``error``), so it is tested on
synthetic cost curves without timing anything:

1. every length of the sweep is measured;
2. per criterion, the first adjacent pair of known lengths where the attention goes from losing to winning brackets
   the crossing; the bracket is bisected (geometric midpoint: costs and sweeps are power laws, so the interval
   shrinks evenly on a log scale) until ``hi - lo <= max(tolerance * lo, step)``, and ``hi`` is reported: the
   shortest measured length at which it wins, at most ``tolerance`` (relative) above the true crossing when the
   costs cross once there. Lengths are integers on the ``step`` grid (multiples of ``step``);
3. every length measured for one criterion also counts for the other (a bisection for time may narrow the memory
   bracket for free); each length is measured once.

To win is to be strictly cheaper: a tie is a loss. A length where the attention failed (out of memory, a timeout)
and the baseline ran is a loss, the other way round a win (it runs where softmax does not); where both failed it is
unknown and skipped. Outcomes, each with ``length``, ``bound``, ``text``, ``monotone`` (no loss above the reported
length among the measured ones) and ``bisection`` (the lengths measured for this criterion):

- ``crossing``: it wins from ``length`` on, and lost at ``bracket[0]``;
- ``at_start``: it already wins at the shortest length measured (``"<= L_min"``);
- ``never``: it does not win up to the longest length measured (``"> L_max"``; ``length`` is None);
- ``unknown``: no length had a result for both.

A non-monotone curve (it loses again at a longer length) is reported at its first crossing, ``monotone`` false.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

BASELINE = "sdpa"
CRITERIA = {"time": "time_s", "memory": "peak_memory_bytes"}  # criterion -> the record field compared
DEFAULT_TOLERANCE = 0.1
DEFAULT_STEP = 1


def beats(pair: dict[str, Any], criterion: str) -> bool | None:
    """Whether ``pair["attention"]`` is strictly cheaper than ``pair["baseline"]`` in ``criterion`` (None: neither
    has a result)."""
    key = CRITERIA[criterion]
    mine, base = (pair[side] for side in ("attention", "baseline"))
    mine_ok = "error" not in mine and mine.get(key) is not None
    base_ok = "error" not in base and base.get(key) is not None
    if mine_ok and base_ok:
        return mine[key] < base[key]
    if mine_ok != base_ok:
        return mine_ok
    return None


def next_length(lo: int, hi: int, tolerance: float, step: int = DEFAULT_STEP) -> int | None:
    """The length to measure inside the bracket (lo loses, hi wins): the multiple of ``step`` nearest to the
    geometric midpoint, strictly between them; None once ``hi - lo <= max(tolerance * lo, step)``.

    Args:
        lo: the bracket's lower end (the length that loses).
        hi: the bracket's upper end (the length that wins).
        tolerance: the bracket's width, as a fraction of ``lo``, below which the search stops.
        step: lengths are multiples of ``step``.
    """
    if hi - lo <= max(tolerance * lo, step):
        return None
    mid = math.sqrt(lo * hi) / step
    inside = [m * step for m in (math.floor(mid), math.ceil(mid)) if lo < m * step < hi]
    return min(inside, key=lambda n: abs(n - mid * step)) if inside else None


def _text(result: dict[str, Any]) -> str:
    bound, length = result["bound"], result["length"]
    text = {"crossing": f"{length}", "at_start": f"<= {length}", "never": f"> {result.get('longest')}",
            "unknown": "?"}[bound]
    return text if result["monotone"] else f"{text} (not monotone)"


def _search_one(criterion: str, at: Callable[[int], dict[str, Any]], known: dict[int, dict[str, Any]],
                tolerance: float, step: int) -> dict[str, Any]:
    measured: list[int] = []
    note = None
    while True:
        points = [(n, w) for n in sorted(known) if (w := beats(known[n], criterion)) is not None]
        if not points:
            result: dict[str, Any] = {"length": None, "bound": "unknown"}
            break
        if points[0][1]:
            result = {"length": points[0][0], "bound": "at_start"}
            break
        first = next((i for i in range(len(points) - 1) if not points[i][1] and points[i + 1][1]), None)
        if first is None:
            result = {"length": None, "bound": "never", "longest": points[-1][0]}
            break
        lo, hi = points[first][0], points[first + 1][0]
        mid = next_length(lo, hi, tolerance, step)
        if mid is not None and mid in known:  # measured already, no result for both: cannot narrow further
            note, mid = f"no result at {mid}: bisection stopped", None
        if mid is None:
            result = {"length": hi, "bound": "crossing", "bracket": [lo, hi]}
            break
        at(mid)
        measured.append(mid)
    wins_after = [w for n, w in points if result["length"] is not None and n > result["length"]]
    result["monotone"] = all(wins_after)
    result["bisection"] = measured
    if note:
        result["note"] = note
    result["text"] = _text(result)
    return result


def efficiency_search(measure: Callable[[int], dict[str, Any]], lengths: Iterable[int],
                      tolerance: float = DEFAULT_TOLERANCE, step: int = DEFAULT_STEP,
                      criteria: Iterable[str] = tuple(CRITERIA)) -> dict[str, dict[str, Any]]:
    """The efficiency length of each criterion (``{"time": {...}, "memory": {...}}``, as the module describes),
    measuring every length of ``lengths`` and then the bisection points, each length once.

    Args:
        measure: one length's records, ``{"attention": ..., "baseline": ...}`` (:mod:`lavo_zoo.bench.attention`).
        lengths: the lengths measured first (the bisection brackets come from them).
        tolerance: stop when the bracket is within this fraction of its lower end (>= 0).
        step: lengths measured are multiples of ``step`` (>= 1).
        criteria: the criteria to search (``time``, ``memory``).

    Raises:
        ValueError: a negative ``tolerance`` or a ``step`` below 1.
    """
    if not tolerance >= 0 or step < 1:
        raise ValueError(f"tolerance must be >= 0 and step >= 1, got {tolerance} and {step}")
    known: dict[int, dict[str, Any]] = {}

    def at(length: int) -> dict[str, Any]:
        if length not in known:
            known[length] = measure(length)
        return known[length]

    for length in sorted(set(lengths)):
        at(length)
    return {c: _search_one(c, at, known, tolerance, step) for c in criteria}
