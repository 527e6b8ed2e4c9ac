"""``compare --launcher slurm``: each cell of a study is a Slurm job, submitted through submitit, the engine the
field's research code submits Python callables with (``pip install 'lavo-zoo[slurm]'``).

- One job per cell, with the study's sbatch options (:class:`~lavo_zoo.compare.launchers.LauncherSettings`), its
  submitit files and its Slurm log (``<job>_0_log.out``, ``<job>_0_log.err``) in ``CELL_DIR/slurm/``, and the job it
  was given in ``CELL_DIR/slurm/job.json``.
- The jobs are requeueable (``--requeue``): one preempted, requeued by ``scontrol requeue`` or stopped at its time
  limit (submitit's signal before the limit) runs again and continues from the cell's last checkpoint with the
  trainer's exact resume; a SIGTERM (preemption, requeue) saves the step in flight first, as it does for ``train``.
- The command waits and rewrites the table each time a cell finishes; with ``--no-wait`` it submits and returns, and
  the same command later collects: finished cells are read, queued and running ones are waited for (not submitted
  again), and a cell whose job ended without finishing it is reported (job id, state, its log's last lines) and
  submitted again, to continue from its last checkpoint.
- Two submissions of one study never train one cell twice: submitting holds the study's lock, a cell with a queued or
  running job is not submitted again, and a job works on its cell only under the cell's lock
  (:mod:`~lavo_zoo.compare.locks`). The study folder must be on a filesystem every node mounts at the same path,
  with locks that hold across nodes; the jobs run this Python (``sys.executable``) in this folder with this
  environment, so the virtual environment must be on a shared filesystem too.
- The efficiency lengths are measured in a job of their own that starts once the study's cells have ended
  (``--dependency=afterany``), so that no cell of the study trains beside it; its result is kept in
  ``OUT/efficiency/`` as with the other launchers.
"""
from __future__ import annotations

import getpass
import hashlib
import json
import shutil
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from lavo_zoo.atomic import write_file
from lavo_zoo.compare.efficiency import EFFICIENCY_DIR, cached_efficiency
from lavo_zoo.compare.jobs import CellJob
from lavo_zoo.compare.launchers import (
    CellFailure,
    EfficiencyPlan,
    LauncherSettings,
    Progress,
    StudyResult,
    count,
    in_study_order,
    log_tail,
    read_record,
    slurm_minutes,
)
from lavo_zoo.compare.locks import SUBMIT_LOCK, FolderLock
from lavo_zoo.engine.records import CellRecord
from lavo_zoo.errors import UsageError, ZooError

SUBMITIT_LOGGING = "SUBMITIT_LOG_LEVEL"  # submitit reads it on import ("NOCONFIG": no logging set-up)
JOB_DIR = "slurm"  # in a cell folder (and in OUT/efficiency/): submitit's files, the job's log, job.json
RECORD = "job.json"
POLL_S = 10.0  # between two looks at the queue while waiting
VISIBLE_S = 15.0  # how long a cell record may take to show on a shared filesystem after its job completed
# states of a job that will not run again; anything else is queued, running or about to run again (PREEMPTED too, as
# submitit counts it: a preempted job that is requeued passes through it; one that is not leaves the queue later)
ENDED = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "REVOKED",
         "SPECIAL_EXIT", "TIMEOUT"}
# why Slurm holds a pending job that will not start while the cluster is configured as it is (squeue's reason codes):
# it asks for more than the partition's nodes have or allow, a constraint no node has, an account or QOS that does not
# exist, or exceeds a per-job limit; waiting for such a job never ends, so it is cancelled and reported
NEVER_STARTS = {"PartitionConfig": "it asks for more CPUs, memory or GPUs than any node of the partition has",
                "PartitionNodeLimit": "it asks for more nodes than the partition allows",
                "PartitionTimeLimit": "its --time exceeds the partition's time limit",
                "BadConstraints": "no node has the features its --constraint asks for",
                "InvalidAccount": "its --account is not one of yours", "InvalidQOS": "its --qos is not one of yours",
                "DependencyNeverSatisfied": "the job it waits for failed"}


