"""A trained model ready for new inputs: what :func:`lavo_zoo.load` returns. Each recipe's ``infer.py`` subclasses
:class:`Predictor` with its domain's calls (``generate``, ``forecast``, ``synthesize``, ``summarize``,
``complete``, ``classify``), and the recipe names the class (``Recipe.predictor``). A predictor needs only the
checkpoint: the model is rebuilt from the checkpoint's own config, and every size and statistic it needs was stored
there when the model was trained.

Every predictor holds to the same rules, with the helpers here: it takes one input or a list of them, as its
docstring says, and refuses anything else (:func:`as_batch`: a bare string where a list of strings is taken, a tuple,
an array or a tensor walked element by element would be a wrong answer); it checks every option with the one check
the command uses too (:mod:`lavo_zoo.limits`); it refuses a request whose estimated memory cannot fit before it
starts (its ``memory_estimate(<the request's sizes>)``, in bytes, given to :meth:`Predictor.check_fits`); and it
never returns a non-finite output (:meth:`Predictor.check_finite`).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from lavo_zoo.errors import InputError


def describe(value: Any) -> str:
    """A short description of a value's type (and shape) for messages: "str 'a gre...'", "ndarray [2, 3]"."""
    name = type(value).__name__
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return f"{name} of shape {list(value.shape)}"
    if isinstance(value, (str, bytes)):
        return f"{name} {value[:20]!r}" + ("..." if len(value) > 20 else "")
    if isinstance(value, (list, tuple)):
        return f"{name} of {len(value)}"
    return name


def as_batch(inputs: Any, is_item: Callable[[Any], bool], argument: str, item: str,
             is_element: Callable[[Any], bool] | None = None, element: str | None = None) -> tuple[list[Any], bool]:
    """The inputs of a predictor call that takes one item or a list of them.

    Args:
        inputs: what the caller gave.
        is_item: whether a value is one item.
        argument: the argument's name, for messages.
        item: one item in words, e.g. "a text (str)".
        is_element: where an element of a list may take more forms than a single item (a document as a list of
            articles), whether a value is one element (default: ``is_item``).
        element: one element in words (default: ``item``).

    Returns:
        (the items as a list, whether one item was given rather than a list).

    Raises:
        InputError: ``inputs`` is neither one item nor a list of items (a tuple, an array, a tensor, a string where
            items are lists...): the message names the argument, what it takes and what it got.
    """
    if is_item(inputs):
        return [inputs], True
    if not isinstance(inputs, list):
        raise InputError(f"{argument} must be {item} or a list of them, got {describe(inputs)}"
                         + ("; give a list" if isinstance(inputs, (tuple, np.ndarray, torch.Tensor)) else ""))
    for i, value in enumerate(inputs):
        if not (is_element or is_item)(value):
            raise InputError(f"{argument}[{i}] must be {element or item}, got {describe(value)}")
    return inputs, False


