"""Counting what a step dispatches: :func:`counting` gives the PyTorch operations (a ``TorchDispatchMode``: views,
casts and autograd's own operations included) and the Triton kernel launches of the code run under it, a launch
counting once and nothing inside it (Triton's CPU interpreter dispatches torch operations of its own). ``lavo-zoo
bench ops`` reports the counts per path, the device profile (benchmarks/gpu/profile_lavo.py) beside its timings, and
the tests pin them.
"""
from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode


class OperationCounter(TorchDispatchMode):
    """The operations torch dispatches while active, by name (``ops``), and the kernels launched (``launches``,
    when entered through :func:`counting`)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.launches: list[str] = []
        self._inside = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self._inside:
            self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        """Operations dispatched (launches not included)."""
        return sum(self.ops.values())

    @contextlib.contextmanager
    def launch(self, name: str) -> Iterator[None]:
        """One kernel launch: counted once, nothing inside it counted."""
        self.launches.append(name)
        self._inside += 1
        try:
            yield
        finally:
            self._inside -= 1


@contextlib.contextmanager
def _launches(counter: OperationCounter) -> Iterator[None]:
    """Every Triton launch of the project (each goes through ``triton_utils.compiling``) counted once in
    ``counter``; nothing to do where Triton is not installed."""
    try:
        from lavo_zoo.attention.ops import triton_utils
    except ImportError:
        yield
        return
    original = triton_utils.compiling

    @contextlib.contextmanager
    def counted(name: str, **kwargs: Any) -> Iterator[None]:
        with counter.launch(name), original(name, **kwargs):
            yield

    triton_utils.compiling = counted
    try:
        yield
    finally:
        triton_utils.compiling = original


@contextlib.contextmanager
def counting() -> Iterator[OperationCounter]:
    """``with counting() as c: step()``: the operations (``c.ops``, ``c.total``) and kernel launches
    (``c.launches``) of ``step``."""
    counter = OperationCounter()
    with _launches(counter), counter:
        yield counter