def submitit() -> Any:
    """The submitit module, imported without the logging set-up it does on import where this process has not imported
    it yet: that set-up (``logging.config.dictConfig``) closes every logging handler the process already has (a host
    application's, pytest's). The jobs' own processes import it as usual and log to their Slurm logs.

    Raises:
        UsageError: submitit is not installed.
    """
    import os
    import sys

    if "submitit" not in sys.modules:
        previous = os.environ.get(SUBMITIT_LOGGING)
        os.environ[SUBMITIT_LOGGING] = "NOCONFIG"
        try:
            import submitit as module
        except ImportError:
            raise UsageError("--launcher slurm submits the cells through submitit, which is not installed: "
                             "pip install 'lavo-zoo[slurm]'") from None
        finally:
            if previous is None:
                del os.environ[SUBMITIT_LOGGING]
            else:
                os.environ[SUBMITIT_LOGGING] = previous
    import submitit as module

    return module


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


class EfficiencyJob:
    """The efficiency lengths' job: :func:`~lavo_zoo.compare.efficiency.study_efficiency` on the cluster."""

    def __init__(self, plan: EfficiencyPlan, out_dir: Path) -> None:
        self.plan, self.out_dir = plan, out_dir

    def __call__(self) -> dict[str, Any]:
        from lavo_zoo.compare.efficiency import study_efficiency

        return study_efficiency(self.plan.setups, self.out_dir, self.plan.device, self.plan.how)


def spec_sha256(job: CellJob) -> str:
    """What a cell's job computes (config, overrides, split, device, ...; not how many threads it has): a queued job
    submitted with another is not the study's any more."""
    spec = {k: v for k, v in job.to_json().items() if k not in ("threads", "cores", "launch")}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


class SlurmQueue:
    """Slurm itself: jobs submitted with sbatch (submitit's ``SlurmExecutor``), the queue read with squeue."""

    name = "Slurm"
    dependencies = True  # a job can wait for others (sbatch --dependency)

    def check(self) -> None:
        if shutil.which("sbatch") is None or shutil.which("squeue") is None:
            raise UsageError("--launcher slurm needs Slurm's commands (sbatch, squeue), which this machine does not "
                             "have: run the command on the cluster's login node, or use --launcher local")

    @staticmethod
    def parameters(settings: LauncherSettings, name: str, dependency: list[str]) -> dict[str, Any]:
        """submitit's ``SlurmExecutor`` parameters of one job: the study's sbatch options, requeueable."""
        s = settings
        extra = {"requeue": True, **{k.replace("_", "-"): v for k, v in s.slurm_options.items()}}
        options = {"job_name": name, "time": slurm_minutes(s.time), "partition": s.partition, "mem": s.mem,
                   "cpus_per_task": s.cpus_per_cell, "gpus_per_node": s.gpus_per_cell or None, "account": s.account,
                   "qos": s.qos, "constraint": s.constraint, "additional_parameters": extra,
                   "dependency": "afterany:" + ":".join(dependency) if dependency else None}
        return {k: v for k, v in options.items() if v is not None}

    def executor(self, folder: Path, settings: LauncherSettings, name: str, dependency: list[str]) -> Any:
        """A submitit executor for one job (:meth:`parameters`)."""
        executor = submitit().SlurmExecutor(folder=folder, max_num_timeout=settings.max_requeues)
        executor.update_parameters(**self.parameters(settings, name, dependency))
        return executor

    def states(self, job_ids: list[str]) -> dict[str, str]:
        """{job id: state} of the jobs Slurm still knows (queued, running, and for a while ended ones); a pending
        job that will not start (:data:`NEVER_STARTS`) is ``PENDING (reason)``."""
        try:
            out = subprocess.run(["squeue", "-h", "-t", "all", "-u", getpass.getuser(), "-o", "%i|%T|%r"],
                                 capture_output=True, text=True, timeout=120, check=True).stdout
        except (OSError, subprocess.SubprocessError) as e:
            raise ZooError(f"could not read Slurm's queue (squeue): {getattr(e, 'stderr', None) or e}") from None
        known = {}
        for line in out.splitlines():
            job_id, _, rest = line.strip().partition("|")
            state, _, reason = rest.partition("|")
            if job_id and state:
                known[job_id] = f"{state} ({reason})" if state == "PENDING" and reason in NEVER_STARTS else state
        return {job_id: known[job_id] for job_id in job_ids if job_id in known}

    def cancel(self, job_id: str) -> None:
        """Cancel a job (scancel); one that has ended meanwhile is left as it is."""
        subprocess.run(["scancel", job_id], capture_output=True, text=True, timeout=60, check=False)

    def ended(self, job_id: str) -> str:
        """How an ended job ended, from Slurm's accounting where the cluster keeps one (sacct)."""
        try:
            out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,ExitCode"],
                                 capture_output=True, text=True, timeout=60, check=True).stdout.split()
        except (OSError, subprocess.SubprocessError):
            out = []
        return f"ended {out[0].replace('|', ', exit code ')}" if out else "ended (no longer in Slurm's queue)"