def is_int(value: Any) -> bool:
    """An integer (a Python or numpy integer; not a bool, not a float such as 2.0 or NaN)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_flat_sequence(value: Any) -> bool:
    """One sequence of scalars (token ids, positions): a list none of whose elements is a list, an array or a tensor,
    or a 1-D numpy array or tensor. What its elements are is checked by :func:`int_values`."""
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return value.ndim == 1
    return isinstance(value, list) and not any(isinstance(v, (list, tuple, np.ndarray, torch.Tensor)) for v in value)


def int_values(sequence: Any, argument: str, what: str) -> list[int]:
    """The elements of one sequence (:func:`is_flat_sequence`) as Python ints.

    Args:
        sequence: a list of scalars or a 1-D array / tensor.
        argument: how the caller named the sequence, for messages ("tokens", "queries[2]").
        what: one element in words ("a token id").

    Raises:
        InputError: an element is not an integer (a float such as 2.5 or NaN, a bool, a string, None), naming
            ``argument[i]`` and what it holds.
    """
    values = sequence.tolist() if isinstance(sequence, (np.ndarray, torch.Tensor)) else sequence
    for i, value in enumerate(values):
        if not is_int(value):
            raise InputError(f"{argument}[{i}] must be {what} (an int), got {describe(value)}"
                             + (f" {value!r}" if isinstance(value, (float, bool)) else ""))
    return [int(v) for v in values]


class Predictor:
    """A trained model with its recipe and config; subclasses add the domain's calls."""

    def __init__(self, recipe: Any, cfg: Any, model: nn.Module, device: torch.device | str = "cpu",
                 checkpoint: str | None = None) -> None:
        """Built by :func:`lavo_zoo.load` (users call that, not this).

        Args:
            recipe: the checkpoint's recipe (a :class:`~lavo_zoo.engine.recipe.Recipe`).
            cfg: the checkpoint's resolved config.
            model: the model with the checkpoint's weights (put in eval mode).
            device: where the model is.
            checkpoint: the reference it was loaded from (for messages and ``repr``).
        """
        self.recipe, self.cfg, self.model = recipe, cfg, model.eval()
        self.device = torch.device(device)
        self.checkpoint = checkpoint

    def to(self, device: torch.device | str) -> Predictor:
        """Move the model to ``device`` (cpu, cuda, cuda:N); returns the predictor itself.

        Raises:
            UsageError: ``device`` is not cpu, cuda or cuda:N, or names a GPU this machine does not have.
        """
        from lavo_zoo.engine.env import pick_device

        self.device = pick_device(device, "device")
        self.model.to(self.device)
        return self

    def check_fits(self, need: float, request: str, fix: str) -> None:
        """Refuse, before it starts, a request whose estimated memory ``need`` (bytes) the predictor's device cannot
        hold (an :class:`~lavo_zoo.errors.InputError` saying ``request`` and how to ``fix`` it)."""
        from lavo_zoo.engine.memory import check_fits

        check_fits(need, self.device, request, fix)

    FAR = 10.0  # inputs more than this many training spreads from the training centre are far outside its range

    def warn_far_outside(self, values: np.ndarray, center: Any, spread: Any, what: str, ranges: Sequence[str],
                         names: Sequence[str] | None = None) -> bool:
        """Warn (a logging warning, which the command line prints) when ``values`` lie far outside the range the
        model was trained on: more than :attr:`FAR` spreads from its centre (a 1e6-scaled series, a scan not
        normalised as the training clouds). The model still runs: its output there is an extrapolation, and where it
        is not finite :meth:`check_finite` refuses it with the same range.

        Args:
            values: the input [..., C] (C columns; C = 1 for one centre and spread over every value).
            center: the training data's centre, per column [C] or one for all.
            spread: the training data's spread, per column [C] or one for all.
            what: the input, for the message (``the table``, ``cloud 2``).
            ranges: the training range of each column in words (``about 16.1 +- 8.2``), or one for all.
            names: the columns' names, where they have some.

        Returns:
            Whether it warned.
        """
        values = np.asarray(values, dtype=np.float64)
        center, spread = np.asarray(center, dtype=np.float64), np.asarray(spread, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            far = np.abs(values - center) / np.where(spread > 0, spread, 1.0)  # [..., C]
        far = far.reshape(-1, far.shape[-1] if far.ndim else 1)
        worst = far.max(0)  # [C]
        if not (worst > self.FAR).any():
            return False
        column = int(worst.argmax())
        reach = values.reshape(far.shape)[int(far[:, column].argmax()), column]
        where = f"{what}, column '{names[column]}'," if names else what
        logging.getLogger(type(self).__module__).warning(
            "%s reaches %.4g, far outside the range the model was trained on (%s): its output there is an "
            "extrapolation; scale the input as the training data was", where, reach,
            ranges[column if len(ranges) > 1 else 0])
        return True

    @staticmethod
    def check_finite(output: np.ndarray | torch.Tensor, what: str) -> None:
        """Refuse an output that holds NaN or infinite values.

        Args:
            output: what the model produced (any shape).
            what: the input it was produced for and why it can go wrong, for the message.

        Raises:
            InputError: ``output`` is not finite (the input is far outside what the model was trained on).
        """
        finite = torch.isfinite(output).all() if isinstance(output, torch.Tensor) else np.isfinite(output).all()
        if not bool(finite):
            raise InputError(f"the model's output for {what} is not finite (NaN or infinite values); nothing was "
                             "returned")

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(recipe={self.recipe.name!r}, checkpoint={self.checkpoint!r}, "
                f"device={str(self.device)!r})")
