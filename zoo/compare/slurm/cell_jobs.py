"""A study's cells as Slurm jobs: what a cell's job runs (:class:`SlurmCell`), which job trains a cell (its queued or
running one, else one submitted now) and why a cell's job ended without finishing it (:class:`CellJobs`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from lavo_zoo.compare.jobs import CellJob
from lavo_zoo.compare.outcomes import CellFailure, log_tail
from lavo_zoo.compare.slurm.queue import is_live, never_starts, submitit
from lavo_zoo.compare.slurm.submissions import JOB_DIR, Submissions, spec_sha256
from lavo_zoo.errors import UsageError


class SlurmCell:
    """What a cell's job runs (submitit pickles it): the :class:`CellJob`, requeued by submitit before the job's time
    limit (``checkpoint``: the same cell again, which continues from its checkpoints). A job stopped by a signal
    (preemption, ``scontrol requeue``, ``scancel``) leaves no result: Slurm runs it again, or it ended."""

    def __init__(self, job: CellJob) -> None:
        self.job = job

    def __call__(self) -> dict[str, Any]:
        from lavo_zoo.engine.interrupt import TrainingInterrupted

        try:
            return self.job()
        except TrainingInterrupted as e:  # the trainer saved its step; a SystemExit writes no submitit result
            click.echo(f"error: {e}", err=True)
            raise SystemExit(e.exit_code) from None

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        return submitit().helpers.DelayedSubmission(self)


class CellJobs:
    """The jobs of a study's cells, submitted through ``submissions``."""

    def __init__(self, submissions: Submissions) -> None:
        self.submissions = submissions
        self.queue, self.settings = submissions.queue, submissions.settings

    def job_id(self, job: CellJob, recorded: dict[str, Any] | None, states: dict[str, str], label: str) -> str:
        """The id of the job that trains ``job``'s cell: its queued or running one (``recorded`` in its folder), else
        a new one (a job that ended without finishing the cell is reported, then submitted again).

        Args:
            job: the cell.
            recorded: what its folder's job.json records (:meth:`Submissions.recorded`), or None.
            states: the queue's states of the recorded jobs.
            label: the cell's place in the study ("[2/6]").

        Raises:
            UsageError: the cell's queued or running job was submitted with other settings than the study's.
        """
        folder = Path(job.cell_dir) / JOB_DIR
        sha = spec_sha256(job)
        if recorded is not None and is_live(states.get(recorded["job_id"])):
            job_id, state = recorded["job_id"], states[recorded["job_id"]]
            if recorded.get("spec_sha256") != sha:
                raise UsageError(f"{job.name} has {self.queue.name} job {job_id} ({state}), submitted with other "
                                 f"settings than this study's; cancel it (scancel {job_id}) or give the study's "
                                 "earlier settings")
            click.echo(f"{label} {job.name}: {self.queue.name} job {job_id} is {state.lower()}, not submitted again",
                       err=True)
            return job_id
        if recorded is not None:
            failure = self.failure(job, recorded["job_id"], states.get(recorded["job_id"]))
            click.echo(f"{label} {failure.describe()}\n    submitted again: it continues from its last checkpoint",
                       err=True)
            if never_starts(states.get(recorded["job_id"])):
                click.echo("    (with the same request it will not start either: change it, as said above)", err=True)
        job.launch = {"launcher": "slurm"}
        if self.settings.cpus_per_cell:
            job.threads = self.settings.cpus_per_cell
        job_id = self.submissions.submit(SlurmCell(job), folder, f"lavo-{job.name}",
                                         {"cell": job.name, "spec_sha256": sha})
        click.echo(f"{label} {job.name}: submitted as {self.queue.name} job {job_id}; its log in {folder}", err=True)
        return job_id

    def failure(self, job: CellJob, job_id: str, state: str | None) -> CellFailure:
        """Why ``job``'s cell did not finish in job ``job_id`` (its last known ``state``): a job that will never
        start is cancelled and said so; one that ended is reported with its log's last lines."""
        paths = submitit().core.utils.JobPaths(Path(job.cell_dir) / JOB_DIR, job_id=job_id, task_id=0)
        never = never_starts(state)
        if never:
            self.queue.cancel(job_id)
            return CellFailure(job.name, f"{self.queue.name} job {job_id} will not start ({never}); it was cancelled. "
                               "Ask for what the cluster has (--cpus-per-cell, --mem, --gpus-per-cell, --time, "
                               "--partition, --constraint, --account, --qos) and run the same command again",
                               paths.folder)
        how = f"ended {state}" if state else self.queue.ended(job_id)
        logs = [p for p in (paths.stderr, paths.stdout) if p.is_file()]
        tail = next((t for t in (log_tail(p) for p in logs) if t), "")
        return CellFailure(job.name, f"{self.queue.name} job {job_id} {how} without finishing the cell",
                           logs[0] if logs else paths.folder, tail)
