"""What every launcher (:mod:`~lavo_zoo.compare.launchers`) shares: how it keeps a cell finished earlier
(:func:`kept_record`) and counts the cells, and what its run of a study gives back (:class:`StudyResult`): the
finished cells' records in the study's order, the rows' efficiency lengths, and the cells that did not finish, each a
:class:`CellFailure` with its log's last lines (:func:`log_tail`), raised together as :class:`CellsFailed`."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from lavo_zoo.compare.efficiency import EfficiencyPlan
from lavo_zoo.compare.jobs import CellJob
from lavo_zoo.engine.records import CellRecord
from lavo_zoo.errors import ZooError

LOG_TAIL_LINES = 15  # of a failed cell's log, in the report
Progress = Callable[[list[CellRecord]], None]  # told the finished cells (study order) each time one finishes


@dataclass
class CellFailure:
    """A cell that did not finish: which, why, where its log is and the log's last lines."""

    cell: str
    reason: str  # "its process exited with code 1", "Slurm job 4711 ended FAILED without finishing the cell", ...
    log: Path | None = None
    tail: str = ""

    def describe(self) -> str:
        where = f"; its log: {self.log}" if self.log else ""
        lines = f"\n    {self.tail.rstrip()}".replace("\n", "\n    ") if self.tail.strip() else ""
        return f"{self.cell}: {self.reason}{where}{lines}"


@dataclass
class StudyResult:
    """What a launcher's run of a study gives: the finished cells' records (in the study's order), the rows'
    efficiency lengths, the cells that did not finish, and those still queued or running (``--no-wait``)."""

    records: list[CellRecord]
    efficiency: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: list[CellFailure] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)


class CellsFailed(ZooError):
    """Some cells of a study did not finish; the others did (``records``, already in the table)."""

    def __init__(self, failures: list[CellFailure], records: list[CellRecord]) -> None:
        self.failures, self.records = failures, records
        finished = f"the table holds the {len(records)} that did" if records else "none did"
        super().__init__(f"{len(failures)} cell(s) did not finish ({finished}):\n"
                         + "\n".join(f.describe() for f in failures)
                         + "\nRun the same command again to run them again: each continues from its last "
                           "checkpoint, and the finished cells are kept")


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log (progress bars' carriage returns folded), or "" when it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    kept = [line.rsplit("\r", 1)[-1] for line in text.split("\n")]
    return "\n".join([line for line in kept if line.strip()][-lines:])


def kept_record(job: CellJob, place: str) -> CellRecord | None:
    """The record of a cell finished earlier (:meth:`~lavo_zoo.compare.jobs.CellJob.finished`), said as kept with
    its ``place`` in the study ("[2/6]"); None when the cell is still to train."""
    record = job.finished()
    if record is not None:
        click.echo(f"{place} {job.name}: finished earlier with the same config, kept", err=True)
    return record


def in_study_order(jobs: list[CellJob], found: dict[str, CellRecord]) -> list[CellRecord]:
    """The records ``found`` (by cell name) in the order of ``jobs``."""
    return [found[job.name] for job in jobs if job.name in found]


def count(n: int, i: int) -> str:
    """A cell's place among ``n``: ``[i/n]``."""
    return f"[{i}/{n}]"


def measure_after(result: StudyResult, out_dir: Path, efficiency: EfficiencyPlan | None) -> StudyResult:
    """The efficiency lengths of a study run on this machine, measured here once its cells have ended (none when a
    cell failed: the study is run again anyway)."""
    if efficiency is not None and not result.failures:
        result.efficiency = efficiency.measure(out_dir)
    return result
