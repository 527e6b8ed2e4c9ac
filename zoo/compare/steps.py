"""What a study's table reports of each cell's training speed and memory, measured so that the order the cells run in
does not matter: the first cell of a process pays for what happens once (imports, the built-in data generated into
the cache, kernels compiled or tuned, the allocator's first growth), and on CPU the resident set a cell starts from
depends on what the cells before it freed.

:class:`StepMeter` watches the optimiser steps of one training session (:class:`~lavo_zoo.engine.trainer.Trainer`'s
``step_observer``); its first step is the warm-up and is not measured:

- step memory: the peak memory of the next step above the memory held when it starts (CUDA: tensor allocations,
  ``torch.cuda.max_memory_allocated``; CPU: the resident set, after the memory earlier work freed has been returned to
  the system, :func:`~lavo_zoo.engine.memory.release_freed_memory`);
- step time: the median wall time of the steps after that one (data loading, forward, backward and the update;
  validation and checkpoints are between steps and not counted), or that step's own where it is the only one.

A resumed cell is measured on its last session. A session of one step measures nothing (None).
"""
from __future__ import annotations

import statistics
import time
from typing import Any

WARMUP_STEPS = 1


class StepMeter:
    """``Trainer(..., step_observer=meter)``, then ``meter.result()``."""

    def __init__(self, device: Any) -> None:
        import torch

        self.device = torch.device(device)
        self._steps = 0  # steps started in this session
        self._start = 0.0
        self._peak: Any = None  # the PeakMemory of the measured step while it runs
        self._trimmed = False
        self.memory_bytes: int | None = None
        self.memory_method: str | None = None
        self.memory_step_s: float | None = None
        self.times_s: list[float] = []

    def _sync(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def step_started(self, step: int) -> None:
        from lavo_zoo.engine.memory import PeakMemory, release_freed_memory

        self._steps += 1
        if self._steps == WARMUP_STEPS + 1:  # the step whose memory is measured
            self._sync()
            self._trimmed = self.device.type == "cpu" and release_freed_memory()
            self._peak = PeakMemory(self.device).__enter__()
        self._sync()
        self._start = time.perf_counter()

    def step_ended(self, step: int) -> None:
        self._sync()
        elapsed = time.perf_counter() - self._start
        if self._peak is not None:
            self._peak.__exit__(None, None, None)
            self.memory_bytes, self.memory_method = self._peak.bytes, self._peak.method
            if self._trimmed:
                self.memory_method += " after malloc_trim"
            self._peak = None
            self.memory_step_s = elapsed
        elif self._steps > WARMUP_STEPS:
            self.times_s.append(elapsed)

    def result(self) -> dict[str, Any]:
        """``step_time_s``, ``step_memory_bytes``, ``memory_method`` and ``measured_steps`` (None where the session
        had no step after its warm-up)."""
        times = self.times_s or ([self.memory_step_s] if self.memory_step_s is not None else [])
        return {"step_time_s": statistics.median(times) if times else None, "step_memory_bytes": self.memory_bytes,
                "memory_method": self.memory_method, "measured_steps": len(times)}
