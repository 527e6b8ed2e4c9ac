"""``--launcher slurm``'s launcher (:class:`SlurmLauncher`): under the study's lock it keeps the finished cells and
gives each other cell its job (:class:`~lavo_zoo.compare.slurm.cell_jobs.CellJobs`) and the efficiency lengths theirs
(:class:`~lavo_zoo.compare.slurm.efficiency_job.EfficiencyJobs`); then it returns (``--no-wait``) or waits for the
jobs, reporting each cell as it finishes or fails. The package's docstring (:mod:`lavo_zoo.compare.slurm`) says what
a Slurm study does."""
from __future__ import annotations

import time
from pathlib import Path

import click

from lavo_zoo.compare.efficiency import EFFICIENCY_DIR, EfficiencyPlan
from lavo_zoo.compare.jobs import CellJob
from lavo_zoo.compare.launchers import LauncherSettings
from lavo_zoo.compare.locks import SUBMIT_LOCK, FolderLock
from lavo_zoo.compare.outcomes import CellFailure, Progress, StudyResult, count, in_study_order
from lavo_zoo.compare.slurm.cell_jobs import CellJobs
from lavo_zoo.compare.slurm.efficiency_job import EfficiencyJobs
from lavo_zoo.compare.slurm.queue import Queue, SlurmQueue, is_live, pause, refreshed, submitit
from lavo_zoo.compare.slurm.submissions import JOB_DIR, Submissions
from lavo_zoo.engine.records import CellRecord
from lavo_zoo.errors import UsageError

VISIBLE_S = 15.0  # how long a cell record may take to show on a shared filesystem after its job completed


class SlurmLauncher:
    """``--launcher slurm``: see :mod:`lavo_zoo.compare.slurm`.

    Args:
        settings: the study's launcher settings (``time`` is required).
        queue: where the jobs go (default: Slurm; submitit's local executor in the tests).

    Raises:
        UsageError: submitit or Slurm's commands are missing, or no ``time`` was given.
    """

    def __init__(self, settings: LauncherSettings, queue: Queue | None = None) -> None:
        submitit()
        self.queue = queue or SlurmQueue()
        self.queue.check()
        if settings.time is None:
            raise UsageError("--launcher slurm needs --time (or launcher.time in the config): how long one cell's job "
                             "may run, e.g. --time 4:00:00; a cell stopped at its limit is requeued and continues "
                             "from its last checkpoint")
        self.settings = settings
        submissions = Submissions(self.queue, settings)
        self.cells, self.efficiency = CellJobs(submissions), EfficiencyJobs(submissions)

    def plan(self, cells: int) -> str:
        return f"slurm: one {self.queue.name} job per cell, each --time {self.settings.time}"

    def run(self, jobs: list[CellJob], out_dir: Path, progress: Progress | None = None,
            efficiency: EfficiencyPlan | None = None) -> StudyResult:
        """Submit the unfinished cells as jobs and, with ``wait``, collect them; its arguments are stated on
        `lavo_zoo.compare.launchers.Launcher.run`."""
        found: dict[str, CellRecord] = {}
        pending: dict[str, tuple[CellJob, str]] = {}
        with FolderLock(out_dir / SUBMIT_LOCK,
                        lambda who: click.echo(f"{who} is submitting this study; waiting for it", err=True)):
            measured, efficiency_job = self._submit(jobs, out_dir, efficiency, found, pending)
        if not self.settings.wait:
            if pending:
                click.echo(f"{len(pending)} cell(s) queued or running ({self.queue.name} jobs "
                           f"{', '.join(job_id for _, job_id in pending.values())}); the table holds the "
                           f"{len(found)} finished. Run the same command again to collect them", err=True)
            return StudyResult(in_study_order(jobs, found), measured, waiting=sorted(pending))
        failures = self._wait(jobs, pending, found, progress)
        if efficiency is not None and not failures:
            if efficiency_job is None:  # not submitted beside the cells (a queue without dependencies)
                with FolderLock(out_dir / SUBMIT_LOCK):
                    measured, efficiency_job = self.efficiency.found_and_job(efficiency, out_dir, None, {}, [])
            if efficiency_job is not None:
                measured = self.efficiency.wait(efficiency, out_dir, efficiency_job)
        return StudyResult(in_study_order(jobs, found), measured, failures=failures)

    def _submit(self, jobs: list[CellJob], out_dir: Path, efficiency: EfficiencyPlan | None,
                found: dict[str, CellRecord], pending: dict[str, tuple[CellJob, str]]) -> tuple[dict, str | None]:
        """Under the study's lock: each finished cell into ``found``, each other into ``pending`` with the job that
        trains it; the efficiency lengths measured earlier, and the job that measures the others."""
        recorded = {job.name: Submissions.recorded(Path(job.cell_dir) / JOB_DIR) for job in jobs}
        efficiency_record = Submissions.recorded(out_dir / EFFICIENCY_DIR / JOB_DIR)
        states = self.queue.states([r["job_id"] for r in [*recorded.values(), efficiency_record] if r])
        for i, job in enumerate(jobs, 1):
            record = job.finished()
            if record is not None:
                click.echo(f"{count(len(jobs), i)} {job.name}: finished, kept", err=True)
                found[job.name] = record
            else:
                pending[job.name] = (job, self.cells.job_id(job, recorded[job.name], states, count(len(jobs), i)))
        return self.efficiency.found_and_job(efficiency, out_dir, efficiency_record, states,
                                             [job_id for _, job_id in pending.values()])

    def _wait(self, jobs: list[CellJob], pending: dict[str, tuple[CellJob, str]], found: dict[str, CellRecord],
              progress: Progress | None) -> list[CellFailure]:
        """Wait for the pending cells, reporting each as it finishes or fails; the failures."""
        failures: list[CellFailure] = []
        seen: dict[str, str] = {}
        if pending:
            click.echo(f"waiting for {len(pending)} {self.queue.name} job(s); Ctrl-C stops waiting, not the jobs "
                       "(the same command collects them later)", err=True)
        while pending:
            pause()
            states = self.queue.states([job_id for _, job_id in pending.values()])
            for name, (job, job_id) in list(pending.items()):
                state = states.get(job_id)
                if state is not None and seen.get(job_id) != state:
                    seen[job_id] = state
                    click.echo(f"{name}: {self.queue.name} job {job_id} {state.lower()}", err=True)
                record = job.finished()
                deadline = time.monotonic() + (VISIBLE_S if state in (None, "COMPLETED") else 0)
                while record is None and not is_live(state) and time.monotonic() < deadline:
                    time.sleep(1)  # an ended job's record may take a moment to show on a shared filesystem
                    refreshed(Path(job.cell_dir))
                    record = job.finished()
                if record is not None:
                    found[name] = record
                    click.echo(f"{name}: finished ({len(found)} of {len(jobs)} cells)", err=True)
                    if progress is not None:
                        progress(in_study_order(jobs, found))
                elif not is_live(state):
                    failures.append(self.cells.failure(job, job_id, state))
                    click.echo(f"{failures[-1].describe()}\n    the other cells go on", err=True)
                else:
                    continue
                del pending[name]
        return failures