class LocalQueue:
    """submitit's ``LocalExecutor``: each job a process on this machine, the same submission, records, waiting and
    collecting as on Slurm (the launcher's tests where no Slurm runs). A job's id is its process's; it cannot wait for
    other jobs, so the efficiency lengths' job is submitted once the cells have ended."""

    name = "submitit's local executor"
    dependencies = False

    def check(self) -> None:
        pass

    def executor(self, folder: Path, settings: LauncherSettings, name: str, dependency: list[str]) -> Any:
        executor = submitit().LocalExecutor(folder=folder, max_num_timeout=settings.max_requeues)
        executor.update_parameters(timeout_min=slurm_minutes(settings.time), gpus_per_node=settings.gpus_per_cell or 0)
        return executor

    def states(self, job_ids: list[str]) -> dict[str, str]:
        return {job_id: "RUNNING" for job_id in job_ids if _process_runs(int(job_id))}

    def cancel(self, job_id: str) -> None:
        import os
        import signal

        try:
            os.kill(int(job_id), signal.SIGTERM)
        except ProcessLookupError:
            pass
        _process_runs(int(job_id))  # reaped once it has ended

    def ended(self, job_id: str) -> str:
        return "ended"


def _process_runs(pid: int) -> bool:
    """Whether process ``pid`` runs (a child of this process that ended is reaped here, so that it does not look
    alive)."""
    import os

    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:  # not a child of this process
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _is_live(state: str | None) -> bool:
    return state is not None and state.split()[0] not in ENDED and never_starts(state) is None


def never_starts(state: str | None) -> str | None:
    """Why a pending job (its state as :meth:`SlurmQueue.states` gives it) will not start, or None."""
    reason = (state or "").partition("(")[2].rstrip(")")
    return f"Slurm holds it as {reason}: {NEVER_STARTS[reason]}" if reason in NEVER_STARTS else None


def _refreshed(folder: Path) -> None:
    """Make a shared filesystem show the folder's current entries (a change of its attributes drops the cached
    listing; submitit does the same)."""
    try:
        folder.chmod(folder.stat().st_mode)
    except OSError:
        pass


