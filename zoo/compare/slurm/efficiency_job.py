"""A Slurm study's efficiency lengths, measured in a job of their own (:class:`EfficiencyJob`) that starts once the
study's cell jobs have ended, so that no cell trains beside it: the lengths measured earlier are kept, a queued or
running job is waited for, else one is submitted (:class:`EfficiencyJobs`)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from lavo_zoo.compare.efficiency import EFFICIENCY_DIR, EfficiencyPlan, cached_efficiency
from lavo_zoo.compare.slurm.queue import is_live, pause, refreshed
from lavo_zoo.compare.slurm.submissions import JOB_DIR, Submissions


class EfficiencyJob:
    """The efficiency lengths' job: :meth:`~lavo_zoo.compare.efficiency.EfficiencyPlan.measure` on the cluster."""

    def __init__(self, plan: EfficiencyPlan, out_dir: Path) -> None:
        self.plan, self.out_dir = plan, out_dir

    def __call__(self) -> dict[str, Any]:
        return self.plan.measure(self.out_dir)


class EfficiencyJobs:
    """The efficiency lengths' job of a study, submitted through ``submissions``."""

    def __init__(self, submissions: Submissions) -> None:
        self.submissions = submissions
        self.queue, self.settings = submissions.queue, submissions.settings

    def device(self, plan: EfficiencyPlan) -> str:
        """Where the job measures: the study's device, else a cell's (CUDA with ``--gpus-per-cell``)."""
        return plan.device or ("cuda" if self.settings.gpus_per_cell else "cpu")

    def found_and_job(self, plan: EfficiencyPlan | None, out_dir: Path, recorded: dict[str, Any] | None,
                      states: dict[str, str], cells: list[str]) -> tuple[dict[str, dict[str, Any]], str | None]:
        """The efficiency lengths measured earlier, and the job that measures the others: its queued or running one
        (``recorded``), else one submitted now, to start after the study's cell jobs ``cells`` have ended (on a
        queue without dependencies, only once they have: None until then, as when there is nothing to measure).

        Args:
            plan: what the study measures (None: nothing).
            out_dir: the study folder.
            recorded: what ``OUT/efficiency/slurm/job.json`` records, or None.
            states: the queue's states of the recorded jobs.
            cells: the ids of the study's pending cell jobs.
        """
        if plan is None:
            return {}, None
        device = self.device(plan)
        found, todo = cached_efficiency(plan.setups, out_dir, device, plan.how)
        if not todo:
            return found, None
        if recorded is not None and is_live(states.get(recorded["job_id"])):
            return found, recorded["job_id"]
        if cells and not self.queue.dependencies:
            return found, None
        folder = out_dir / EFFICIENCY_DIR / JOB_DIR
        job_id = self.submissions.submit(EfficiencyJob(replace(plan, device=device), out_dir.resolve()), folder,
                                         f"lavo-efficiency-{out_dir.name}", {"what": "efficiency lengths"},
                                         dependency=cells)
        after = ", to start once the cells' jobs have ended" if cells else ""
        click.echo(f"efficiency lengths: submitted as {self.queue.name} job {job_id}{after}; its log in {folder}",
                   err=True)
        return found, job_id

    def wait(self, plan: EfficiencyPlan, out_dir: Path, job_id: str) -> dict[str, dict[str, Any]]:
        """The efficiency lengths once job ``job_id`` has ended (those it did not measure said so: n/a)."""
        while is_live(self.queue.states([job_id]).get(job_id)):
            pause()
        refreshed(out_dir / EFFICIENCY_DIR)
        found, todo = cached_efficiency(plan.setups, out_dir, self.device(plan), plan.how, echo=False)
        if todo:
            click.echo(f"efficiency lengths: {self.queue.name} job {job_id} ended without measuring "
                       f"{', '.join(label for rows in todo.values() for label, _ in rows)} (its log is in "
                       f"{out_dir / EFFICIENCY_DIR / JOB_DIR}); the table shows n/a for them, and the same command "
                       "submits the job again", err=True)
        return found
