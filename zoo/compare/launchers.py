"""Where a study's cells run: one after another in the study's own process (``serial``, the default), several at once
on this machine (``local``: :mod:`~lavo_zoo.compare.local`), or as jobs on a Slurm cluster (``slurm``, through
submitit: :mod:`~lavo_zoo.compare.slurm`). Every launcher runs the same :class:`~lavo_zoo.compare.jobs.CellJob`, so a
cell's result does not depend on where it ran; the study folder (its cell folders, their locks and records) is the
only coordination between the processes.

The settings come from the command line (``--launcher``, ``--jobs``, ``--partition``, ...) over the config's
``launcher:`` section (:class:`LauncherSettings`; the section is not part of the runs' config)::

    launcher:
      name: slurm            # serial | local | slurm
      partition: gpu
      gpus_per_cell: 1
      cpus_per_cell: 8
      mem: 64G
      time: "4:00:00"        # a cell's job; one stopped at its limit is requeued and continues
      slurm_options: {mail-type: END}
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

import click

from lavo_zoo.compare.jobs import CellJob
from lavo_zoo.config import Range
from lavo_zoo.engine.records import CELL_FILE, CellRecord
from lavo_zoo.errors import UsageError, ZooError

LAUNCHERS = ("serial", "local", "slurm")
LOG_TAIL_LINES = 15  # of a failed cell's log, in the report
Progress = Callable[[list[CellRecord]], None]  # told the finished cells (study order) each time one finishes


@dataclass
class LauncherSettings:
    """How ``lavo-zoo compare`` runs its cells (the config's ``launcher:`` section; the command line's options
    override it)."""

    name: Literal["serial", "local", "slurm"] = "serial"
    # local: cells at once (default: every GPU, cells_per_gpu cells each; on the CPU one cell per 4 cores)
    jobs: Annotated[int, Range(ge=1)] | None = None
    cells_per_gpu: Annotated[int, Range(ge=1)] = 1
    # slurm: sbatch's options for each cell's job
    partition: str | None = None
    gpus_per_cell: Annotated[int, Range(ge=0)] | None = None
    cpus_per_cell: Annotated[int, Range(ge=1)] | None = None
    mem: str | None = None  # sbatch --mem: 64G, 16000M
    # sbatch --time: minutes, or "[days-]hours:minutes:seconds" (the configs' YAML reads 4:00:00 as that text)
    time: str | int | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    slurm_options: dict[str, Any] = field(default_factory=dict)  # any other sbatch option: {exclusive: true}
    max_requeues: Annotated[int, Range(ge=0)] = 3  # a cell's job requeued at its time limit at most this often
    wait: bool = True  # slurm: wait for the cells and write the table as they finish (False: submit and return)


SLURM_ONLY = ("partition", "gpus_per_cell", "cpus_per_cell", "mem", "time", "account", "qos", "constraint",
              "slurm_options")
LOCAL_ONLY = ("jobs", "cells_per_gpu")


def launcher_settings(section: Any, given: dict[str, Any], source: str) -> LauncherSettings:
    """The settings from a config's ``launcher:`` section (None: none) with the command line's ``given`` values
    (those not None) over it; a command-line option of another launcher than the chosen one is refused (the
    section's are kept for when it is chosen).

    Raises:
        ConfigError: the section has an unknown key or a value of the wrong type.
        UsageError: an option that the chosen launcher does not use, or a malformed ``--time``.
    """
    from lavo_zoo.config import from_dict, to_dict

    base = from_dict(LauncherSettings, section or {}, f"{source}, section 'launcher'", "launcher.")
    chosen = {k: v for k, v in given.items() if v is not None and v != {}}
    merged = {**to_dict(base), **chosen}
    if "slurm_options" in chosen:
        merged["slurm_options"] = {**base.slurm_options, **chosen["slurm_options"]}
    settings = from_dict(LauncherSettings, merged, "the command line's launcher options", "launcher.")
    foreign = {"serial": SLURM_ONLY + LOCAL_ONLY, "local": SLURM_ONLY, "slurm": LOCAL_ONLY}[settings.name]
    for name in (name for name in foreign if name in chosen):  # the section may describe the cluster for later
        owner = "slurm" if name in SLURM_ONLY else "local"
        raise UsageError(f"--{option_name(name)} is an option of --launcher {owner}, and this study runs "
                         f"--launcher {settings.name}: add --launcher {owner}, or leave the option out")
    if chosen.get("wait") is False and settings.name != "slurm":
        raise UsageError("--no-wait leaves the cells to a Slurm cluster: it goes with --launcher slurm")
    if settings.time is not None:
        slurm_minutes(settings.time)
    if settings.mem is not None and not _MEM.match(str(settings.mem)):
        raise UsageError(f"--mem {settings.mem!r}: give the memory of a cell's job as sbatch reads it, a whole number "
                         "with an optional unit K, M, G or T (64G, 16000M)")
    check_slurm_options(settings.slurm_options)
    return settings


_MEM = re.compile(r"^\d+[KMGTkmgt]?$")
_SBATCH_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
# sbatch options a setting of its own gives (the option to use instead), or that the launcher sets itself (None)
_SBATCH_OWN = {"partition": "--partition", "p": "--partition", "time": "--time", "t": "--time", "mem": "--mem",
               "account": "--account", "A": "--account", "qos": "--qos", "q": "--qos", "constraint": "--constraint",
               "C": "--constraint", "cpus-per-task": "--cpus-per-cell", "c": "--cpus-per-cell",
               "gpus-per-node": "--gpus-per-cell", "gpus": "--gpus-per-cell", "G": "--gpus-per-cell",
               "gres": "--gpus-per-cell", "job-name": None, "J": None, "output": None, "o": None, "error": None,
               "e": None, "requeue": None, "no-requeue": None, "signal": None, "dependency": None, "d": None,
               "array": None, "a": None}


def check_slurm_options(options: dict[str, Any]) -> None:
    """Refuse, before anything is submitted, a free sbatch option (``--slurm-option`` / ``launcher.slurm_options``)
    that is not one: a name sbatch cannot have (a space), a value that is not one line (a newline would become a
    line of the job's script), one that a setting of its own gives (``time``: use ``--time``), that the launcher
    sets itself (the job's name, logs, requeueing, dependencies) or that starts the job without this environment
    (an ``export`` without ``ALL``).

    Raises:
        UsageError: naming the option and what to give instead.
    """
    for key, value in options.items():
        name = str(key).replace("_", "-")
        if not _SBATCH_KEY.match(str(key)):
            raise UsageError(f"--slurm-option {key!r}: an sbatch option's name is letters, digits and dashes "
                             "(mail-type=END); give one option per --slurm-option")
        if name in _SBATCH_OWN or key in _SBATCH_OWN:
            instead = _SBATCH_OWN.get(name, _SBATCH_OWN.get(key))
            raise UsageError(f"--slurm-option {key}: " + (f"give it as {instead} (or its key in the launcher: section)"
                                                         if instead else "the launcher sets this sbatch option "
                                                         "itself; leave it out"))
        if name == "export" and not str(value).upper().startswith("ALL"):
            raise UsageError(f"--slurm-option export={value}: a cell's job runs this Python with this environment (the "
                             "virtual environment, PYTHONPATH, and the variables submitit finds its job by); an export "
                             "without ALL leaves them out and every job fails before its cell starts. Give "
                             "export=ALL,NAME=VALUE to add variables, or leave the option out")
        if value is True:  # a flag (exclusive)
            continue
        if value is False:
            raise UsageError(f"--slurm-option {key}=false: an sbatch flag is given or left out; leave it out")
        if not isinstance(value, (str, int, float)) or any(c in str(value) for c in "\n\r\0"):
            raise UsageError(f"--slurm-option {key}={value!r}: the value must be one line of text (or true for a "
                             "flag)")


def option_name(key: str) -> str:
    """A setting's command-line spelling: ``gpus_per_cell`` -> ``gpus-per-cell``, ``slurm_options`` ->
    ``slurm-option``."""
    return "slurm-option" if key == "slurm_options" else key.replace("_", "-")


_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def slurm_minutes(value: str | int) -> int:
    """Slurm's ``--time`` in whole minutes (rounded up): ``90``, ``"90"``, ``"MM:SS"``, ``"HH:MM:SS"``, ``"D-HH"``,
    ``"D-HH:MM"``, ``"D-HH:MM:SS"``.

    Raises:
        UsageError: a value Slurm would not read as a time limit.
    """
    text = str(value).strip()
    found = _TIME.match(text)
    if isinstance(value, bool) or not found:
        raise UsageError(f"--time {value!r}: give a time limit as Slurm writes one: minutes (240), HH:MM:SS "
                         "(4:00:00) or D-HH:MM:SS (1-00:00:00)")
    days, first, second, third = (int(x) if x is not None else None for x in found.groups())
    if days is not None:  # D-HH[:MM[:SS]]
        seconds = days * 86400 + first * 3600 + (second or 0) * 60 + (third or 0)
    elif third is not None:  # HH:MM:SS
        seconds = first * 3600 + second * 60 + third
    elif second is not None:  # MM:SS
        seconds = first * 60 + second
    else:  # minutes
        seconds = first * 60
    if seconds <= 0:
        raise UsageError(f"--time {value!r}: a cell's job needs a time limit above 0")
    return -(-seconds // 60)


def parse_slurm_options(items: tuple[str, ...]) -> dict[str, Any]:
    """``("exclusive", "mail-type=END")`` -> ``{"exclusive": True, "mail-type": "END"}`` (``--slurm-option``)."""
    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip().lstrip("-")
        if not key or (eq and not value):
            raise UsageError(f"--slurm-option {item}: write an sbatch option as KEY=VALUE (mail-type=END) or KEY "
                             "alone for a flag (exclusive)")
        out[key] = value if eq else True
    return out


# ------------------------------------------------------------------------------------------------------ outcomes
@dataclass
class EfficiencyPlan:
    """The efficiency lengths a study measures: each row's layer (:func:`~lavo_zoo.compare.efficiency.attention_setup`),
    the device and how (:class:`~lavo_zoo.compare.efficiency.Efficiency`)."""

    setups: dict[str, dict[str, Any] | None]
    device: str | None
    how: Any


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


def read_record(job: CellJob) -> CellRecord | None:
    """The record of a finished cell (its cell.json, the record's ``source``), else None.

    Raises:
        UsageError: a cell.json that cannot be read, or the record of another cell (another attention or seed: copied
            or moved there), naming the file and how to train the cell again.
    """
    import json

    done = Path(job.cell_dir) / CELL_FILE
    if not done.is_file():
        return None
    try:
        data = json.loads(done.read_text(encoding="utf-8"))
        problem = None if isinstance(data, dict) else f"a JSON {type(data).__name__}, not a mapping"
        record = None if problem else CellRecord.from_json(data, source=str(done))
    except (ValueError, UsageError) as e:  # JSON, UTF-8 or record errors: an edited or damaged file
        problem, record = str(e), None
    if record is None:
        raise UsageError(f"{done}, the record of a finished cell, cannot be read ({problem}); the study writes it "
                         "whole, so it was changed since: remove it (or the cell's folder) to train the cell again")
    if (record.attention, record.seed) != (job.attention, job.seed):
        raise UsageError(f"{done} is the record of {record.attention} seed {record.seed}, not of this cell "
                         f"({job.attention} seed {job.seed}): it was copied or moved here, and would count another "
                         "run as this one. Remove it (or the cell's folder) to train the cell")
    return record


def kept_record(job: CellJob, place: str) -> CellRecord | None:
    """The record of a cell finished earlier (:func:`read_record`), said as kept with its ``place`` in the study
    ("[2/6]"); None when the cell is still to train."""
    record = read_record(job)
    if record is not None:
        click.echo(f"{place} {job.name}: finished earlier with the same config, kept", err=True)
    return record


def in_study_order(jobs: list[CellJob], found: dict[str, CellRecord]) -> list[CellRecord]:
    return [found[job.name] for job in jobs if job.name in found]


def count(n: int, i: int) -> str:
    return f"[{i}/{n}]"


# ----------------------------------------------------------------------------------------------------- launchers
class Launcher(Protocol):
    """Runs a study's cells, and measures its efficiency lengths while none of them trains."""

    def run(self, jobs: list[CellJob], out_dir: Path, progress: Progress | None = None,
            efficiency: EfficiencyPlan | None = None) -> StudyResult:
        """Run the unfinished cells of ``jobs`` (a finished one, with its cell.json, is kept) and measure
        ``efficiency``; ``progress`` is told the finished cells each time one finishes."""

    def plan(self, cells: int) -> str:
        """How ``cells`` cells would run, in words (``--dry-run``), after the checks :meth:`run` makes before it
        starts one (a :class:`~lavo_zoo.errors.UsageError` when they fail)."""


def measure_after(result: StudyResult, out_dir: Path, efficiency: EfficiencyPlan | None) -> StudyResult:
    """The efficiency lengths of a study run on this machine, measured here once its cells have ended (none when a
    cell failed: the study is run again anyway)."""
    if efficiency is not None and not result.failures:
        from lavo_zoo.compare.efficiency import study_efficiency

        result.efficiency = study_efficiency(efficiency.setups, out_dir, efficiency.device, efficiency.how)
    return result


class SerialLauncher:
    """The cells one after another, in this process (the default); a cell's error stops the study at once (the
    finished cells are kept, the interrupted one resumes when the study is run again)."""

    def plan(self, cells: int) -> str:
        return "serial: the cells one after another in this process"

    def run(self, jobs: list[CellJob], out_dir: Path, progress: Progress | None = None,
            efficiency: EfficiencyPlan | None = None) -> StudyResult:
        records = []
        for i, job in enumerate(jobs, 1):
            record = kept_record(job, count(len(jobs), i))
            if record is None:
                click.echo(f"{count(len(jobs), i)} {job.name}: training in {job.cell_dir}", err=True)
                job.launch = {"launcher": "serial"}
                record = CellRecord.from_json(job(), source=str(Path(job.cell_dir) / CELL_FILE))
            records.append(record)
        return measure_after(StudyResult(records), out_dir, efficiency)