class SlurmLauncher:
    """``--launcher slurm``: see the module docstring."""

    def __init__(self, settings: LauncherSettings, queue: SlurmQueue | LocalQueue | None = None) -> None:
        submitit()
        self.queue = queue or SlurmQueue()
        self.queue.check()
        if settings.time is None:
            raise UsageError("--launcher slurm needs --time (or launcher.time in the config): how long one cell's job "
                             "may run, e.g. --time 4:00:00; a cell stopped at its limit is requeued and continues "
                             "from its last checkpoint")
        self.settings = settings

    def plan(self, cells: int) -> str:
        return f"slurm: one {self.queue.name} job per cell, each --time {self.settings.time}"

    # ---------------------------------------------------------------------------------------------- submitting
    def _submit(self, target: Any, folder: Path, name: str, record: dict[str, Any],
                dependency: list[str] | None = None) -> str:
        """Submit ``target`` as a job whose files are in ``folder``; its id is written in ``folder/job.json`` with
        ``record``."""
        try:
            job = self.queue.executor(folder, self.settings, name, dependency or []).submit(target)
        except ValueError as e:  # an option submitit does not know
            raise UsageError(f"--launcher slurm: {e}") from None
        except Exception as e:  # noqa: BLE001 - sbatch refused (a partition, an account, a time limit)
            raise ZooError(f"{self.queue.name} refused the job {name}: {str(e).strip()}") from None
        write_file(folder / RECORD, json.dumps({**record, "job_id": job.job_id,
                                                "submitted": datetime.now(UTC).isoformat()}, indent=2),
                   overwrite=True, option="the cell's job record")
        return job.job_id

    @staticmethod
    def _recorded(folder: Path) -> dict[str, Any] | None:
        try:
            data = json.loads((folder / RECORD).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and "job_id" in data else None

    def _cell_job(self, job: CellJob, recorded: dict[str, Any] | None, states: dict[str, str], label: str) -> str:
        """The id of the job that trains ``job``'s cell: its queued or running one (``recorded`` in its folder), else
        a new one."""
        folder = Path(job.cell_dir) / JOB_DIR
        sha = spec_sha256(job)
        if recorded is not None and _is_live(states.get(recorded["job_id"])):
            job_id, state = recorded["job_id"], states[recorded["job_id"]]
            if recorded.get("spec_sha256") != sha:
                raise UsageError(f"{job.name} has {self.queue.name} job {job_id} ({state}), submitted with other "
                                 f"settings than this study's; cancel it (scancel {job_id}) or give the study's "
                                 "earlier settings")
            click.echo(f"{label} {job.name}: {self.queue.name} job {job_id} is {state.lower()}, not submitted again",
                       err=True)
            return job_id
        if recorded is not None:
            failure = self._failure(job, recorded["job_id"], states.get(recorded["job_id"]))
            click.echo(f"{label} {failure.describe()}\n    submitted again: it continues from its last checkpoint",
                       err=True)
            if never_starts(states.get(recorded["job_id"])):
                click.echo("    (with the same request it will not start either: change it, as said above)", err=True)
        job.launch = {"launcher": "slurm"}
        if self.settings.cpus_per_cell:
            job.threads = self.settings.cpus_per_cell
        job_id = self._submit(SlurmCell(job), folder, f"lavo-{job.name}", {"cell": job.name, "spec_sha256": sha})
        click.echo(f"{label} {job.name}: submitted as {self.queue.name} job {job_id}; its log in {folder}", err=True)
        return job_id

    def _failure(self, job: CellJob, job_id: str, state: str | None) -> CellFailure:
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

    # -------------------------------------------------------------------------------------------------- the study
    def run(self, jobs: list[CellJob], out_dir: Path, progress: Progress | None = None,
            efficiency: EfficiencyPlan | None = None) -> StudyResult:
        found: dict[str, CellRecord] = {}
        pending: dict[str, tuple[CellJob, str]] = {}
        with FolderLock(out_dir / SUBMIT_LOCK,
                        lambda who: click.echo(f"{who} is submitting this study; waiting for it", err=True)):
            recorded = {job.name: self._recorded(Path(job.cell_dir) / JOB_DIR) for job in jobs}
            efficiency_record = self._recorded(out_dir / EFFICIENCY_DIR / JOB_DIR)
            states = self.queue.states([r["job_id"] for r in [*recorded.values(), efficiency_record] if r])
            for i, job in enumerate(jobs, 1):
                record = read_record(job)
                if record is not None:
                    click.echo(f"{count(len(jobs), i)} {job.name}: finished, kept", err=True)
                    found[job.name] = record
                else:
                    pending[job.name] = (job, self._cell_job(job, recorded[job.name], states, count(len(jobs), i)))
            measured, efficiency_job = self._efficiency(efficiency, out_dir, efficiency_record, states,
                                                        [job_id for _, job_id in pending.values()])
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
                    measured, efficiency_job = self._efficiency(efficiency, out_dir, None, {}, [])
            if efficiency_job is not None:
                measured = self._wait_efficiency(efficiency, out_dir, efficiency_job)
        return StudyResult(in_study_order(jobs, found), measured, failures=failures)

    def _wait(self, jobs: list[CellJob], pending: dict[str, tuple[CellJob, str]], found: dict[str, CellRecord],
              progress: Progress | None) -> list[CellFailure]:
        """Wait for the pending cells, reporting each as it finishes or fails; the failures."""
        failures: list[CellFailure] = []
        seen: dict[str, str] = {}
        if pending:
            click.echo(f"waiting for {len(pending)} {self.queue.name} job(s); Ctrl-C stops waiting, not the jobs "
                       "(the same command collects them later)", err=True)
        while pending:
            time.sleep(POLL_S)
            states = self.queue.states([job_id for _, job_id in pending.values()])
            for name, (job, job_id) in list(pending.items()):
                state = states.get(job_id)
                if state is not None and seen.get(job_id) != state:
                    seen[job_id] = state
                    click.echo(f"{name}: {self.queue.name} job {job_id} {state.lower()}", err=True)
                record = read_record(job)
                deadline = time.monotonic() + (VISIBLE_S if state in (None, "COMPLETED") else 0)
                while record is None and not _is_live(state) and time.monotonic() < deadline:
                    time.sleep(1)  # an ended job's record may take a moment to show on a shared filesystem
                    _refreshed(Path(job.cell_dir))
                    record = read_record(job)
                if record is not None:
                    found[name] = record
                    click.echo(f"{name}: finished ({len(found)} of {len(jobs)} cells)", err=True)
                    if progress is not None:
                        progress(in_study_order(jobs, found))
                elif not _is_live(state):
                    failures.append(self._failure(job, job_id, state))
                    click.echo(f"{failures[-1].describe()}\n    the other cells go on", err=True)
                else:
                    continue
                del pending[name]
        return failures

    # ------------------------------------------------------------------------------------------- efficiency lengths
    def _efficiency_device(self, plan: EfficiencyPlan) -> str:
        return plan.device or ("cuda" if self.settings.gpus_per_cell else "cpu")

    def _efficiency(self, plan: EfficiencyPlan | None, out_dir: Path, recorded: dict[str, Any] | None,
                    states: dict[str, str], cells: list[str]) -> tuple[dict[str, dict[str, Any]], str | None]:
        """The efficiency lengths measured earlier, and the job that measures the others: its queued or running one
        (``recorded``), else one submitted now, to start after the study's cell jobs ``cells`` have ended (on a
        queue without dependencies, only once they have: None until then, as when there is nothing to measure)."""
        if plan is None:
            return {}, None
        device = self._efficiency_device(plan)
        found, todo = cached_efficiency(plan.setups, out_dir, device, plan.how)
        if not todo:
            return found, None
        if recorded is not None and _is_live(states.get(recorded["job_id"])):
            return found, recorded["job_id"]
        if cells and not self.queue.dependencies:
            return found, None
        folder = out_dir / EFFICIENCY_DIR / JOB_DIR
        job_id = self._submit(EfficiencyJob(EfficiencyPlan(plan.setups, device, plan.how), out_dir.resolve()), folder,
                              f"lavo-efficiency-{out_dir.name}", {"what": "efficiency lengths"}, dependency=cells)
        after = ", to start once the cells' jobs have ended" if cells else ""
        click.echo(f"efficiency lengths: submitted as {self.queue.name} job {job_id}{after}; its log in {folder}",
                   err=True)
        return found, job_id

    def _wait_efficiency(self, plan: EfficiencyPlan, out_dir: Path, job_id: str) -> dict[str, dict[str, Any]]:
        while _is_live(self.queue.states([job_id]).get(job_id)):
            time.sleep(POLL_S)
        _refreshed(out_dir / EFFICIENCY_DIR)
        found, todo = cached_efficiency(plan.setups, out_dir, self._efficiency_device(plan), plan.how, echo=False)
        if todo:
            click.echo(f"efficiency lengths: {self.queue.name} job {job_id} ended without measuring "
                       f"{', '.join(label for rows in todo.values() for label, _ in rows)} (its log is in "
                       f"{out_dir / EFFICIENCY_DIR / JOB_DIR}); the table shows n/a for them, and the same command "
                       "submits the job again", err=True)
        return found
