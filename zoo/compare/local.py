"""``compare --launcher local --jobs N``: N cells at once on this machine, each in a process of its own
(:func:`lavo_zoo.compare.jobs.main` on ``CELL_DIR/job.json``, its output in ``CELL_DIR/cell.log``).

Each of the N slots gets its share of the machine: on CUDA its own GPU (``--cells-per-gpu K``: K slots per GPU), set
with ``CUDA_VISIBLE_DEVICES``; and in every case its own CPU cores (the cores this process may use, divided among the
slots; the cell's process is pinned to them and runs as many torch threads, ``OMP_NUM_THREADS`` set to match). A cell
that fails is reported with its log's last lines once the others are done; Ctrl-C or SIGTERM stops the running cells
the way it stops ``train`` (each saves its step and exits), and the same command continues them. Efficiency lengths
are measured after the cells, in this process, while none trains.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import click

from lavo_zoo.atomic import write_file
from lavo_zoo.compare.efficiency import EfficiencyPlan
from lavo_zoo.compare.jobs import JOB_FILE, LOG_FILE, CellJob
from lavo_zoo.compare.outcomes import (
    CellFailure,
    Progress,
    StudyResult,
    count,
    in_study_order,
    kept_record,
    log_tail,
    measure_after,
)
from lavo_zoo.engine.records import CellRecord
from lavo_zoo.errors import UsageError, ZooError

CORES_PER_CPU_CELL = 4  # --jobs on the CPU defaults to one cell per this many cores
# a cell's process: lavo_zoo.compare.jobs.main (not `-m lavo_zoo.compare.jobs`, which runpy warns about at the top of
# every cell.log, the package having imported the module before running it)
CELL_PROCESS = "import sys; from lavo_zoo.compare.jobs import main; sys.exit(main(sys.argv[1:]))"
POLL_S = 0.2


@dataclass(frozen=True)
class Slot:
    """Where one of the cells that run at once runs: its CPU cores and, on CUDA, its GPU (an entry of
    ``CUDA_VISIBLE_DEVICES``)."""

    cores: tuple[int, ...]
    gpu: str | None = None

    def describe(self) -> str:
        cores = f"core {self.cores[0]}" if len(self.cores) == 1 else f"cores {_ranges(self.cores)}"
        return (f"GPU {self.gpu}, " if self.gpu is not None else "") + cores


def _ranges(values: tuple[int, ...]) -> str:
    """``(0, 1, 2, 5)`` -> ``0-2,5``."""
    out: list[str] = []
    for v in values:
        if out and "-" not in out[-1].rsplit(",", 1)[-1] and int(out[-1]) == v - 1:
            out[-1] = f"{out[-1]}-{v}"
        elif out and "-" in out[-1] and int(out[-1].rsplit("-", 1)[1]) == v - 1:
            out[-1] = f"{out[-1].rsplit('-', 1)[0]}-{v}"
        else:
            out.append(str(v))
    return ",".join(out)


def available_cores() -> list[int]:
    """The CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))  # pragma: no cover - macOS, Windows


def visible_gpus(device: str | None) -> list[str]:
    """The GPUs the cells may use, as ``CUDA_VISIBLE_DEVICES`` entries for their processes (empty: the cells run on
    the CPU): every GPU this process sees for ``cuda`` (or no ``--device`` on a machine with one), only GPU N for
    ``cuda:N``."""
    from lavo_zoo.engine.env import pick_device

    chosen = pick_device(device)
    if chosen.type != "cuda":
        return []
    import torch

    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [x.strip() for x in listed.split(",") if x.strip()] if listed else []
    ids = ids[:torch.cuda.device_count()] or [str(i) for i in range(torch.cuda.device_count())]
    return [ids[chosen.index]] if chosen.index is not None else ids


