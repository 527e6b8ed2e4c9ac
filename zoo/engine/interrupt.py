"""Stop a training run cleanly on SIGINT (Ctrl-C) or SIGTERM (a scheduler's kill): the signal is noted, the current
optimiser step finishes, a resumable checkpoint is saved, and the run exits with the signal's conventional code
(130 / 143) and a message naming the ``--resume auto`` command. A second signal stops at once, as usual."""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from lavo_zoo.errors import ZooError

SIGNALS = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}


class TrainingInterrupted(ZooError):
    """A run stopped by a signal after saving a resumable checkpoint (exit 128 + the signal's number)."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


class Interrupts:
    """The first SIGINT / SIGTERM received while installed (``requested``: its number, or None)."""

    def __init__(self) -> None:
        self.requested: int | None = None

    @property
    def name(self) -> str:
        """The name of the signal that asked to stop (``SIGINT``, ``SIGTERM``)."""
        return SIGNALS.get(self.requested, str(self.requested))

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested is not None:  # a second signal: stop now, without the checkpoint
            raise KeyboardInterrupt
        self.requested = signum


@contextmanager
def deferred_interrupts(enabled: bool = True) -> Iterator[Interrupts]:
    """Within the block, SIGINT and SIGTERM set ``Interrupts.requested`` instead of stopping the process; the
    previous handlers come back on exit. Off (nothing installed) outside the main thread or when not ``enabled``
    (e.g. a distributed run, whose ranks would have to agree on the step to stop at)."""
    interrupts = Interrupts()
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    previous = {s: signal.signal(s, interrupts._handle) for s in SIGNALS}
    try:
        yield interrupts
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
