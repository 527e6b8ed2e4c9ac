"""The valid values of every inference option, checked once for the command and the Python predictor.

Each option that a recipe command and its predictor share (``--beam`` and ``Summarizer.summarize(beam=...)``) is one
:class:`Limit` here: its name, its kind (integer or finite number) and its range. The predictor calls
:meth:`Limit.check` on every value it is given, which raises :class:`~lavo_zoo.errors.InputError` (a usage error,
exit 2 on the command line) naming the option and its range; the command declares the option with
``type=LIMIT.click_type()``, whose conversion is the same check, so click prints the same message as a usage error
before any model is loaded. Sizes that multiply memory (beam, batch, lengths, frames) are bounded here, and a
request inside the bounds that still cannot fit on the device is refused by the predictor before it starts
(:func:`lavo_zoo.engine.memory.check_fits`).

Torch-free, so that ``lavo-zoo --help`` stays fast.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import click

from lavo_zoo.errors import InputError


@dataclass(frozen=True)
class Limit:
    """One option's valid values: an integer (``kind=int``; bool is refused) or a finite number (``kind=float``) in
    [``low``, ``high``] (None: unbounded; ``low_open`` / ``high_open`` exclude the bound)."""

    name: str  # the Python keyword; the command's option is --name-with-dashes
    kind: type = int
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    @property
    def option(self) -> str:
        """The command line's spelling, e.g. ``--max-new-tokens``."""
        return "--" + self.name.replace("_", "-")

    def describe(self, high: float | None = None) -> str:
        """The valid values in words, e.g. "an integer from 1 to 64" (``high``: a tighter upper bound)."""
        high = self.high if high is None else high
        what = "an integer" if self.kind is int else "a finite number"
        low_s, high_s = _number(self.low), _number(high)
        if self.low is not None and high is not None and not (self.low_open or self.high_open):
            return f"{what} from {low_s} to {high_s}"
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {low_s}")
        if high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {high_s}")
        return what + (" " + " and ".join(parts) if parts else "")

    def problem(self, value: Any, high: float | None = None) -> str | None:
        """Why ``value`` is not valid (None when it is): the one check behind :meth:`check` and the click type."""
        bound = self.high if high is None else high
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return f"must be {self.describe(bound)}, got {type(value).__name__} {value!r}"
        if self.kind is int and not isinstance(value, numbers.Integral):
            return f"must be {self.describe(bound)}, got {value!r}"
        if not math.isfinite(value):
            return f"must be {self.describe(bound)}, got {value!r}"
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = bound is not None and (value >= bound if self.high_open else value > bound)
        if too_low or too_high:
            return f"must be {self.describe(bound)}, got {value!r}"
        return None

    def check(self, value: Any, high: float | None = None, why: str = "") -> Any:
        """``value`` (as int or float) if it is valid, else :class:`InputError` naming the option and its range.

        Args:
            value: what the caller gave.
            high: a tighter upper bound than the option's own (e.g. the model's longest output).
            why: what sets ``high``, said in the message.
        """
        problem = self.problem(value, high)
        if problem is not None:
            raise InputError(f"{self.name} {problem}" + (f" ({why})" if why and high is not None else ""))
        return int(value) if self.kind is int else float(value)

    def check_optional(self, value: Any, high: float | None = None, why: str = "") -> Any:
        """:meth:`check`, with None (the default) passed through."""
        return None if value is None else self.check(value, high, why)

    def click_type(self) -> click.ParamType:
        """The click type of the command's option: the same check, as a usage error naming the option."""
        return _LimitType(self)


class _LimitType(click.ParamType):
    """A click parameter type that converts the text and runs :meth:`Limit.problem` on it."""

    def __init__(self, limit: Limit) -> None:
        self.limit = limit
        self.name = "integer" if limit.kind is int else "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            try:
                value = int(value, 10) if self.limit.kind is int else float(value)
            except ValueError:
                self.fail(f"must be {self.limit.describe()}, got {value!r}", param, ctx)
        problem = self.limit.problem(value)
        if problem is not None:
            self.fail(problem, param, ctx)
        return value

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "INTEGER" if self.limit.kind is int else "FLOAT"

    def __repr__(self) -> str:
        return f"Limit({self.limit.describe()})"


def _number(value: float | None) -> str:
    if value is None:
        return ""
    if float(value).is_integer() and abs(value) >= 10_000:
        return f"{int(value):,}"
    return f"{value:g}" if isinstance(value, float) else str(value)


# ------------------------------------------------------------------------------------------------- the options
# generation (lm)
MAX_NEW_TOKENS = Limit("max_new_tokens", int, 1, 1_000_000)
TEMPERATURE = Limit("temperature", float, 0, 100)
TOP_K = Limit("top_k", int, 0)
TOP_P = Limit("top_p", float, 0, 1, low_open=True)
SEED = Limit("seed", int, 0, 2**32 - 1)
# summaries
BEAM = Limit("beam", int, 1, 128)
MAX_LENGTH = Limit("max_length", int, 1, 100_000)  # and at most the model's max_target_positions
# speech
MAX_FRAMES = Limit("max_frames", int, 1, 1_000_000)
STOP_THRESHOLD = Limit("stop_threshold", float, 0, 1)
# how many inputs run through the model at once
BATCH_SIZE = Limit("batch_size", int, 1, 4096)
# forecast-plot
WINDOWS = Limit("windows", int, 1, 100)
