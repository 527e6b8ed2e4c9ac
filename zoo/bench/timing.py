"""How every benchmark times and measures memory: a median of timed runs after warm-up (CUDA synchronised before each
clock read), peak memory of the timed phase (:mod:`lavo_zoo.engine.memory`), and, where memory must be exact, each
measurement in fresh processes.

``python -m lavo_zoo.bench.timing MODULE:FUNCTION`` is the worker those processes run: one JSON spec on stdin, the
function's JSON record on stdout (an exception becomes ``{"error": ...}``, so a sweep goes on past an out-of-memory).
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from lavo_zoo.engine.memory import PeakMemory

MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}  # glibc: every large free returns


def time_runs(run: Callable[[], Any], warmup: int, repeats: int, device: Any, memory: bool = True
              ) -> dict[str, Any]:
    """Time ``run``: the one timing loop of every benchmark.

    Args:
        run: what is timed, called with no arguments (its result is ignored).
        warmup: calls made first, untimed.
        repeats: timed calls; CUDA is synchronised before each clock read.
        device: where ``run`` computes (``cuda`` is synchronised).
        memory: also measure the peak memory of the timed phase above its start (:class:`PeakMemory`, which on the
            CPU resets the process's peak resident size); without it the record has ``times_s`` only.

    Returns:
        ``times_s`` (one per timed call), and with ``memory`` ``peak_memory_bytes`` and ``memory_method``.
    """
    import torch

    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    for _ in range(warmup):
        run()
    sync()
    times = []
    with PeakMemory(torch.device(device)) if memory else contextlib.nullcontext() as peak:
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            sync()
            times.append(time.perf_counter() - start)
    if not memory:
        return {"times_s": times}
    return {"times_s": times, "peak_memory_bytes": peak.bytes, "memory_method": peak.method}


def median_time(record: dict[str, Any]) -> float:
    """The median of a record's ``times_s``."""
    return statistics.median(record["times_s"])


def _run_worker(target: str, spec: dict[str, Any], env: dict[str, str], timeout: float | None) -> dict[str, Any]:
    try:
        proc = subprocess.run([sys.executable, "-m", "lavo_zoo.bench.timing", target], input=json.dumps(spec),
                              capture_output=True, text=True, env=env, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:g} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines:
        return {"error": f"worker exited with {proc.returncode}: {proc.stderr.strip()[-500:]}"}
    return json.loads(lines[-1])


def run_isolated(target: str, spec: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
    """One measurement, ``target`` ("module:function" taking the spec and returning a record with ``times_s`` and
    ``peak_memory_bytes``), in two fresh processes: the times come from one with glibc's default allocator, the peak
    memory from one with :data:`MEMORY_ENV` (``spec['repeats']`` = 1). Measuring both in one process would time the
    memory setting: a mmap and page faults for every allocation over 64 KiB slowed chunked kernels (LAVO's LRA step
    2.6x, sdpa's 1.1x)."""
    timing = _run_worker(target, spec, dict(os.environ), timeout)
    if "error" in timing or "peak_memory_bytes" not in timing:
        return timing
    memory = _run_worker(target, {**spec, "repeats": 1}, {**os.environ, **MEMORY_ENV}, timeout)
    if "error" in memory:
        return memory
    return {**timing, "peak_memory_bytes": memory["peak_memory_bytes"], "memory_method": memory["memory_method"]}


def run_fresh(target: str, spec: dict[str, Any], timeout: float | None = None, env: dict[str, str] | None = None
              ) -> dict[str, Any]:
    """One measurement in one fresh process (so that its resident-memory peak is its own), with this process's
    environment or ``env``.

    Args:
        target: the measurement's function, ``"module:function"``.
        spec: its arguments (JSON-able).
        timeout: seconds before the process is stopped, or None (no limit).
        env: the process's environment, or None (this one's).
    """
    return _run_worker(target, spec, dict(os.environ) if env is None else env, timeout)


def _worker(target: str) -> None:
    module, _, name = target.partition(":")
    spec = json.loads(sys.stdin.read())
    try:
        result = getattr(importlib.import_module(module), name)(spec)
    except Exception as e:  # noqa: BLE001 - reported in the record (e.g. out of memory), the sweep goes on
        result = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(result))


def parse_ints(text: str, option: str) -> list[int]:
    """``"1024,4096"`` -> [1024, 4096]; anything else is a usage error naming ``option``."""
    from lavo_zoo.errors import UsageError

    try:
        values = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise UsageError(f"{option} must be comma-separated positive integers, got '{text}'")
    return values


def write_json(path: Any, data: Any) -> None:
    """A benchmark's JSON (with its machine record inside ``data``) at ``path``, the place :func:`writes_records`
    gave the command for it."""
    from lavo_zoo.atomic import put_file

    put_file(path, json.dumps(data, indent=2) + "\n")


def writes_records(command: Callable[..., None]) -> Callable[..., None]:
    """A benchmark command's files (``--json``: its record, ``--plot``: a PNG) through the output policy
    (:mod:`lavo_zoo.outputs`): claimed before any measurement (a file that is not an earlier benchmark's record of
    that kind is refused, even an existing one; so is a second command writing it at once), written by ``command``
    where the claim says (``json_file`` and ``plot_file`` are replaced by those places) and put in place, then
    named, once it succeeds. A benchmark's JSON is its record of its last run: an earlier one is replaced without
    ``--overwrite``."""
    import functools

    import click

    from lavo_zoo.outputs import BENCH_RECORD, PNG, Outputs

    @functools.wraps(command)
    def run(**kwargs: Any) -> None:
        with Outputs(f"bench {command.__name__.removesuffix('_cmd')}") as outputs:
            for name, kind, option in (("json_file", BENCH_RECORD, "--json"), ("plot_file", PNG, "--plot")):
                if kwargs.get(name) is not None:
                    kwargs[name] = outputs.file(kwargs[name], kind, option, replace=True)
            command(**kwargs)
        for path in outputs.written:
            click.echo(f"wrote {path}")

    return run


if __name__ == "__main__":
    _worker(sys.argv[1])
