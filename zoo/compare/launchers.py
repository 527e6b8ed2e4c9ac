"""Where a study's cells run: one after another in the study's own process (``serial``, the default), several at once
on this machine (``local``: :mod:`~lavo_zoo.compare.local`), or as jobs on a Slurm cluster (``slurm``, through
submitit: :mod:`~lavo_zoo.compare.slurm`). Every launcher runs the same :class:`~lavo_zoo.compare.jobs.CellJob`, so a
cell's result does not depend on where it ran; the study folder (its cell folders, their locks and records) is the
only coordination between the processes. What the launchers share (a kept cell, a study's result, a failed cell and
its log) is :mod:`~lavo_zoo.compare.outcomes`.

The settings come from the command line (``--launcher``, ``--jobs``, ``--partition``, ...) over the config's
``launcher:`` section (:class:`LauncherSettings`; :func:`with_options`), which is compare's: a run's config leaves it
out, and the config's reading validates it (the section is declared with its schema, :class:`LauncherSettings`, in
the ``lavo_zoo.plugins.config_sections`` entry-point group, :data:`LAUNCHER_SECTION`)::

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

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

import click

from lavo_zoo.compare.efficiency import EfficiencyPlan
from lavo_zoo.compare.jobs import CellJob
from lavo_zoo.compare.outcomes import Progress, StudyResult, count, kept_record, measure_after
from lavo_zoo.compare.slurm.options import check_slurm_settings
from lavo_zoo.config import Range
from lavo_zoo.engine.records import CELL_FILE, CellRecord
from lavo_zoo.errors import UsageError

LAUNCHERS = ("serial", "local", "slurm")
LAUNCHER_SECTION = "launcher"  # the config's section of these settings (pyproject.toml declares it as compare's)


@dataclass
class LauncherSettings:
    """How ``lavo-zoo compare`` runs its cells (the config's ``launcher:`` section; the command line's options
    override it)."""

    name: Literal["serial", "local", "slurm"] = "serial"
    # local: cells at once (default: every GPU, cells_per_gpu cells each; on the CPU one cell per 4 cores)
    jobs: Annotated[int, Range(ge=1)] | None = None
    cells_per_gpu: Annotated[int, Range(ge=1)] = 1
    # slurm: sbatch's options for each cell's job (their rules: lavo_zoo.compare.slurm.options)
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
    """The settings from a config's ``launcher:`` section as read (None: none), validated as reading the config
    validates it (:func:`~lavo_zoo.engine.configs.section_settings`), with the command line's ``given`` values over
    it (:func:`with_options`).

    Args:
        section: the config's ``launcher:`` section, as read (None where it has none).
        given: the command line's values by setting name (None: not given).
        source: the config file, for messages.

    Raises:
        ConfigError: the section has an unknown key or a value of the wrong type.
        UsageError: as :func:`with_options`.
    """
    from lavo_zoo.engine.configs import section_settings

    return with_options(section_settings(LAUNCHER_SECTION, section, source), given)


def with_options(base: LauncherSettings | None, given: dict[str, Any]) -> LauncherSettings:
    """The settings of the config's ``launcher:`` section (``base``, validated when the config was read; None: it
    has none) with the command line's ``given`` values (those not None) over them; a command-line option of another
    launcher than the chosen one is refused (the section's are kept for when it is chosen). Slurm's options are
    checked here, before submitit is imported (:func:`~lavo_zoo.compare.slurm.options.check_slurm_settings`), so that
    a dry run refuses what the cluster would.

    Args:
        base: the section's settings (:attr:`~lavo_zoo.engine.configs.LoadedConfig.settings`), or None.
        given: the command line's values by setting name (None: not given).

    Raises:
        ConfigError: a given value of the wrong type or out of range.
        UsageError: an option that the chosen launcher does not use, or a Slurm option sbatch would not take.
    """
    from lavo_zoo.config import from_dict

    base = base or LauncherSettings()
    chosen = {k: v for k, v in given.items() if v is not None and v != {}}
    checked = from_dict(LauncherSettings, chosen, "the command line's launcher options", "launcher.")
    settings = dataclasses.replace(base, **{k: getattr(checked, k) for k in chosen})
    if "slurm_options" in chosen:
        settings.slurm_options = {**base.slurm_options, **chosen["slurm_options"]}
    foreign = {"serial": SLURM_ONLY + LOCAL_ONLY, "local": SLURM_ONLY, "slurm": LOCAL_ONLY}[settings.name]
    for name in (name for name in foreign if name in chosen):  # the section may describe the cluster for later
        owner = "slurm" if name in SLURM_ONLY else "local"
        raise UsageError(f"--{option_name(name)} is an option of --launcher {owner}, and this study runs "
                         f"--launcher {settings.name}: add --launcher {owner}, or leave the option out")
    if chosen.get("wait") is False and settings.name != "slurm":
        raise UsageError("--no-wait leaves the cells to a Slurm cluster: it goes with --launcher slurm")
    check_slurm_settings(settings)
    return settings


def option_name(key: str) -> str:
    """A setting's command-line spelling: ``gpus_per_cell`` -> ``gpus-per-cell``, ``slurm_options`` ->
    ``slurm-option``."""
    return "slurm-option" if key == "slurm_options" else key.replace("_", "-")


class Launcher(Protocol):
    """Runs a study's cells, and measures its efficiency lengths while none of them trains."""

    def run(self, jobs: list[CellJob], out_dir: Path, progress: Progress | None = None,
            efficiency: EfficiencyPlan | None = None) -> StudyResult:
        """Run the unfinished cells of ``jobs`` (a finished one, with its cell.json, is kept) and measure
        ``efficiency``; ``progress`` is told the finished cells each time one finishes.

        Args:
            jobs: the study's cells, in study order.
            out_dir: the study's folder.
            progress: told the finished cells (study order) each time one finishes, or None.
            efficiency: the efficiency lengths to measure beside the cells, or None.

        Returns:
            The cells' records (those finished; a launcher that does not wait names the others) and the
            efficiency lengths measured.
        """

    def plan(self, cells: int) -> str:
        """How ``cells`` cells would run, in words (``--dry-run``), after the checks :meth:`run` makes before it
        starts one (a :class:`~lavo_zoo.errors.UsageError` when they fail)."""


class SerialLauncher:
    """The cells one after another, in this process (the default); a cell's error stops the study at once (the
    finished cells are kept, the interrupted one resumes when the study is run again)."""

    def plan(self, cells: int) -> str:
        return "serial: the cells one after another in this process"

    def run(self, jobs: list[CellJob], out_dir: Path, progress: Progress | None = None,
            efficiency: EfficiencyPlan | None = None) -> StudyResult:
        """Train the cells one by one; its arguments are stated on `Launcher.run` (``progress`` is not told: the
        cells finish in order, each announced as it starts)."""
        records: list[CellRecord] = []
        for i, job in enumerate(jobs, 1):
            record = kept_record(job, count(len(jobs), i))
            if record is None:
                click.echo(f"{count(len(jobs), i)} {job.name}: training in {job.cell_dir}", err=True)
                job.launch = {"launcher": "serial"}
                record = CellRecord.from_json(job(), source=str(Path(job.cell_dir) / CELL_FILE))
            records.append(record)
        return measure_after(StudyResult(records), out_dir, efficiency)
