"""The queue a Slurm study's jobs go to: Slurm itself (:class:`SlurmQueue`: sbatch through submitit's
``SlurmExecutor``, squeue, scancel, sacct), or submitit's local executor in its place (:class:`LocalQueue`: the
launcher's tests where no cluster runs); what a job's state says (:func:`is_live`, :func:`never_starts`); and how the
launcher looks again (:func:`pause`, :func:`refreshed`)."""
from __future__ import annotations

import getpass
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from lavo_zoo.compare.launchers import LauncherSettings
from lavo_zoo.compare.slurm.options import slurm_minutes
from lavo_zoo.errors import UsageError, ZooError

SUBMITIT_LOGGING = "SUBMITIT_LOG_LEVEL"  # submitit reads it on import ("NOCONFIG": no logging set-up)
POLL_S = 10.0  # between two looks at the queue while waiting
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
        """submitit's ``SlurmExecutor`` parameters of one job: the study's sbatch options, requeueable.

        Args:
            settings: the study's launcher settings.
            name: the job's name.
            dependency: the jobs it starts after (any end).
        """
        s = settings
        extra = {"requeue": True, **{k.replace("_", "-"): v for k, v in s.slurm_options.items()}}
        options = {"job_name": name, "time": slurm_minutes(s.time), "partition": s.partition, "mem": s.mem,
                   "cpus_per_task": s.cpus_per_cell, "gpus_per_node": s.gpus_per_cell or None, "account": s.account,
                   "qos": s.qos, "constraint": s.constraint, "additional_parameters": extra,
                   "dependency": "afterany:" + ":".join(dependency) if dependency else None}
        return {k: v for k, v in options.items() if v is not None}

    def executor(self, folder: Path, settings: LauncherSettings, name: str, dependency: list[str]) -> Any:
        """A submitit executor for one job (:meth:`parameters`).

        Args:
            folder: where submitit keeps the job's files.
            settings: the study's launcher settings.
            name: the job's name.
            dependency: the jobs it starts after (any end).
        """
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
        """A submitit local executor for one job; its arguments are stated on `SlurmQueue.executor` (``name`` and
        ``dependency`` unused: a local job cannot wait for others)."""
        executor = submitit().LocalExecutor(folder=folder, max_num_timeout=settings.max_requeues)
        executor.update_parameters(timeout_min=slurm_minutes(settings.time), gpus_per_node=settings.gpus_per_cell or 0)
        return executor

    def states(self, job_ids: list[str]) -> dict[str, str]:
        return {job_id: "RUNNING" for job_id in job_ids if process_runs(int(job_id))}

    def cancel(self, job_id: str) -> None:
        import os
        import signal

        try:
            os.kill(int(job_id), signal.SIGTERM)
        except ProcessLookupError:
            pass
        process_runs(int(job_id))  # reaped once it has ended

    def ended(self, job_id: str) -> str:
        return "ended"


Queue = SlurmQueue | LocalQueue


def process_runs(pid: int) -> bool:
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


def is_live(state: str | None) -> bool:
    """Whether a job in ``state`` (as :meth:`SlurmQueue.states` gives it; None: no longer known) may still run."""
    return state is not None and state.split()[0] not in ENDED and never_starts(state) is None


def never_starts(state: str | None) -> str | None:
    """Why a pending job (its state as :meth:`SlurmQueue.states` gives it) will not start, or None."""
    reason = (state or "").partition("(")[2].rstrip(")")
    return f"Slurm holds it as {reason}: {NEVER_STARTS[reason]}" if reason in NEVER_STARTS else None


def pause() -> None:
    """Wait between two looks at the queue (:data:`POLL_S`)."""
    time.sleep(POLL_S)


def refreshed(folder: Path) -> None:
    """Make a shared filesystem show the folder's current entries (a change of its attributes drops the cached
    listing; submitit does the same)."""
    try:
        folder.chmod(folder.stat().st_mode)
    except OSError:
        pass