def plan_slots(jobs: int | None, cells_per_gpu: int, gpus: list[str], cores: list[int], cells: int) -> list[Slot]:
    """The slots of ``min(jobs, cells)`` cells at once: on CUDA (``gpus``) ``cells_per_gpu`` slots per GPU, by
    default as many as the GPUs hold; on the CPU one per :data:`CORES_PER_CPU_CELL` cores by default. The cores are
    divided among the slots (a core each at least; more slots than cores share them round robin).

    Args:
        jobs: cells at once (``--jobs``), or None (the default above).
        cells_per_gpu: slots per GPU (``--cells-per-gpu``; 1 on the CPU).
        gpus: the visible GPUs' names (empty: the cells run on the CPU).
        cores: the cores this process may use.
        cells: the cells to train (no more slots than that).

    Raises:
        UsageError: more cells at once than the GPUs hold, or ``cells_per_gpu`` for cells on the CPU.
    """
    if gpus:
        capacity = len(gpus) * cells_per_gpu
        if jobs is not None and jobs > capacity:
            raise UsageError(f"--jobs {jobs}: each cell runs on a GPU of its own ({cells_per_gpu} per GPU with "
                             f"--cells-per-gpu {cells_per_gpu}), and {len(gpus)} GPU(s) are visible "
                             f"({', '.join(gpus)}): give --jobs {capacity} or less, or --cells-per-gpu "
                             f"{-(-jobs // len(gpus))} to share the GPUs")
        n = jobs or capacity
    else:
        if cells_per_gpu != 1:
            raise UsageError(f"--cells-per-gpu {cells_per_gpu}: the cells run on the CPU (no GPU is used), so "
                             "there is no GPU to share; divide the cores with --jobs N instead")
        n = jobs or max(1, len(cores) // CORES_PER_CPU_CELL)
    n = max(1, min(n, cells))
    per = max(1, len(cores) // n)
    return [Slot(tuple(cores[(i * per + j) % len(cores)] for j in range(per)),
                 gpus[i // cells_per_gpu] if gpus else None) for i in range(n)]


def shares_cores(slots: list[Slot]) -> bool:
    """Whether some of the slots run on the same cores (more cells at once than cores)."""
    return len({c for slot in slots for c in slot.cores}) < sum(len(slot.cores) for slot in slots)


class _Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class LocalLauncher:
    """``--launcher local``: see the module docstring."""

    def __init__(self, jobs: int | None, cells_per_gpu: int = 1, device: str | None = None) -> None:
        self.jobs, self.cells_per_gpu, self.device = jobs, cells_per_gpu, device

    def _start(self, job: CellJob, slot: Slot, slots: list[Slot]) -> subprocess.Popen:
        cell_dir = Path(job.cell_dir)
        cell_dir.mkdir(parents=True, exist_ok=True)
        job.cores, job.threads = list(slot.cores), len(slot.cores)
        if slot.gpu is not None:
            job.device = "cuda"  # the one GPU its process sees
        job.launch = {"launcher": "local", "cells_at_once": len(slots), "threads": job.threads,
                      **({"cores_shared": True} if shares_cores(slots) else {}),
                      **({"gpu": slot.gpu} if slot.gpu is not None else {})}
        spec = write_file(cell_dir / JOB_FILE, json.dumps(job.to_json(), indent=2) + "\n", overwrite=True,
                          option="the cell's job")
        env = {**os.environ, "OMP_NUM_THREADS": str(job.threads), "MKL_NUM_THREADS": str(job.threads)}
        if slot.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = slot.gpu
        with open(cell_dir / LOG_FILE, "ab") as log:
            # a session of its own: a Ctrl-C in the terminal reaches this process only, which passes one signal on
            # (a second one would stop the cell at once, without saving its step)
            return subprocess.Popen([sys.executable, "-c", CELL_PROCESS, str(spec)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)

    def _slots(self, cells: int) -> list[Slot]:
        return plan_slots(self.jobs, self.cells_per_gpu, visible_gpus(self.device), available_cores(), cells)

    def plan(self, cells: int) -> str:
        slots = self._slots(cells)
        return f"local: {len(slots)} cell(s) at once: " + "; ".join(s.describe() for s in slots)

    def run(self, jobs: list[CellJob], out_dir: Path, progress: Progress | None = None,
            efficiency: EfficiencyPlan | None = None) -> StudyResult:
        """Train the cells in parallel slots; its arguments are stated on
        `lavo_zoo.compare.launchers.Launcher.run`."""
        found: dict[str, CellRecord] = {}
        todo = []
        for i, job in enumerate(jobs, 1):
            record = kept_record(job, count(len(jobs), i))
            if record is not None:
                found[job.name] = record
            else:
                todo.append(job)
        if not todo:
            return measure_after(StudyResult(in_study_order(jobs, found)), out_dir, efficiency)
        slots = self._slots(len(todo))
        click.echo(f"{len(todo)} cell(s) to train, {len(slots)} at once: "
                   + "; ".join(s.describe() for s in slots), err=True)
        failures: list[CellFailure] = []
        free, running = list(slots), {}
        main = threading.current_thread() is threading.main_thread()  # signal handlers live in the main thread
        previous = {s: signal.signal(s, self._stop) for s in (signal.SIGTERM,)} if main else {}
        try:
            while todo or running:
                while todo and free:
                    job, slot = todo.pop(0), free.pop(0)
                    running[self._start(job, slot, slots)] = (job, slot)
                    click.echo(f"{count(len(jobs), len(found) + len(failures) + len(running))} {job.name}: "
                               f"training on {slot.describe()}; log in {Path(job.cell_dir) / LOG_FILE}", err=True)
                time.sleep(POLL_S)
                for proc, (job, slot) in list(running.items()):
                    code = proc.poll()
                    if code is None:
                        continue
                    del running[proc]
                    free = sorted([*free, slot], key=slots.index)
                    record = job.finished() if code == 0 else None
                    if record is not None:
                        found[job.name] = record
                        click.echo(f"{job.name}: finished ({len(found)} of {len(jobs)} cells)", err=True)
                        if progress is not None:
                            progress(in_study_order(jobs, found))
                    else:
                        log = Path(job.cell_dir) / LOG_FILE
                        failures.append(CellFailure(job.name, exit_reason(code), log, log_tail(log)))
                        click.echo(f"{job.name}: failed ({exit_reason(code)}); the other cells go on", err=True)
        except (KeyboardInterrupt, _Stopped) as e:
            signum = e.signum if isinstance(e, _Stopped) else signal.SIGINT
            self._stop_all(list(running), signum)
            stopped = ZooError(_stopped_message(signum, [job.name for job, _ in running.values()]))
            stopped.exit_code = 128 + signum
            raise stopped from None
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        return measure_after(StudyResult(in_study_order(jobs, found), failures=failures), out_dir, efficiency)

    @staticmethod
    def _stop(signum: int, frame: FrameType | None) -> None:
        raise _Stopped(signum)

    @staticmethod
    def _stop_all(procs: list[subprocess.Popen], signum: int) -> None:
        """Send the running cells ``signum`` (each saves its step and exits, as ``train`` does) and wait for them."""
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)
        for proc in procs:
            proc.wait()


def exit_reason(code: int) -> str:
    """Why a cell's process ended, from its exit status: a code, or the signal that killed it and who sends such a
    signal (a process killed by SIGKILL had no chance to say anything in its log)."""
    if code >= 0:
        return f"its process exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    who = {"SIGKILL": ": by the system's out-of-memory killer (see `dmesg` or the system log), a user or a job "
                      "limit; it had no chance to save its step, and continues from its last checkpoint",
           "SIGSEGV": ": a crash in native code (its log's last lines may say where)",
           "SIGTERM": ": stopped by another process", "SIGINT": ": interrupted"}.get(name, "")
    return f"its process was killed by {name} (signal {-code}){who}"


def _stopped_message(signum: int, cells: list[str]) -> str:
    name = signal.Signals(signum).name
    what = (f"the running cells ({', '.join(cells)}) saved their step and stopped" if cells
            else "no cell was running")
    return f"{name}: the study stopped; {what}. Run the same command again to continue: finished cells are kept"
