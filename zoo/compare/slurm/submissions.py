"""Jobs submitted into folders: each folder holds its job's submitit files and Slurm log and, in ``job.json``
(:data:`RECORD`), which job it was given, so that the same command run again finds the job (:class:`Submissions`).
A cell's job records what it computes (:func:`spec_sha256`): a queued job of other settings is not the study's."""
from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lavo_zoo.atomic import write_file
from lavo_zoo.compare.jobs import CellJob
from lavo_zoo.compare.launchers import LauncherSettings
from lavo_zoo.compare.slurm.queue import Queue
from lavo_zoo.errors import UsageError, ZooError

JOB_DIR = "slurm"  # in a cell folder (and in OUT/efficiency/): submitit's files, the job's log, job.json
RECORD = "job.json"


def spec_sha256(job: CellJob) -> str:
    """What a cell's job computes (config, overrides, split, device, ...; not how many threads it has): a queued job
    submitted with another is not the study's any more."""
    spec = {k: v for k, v in job.to_json().items() if k not in ("threads", "cores", "launch")}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


class Submissions:
    """Jobs submitted to ``queue`` with a study's ``settings``, each recorded in its folder."""

    def __init__(self, queue: Queue, settings: LauncherSettings) -> None:
        self.queue, self.settings = queue, settings

    def submit(self, target: Any, folder: Path, name: str, record: dict[str, Any],
               dependency: list[str] | None = None) -> str:
        """Submit ``target`` (a callable submitit pickles) as a job whose files are in ``folder``; its id is written
        in ``folder/job.json`` with ``record``, and returned.

        Args:
            target: what the job runs.
            folder: the job's folder.
            name: the job's name.
            record: what ``job.json`` says of the job besides its id and when it was submitted.
            dependency: the jobs it starts after (any end).

        Raises:
            UsageError: an option submitit does not know.
            ZooError: the queue refused the job (a partition, an account, a time limit).
        """
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
    def recorded(folder: Path) -> dict[str, Any] | None:
        """What ``folder/job.json`` records of the folder's job (with its ``job_id``), or None."""
        try:
            data = json.loads((folder / RECORD).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and "job_id" in data else None
