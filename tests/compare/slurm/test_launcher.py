"""``--launcher slurm``: the launcher's code through submitit's local executor (jobs as processes of this machine:
everywhere), then against a real Slurm (a one-node cluster on this machine: ``.ci/slurm-cluster start``; CI starts
one): a study's cells as jobs with the same results as a serial study, a failed cell reported with its job and log
while the others go on, a requeued cell (Slurm's SIGTERM, and submitit's signal before the time limit) resuming to the
result of an uninterrupted run, and ``--no-wait`` then the same command collecting. Where Slurm is absent those tests
skip, saying why; the launcher's options and sbatch lines are tested in tests/compare/slurm/test_options.py and
test_queue.py."""
from __future__ import annotations

import csv
import json
import subprocess
import time
from pathlib import Path

import pytest

from lavo_zoo.compare.launchers import LauncherSettings
from lavo_zoo.compare.outcomes import CellsFailed
from lavo_zoo.compare.slurm import queue as slurm_queue
from lavo_zoo.compare.slurm.launcher import SlurmLauncher
from lavo_zoo.compare.slurm.queue import LocalQueue
from lavo_zoo.engine.records import CellRecord
from tests.compare.helpers import ROOT, TINY_EFFICIENCY, small_study
from tests.helpers import slurm_missing


@pytest.fixture
def jobs(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the jobs import the test recipe (tests.compare.helpers)
    monkeypatch.setattr(slurm_queue, "POLL_S", 0.5)


@pytest.fixture
def slurm(jobs):
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)


def squeue(job_id: str) -> str | None:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], capture_output=True, text=True,
                         check=False).stdout.strip()
    return out or None


def wait_for(condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def requeued_and_released(job_id: str) -> None:
    """Wait for a requeued job to be queued again, and let it start now (Slurm holds a requeued job ~2 minutes)."""
    wait_for(lambda: squeue(job_id) == "PENDING", f"job {job_id} to be queued again")
    subprocess.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"], check=True)


def records(out: Path) -> list[CellRecord]:
    return [CellRecord.from_json(json.loads(p.read_text())) for p in sorted(out.glob("cells/*/cell.json"))]


def job_of(out: Path, cell: str) -> str:
    return json.loads((out / "cells" / cell / "slurm" / "job.json").read_text())["job_id"]


def test_the_launcher_through_submitits_local_executor(study, tmp_path, jobs, capsys):
    """Submitted and returned (--no-wait), the same study again (its running jobs kept, none added), then waited for:
    a failed cell is reported with its job and log while the other finishes, and goes again; the efficiency lengths
    are measured in a job of their own once the cells have ended. The results equal a serial study's."""
    serial = {(r.attention, r.seed): r for r in small_study(study, tmp_path / "serial", seeds=[1])}
    out = tmp_path / "cmp"
    broken = out / "cells" / "local-seed1" / "checkpoints" / "best"
    broken.mkdir(parents=True)  # a run that left only checkpoints/best cannot be resumed: this cell's job fails

    def launcher(**settings):
        return SlurmLauncher(LauncherSettings(name="slurm", time=10, **settings), queue=LocalQueue())

    assert small_study(study, out, seeds=[1], launcher=launcher(wait=False)) == []  # submitted, nothing finished
    first = {cell: job_of(out, cell) for cell in ("sdpa-seed1", "local-seed1")}
    small_study(study, out, seeds=[1], launcher=launcher(wait=False))
    err = capsys.readouterr().err
    assert f"sdpa-seed1: submitit's local executor job {first['sdpa-seed1']} is running, not submitted again" in err
    assert {cell: job_of(out, cell) for cell in first} == first
    with pytest.raises(CellsFailed) as failed:
        small_study(study, out, seeds=[1], launcher=launcher(), efficiency=TINY_EFFICIENCY)
    (failure,) = failed.value.failures
    assert failure.reason == (f"submitit's local executor job {first['local-seed1']} ended without finishing the "
                              "cell") and "no checkpoint to continue from" in failure.tail
    assert [r.attention for r in failed.value.records] == ["sdpa"]
    assert not (out / "efficiency" / "local.json").exists()  # not measured while the study is incomplete

    broken.rmdir()
    found = small_study(study, out, seeds=[1], launcher=launcher(), efficiency=TINY_EFFICIENCY)
    assert job_of(out, "local-seed1") != first["local-seed1"] and job_of(out, "sdpa-seed1") == first["sdpa-seed1"]
    for r in found:
        s = serial[(r.attention, r.seed)]
        assert r.metrics == s.metrics and r.checkpoint_sha256 == s.checkpoint_sha256, r.attention
        assert r.launch["launcher"] == "slurm"
    assert found[0].efficiency == {"is_baseline": True} and found[1].efficiency["swept"] == [8, 64]
    efficiency_job = json.loads((out / "efficiency" / "slurm" / "job.json").read_text())["job_id"]
    assert (out / "efficiency" / "slurm" / f"{efficiency_job}_0_log.err").is_file()  # measured in a job


def metric_columns(out: Path) -> dict[str, dict[str, str]]:
    """A table's metric columns and parameters by row (not its step times, which are timings)."""
    rows = csv.DictReader((out / "table.csv").open())
    return {row["attention"]: {k: v for k, v in row.items() if not k.startswith("step_")} for row in rows}


def test_a_slurm_study_equals_the_local_one_and_a_failed_cell_goes_again(study, tmp_path, slurm, capsys):
    from lavo_zoo.cli import main

    common = ["compare", str(study), "--attentions", "sdpa,local", "-o", "local.window_size=3", "--seeds", "1,2",
              "--device", "cpu", "--no-efficiency"]
    assert main([*common, "--out", str(tmp_path / "local"), "--launcher", "local", "--jobs", "2"]) == 0
    local = {(r.attention, r.seed): r for r in records(tmp_path / "local")}
    out = tmp_path / "slurm"
    broken = out / "cells" / "local-seed1" / "checkpoints" / "best"
    broken.mkdir(parents=True)  # a run that left only checkpoints/best cannot be resumed: this cell's job fails
    args = [*common, "--out", str(out), "--launcher", "slurm", "--time", "10"]
    capsys.readouterr()
    assert main(args) == 1
    err = capsys.readouterr().err
    failed = job_of(out, "local-seed1")
    assert f"local-seed1: Slurm job {failed} ended FAILED without finishing the cell" in err
    assert "no checkpoint to continue from" in err  # the last lines of its log
    assert "(3 of 4 cells finished)" in (out / "table.md").read_text()  # the others went on

    broken.rmdir()
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"Slurm job {failed} ended FAILED" in err and "submitted again" in err
    assert job_of(out, "local-seed1") != failed and job_of(out, "sdpa-seed1") != job_of(out, "sdpa-seed2")
    assert metric_columns(out) == metric_columns(tmp_path / "local")  # the same table
    found = records(out)
    assert len(found) == 4
    for r in found:  # the same weights, scored the same, as the local study's
        other = local[(r.attention, r.seed)]
        assert r.metrics == other.metrics and r.checkpoint_sha256 == other.checkpoint_sha256, (r.attention, r.seed)
        assert r.launch["launcher"] == "slurm" and r.launch["slurm_job"] == job_of(out, f"{r.attention}-seed{r.seed}")
        log = out / "cells" / f"{r.attention}-seed{r.seed}" / "slurm" / f"{r.launch['slurm_job']}_0_log.err"
        assert log.is_file()  # each cell's Slurm log is in its cell folder
    assert "cells finished" not in (out / "table.md").read_text()


def test_a_requeued_cell_resumes_and_ends_as_an_uninterrupted_run(study, tmp_path, slurm, capsys):
    """Stopped twice while it trains: by ``scontrol requeue`` (Slurm's SIGTERM: the trainer saves the step in flight)
    and by submitit's signal before the time limit (``scancel --signal=USR2``: submitit requeues the job). Submitted
    with --no-wait, submitted again while queued (not a second job), then collected by the same command."""
    from lavo_zoo.cli import main

    slow = ["train.max_steps=24", "model.step_sleep_s=0.25"]
    (reference,) = small_study(study, tmp_path / "serial", attentions=["sdpa"], seeds=[1], overrides=slow)
    out = tmp_path / "slurm"
    args = ["compare", str(study), "--attentions", "sdpa", "--out", str(out), "--device", "cpu", "--no-efficiency",
            "--launcher", "slurm", "--time", "10", *slow]
    assert main([*args, "--no-wait"]) == 0
    assert "no cell has finished yet" in capsys.readouterr().out
    job = job_of(out, "sdpa-seed1")
    assert main([*args, "--no-wait"]) == 0  # the same study again: the queued job is kept, none is added
    assert f"Slurm job {job} is " in capsys.readouterr().err and job_of(out, "sdpa-seed1") == job
    checkpoints = out / "cells" / "sdpa-seed1" / "checkpoints"

    wait_for(lambda: (checkpoints / "step-3").is_dir(), "the cell to train 3 steps")
    subprocess.run(["scontrol", "requeue", job], check=True)
    requeued_and_released(job)
    wait_for(lambda: any(int(p.name[5:]) >= 12 for p in checkpoints.glob("step-*")), "the cell to reach step 12")
    subprocess.run(["scancel", "--signal=USR2", job], check=True)
    requeued_and_released(job)

    assert main(args) == 0
    (record,) = records(out)
    assert record.launch["slurm_job"] == job and record.launch["slurm_restarts"] == 2
    log = (out / "cells" / "sdpa-seed1" / "slurm" / f"{job}_0_log.err").read_text()
    assert "SIGTERM: training stopped at step" in log  # the requeue's SIGTERM: the step in flight was saved
    assert "Caught signal SIGUSR2" in log  # submitit's handler, which requeued the job
    assert log.count("resumed from") == 2
    assert record.metrics == reference.metrics and record.checkpoint_sha256 == reference.checkpoint_sha256


class NeverStarts(LocalQueue):
    """submitit's local executor, whose jobs Slurm would hold as pending with a reason that never resolves (what
    squeue says of a job asking for more CPUs than any node has)."""

    def __init__(self):
        self.cancelled = []

    def states(self, job_ids):
        return {job_id: "PENDING (PartitionConfig)" for job_id in job_ids if job_id not in self.cancelled}

    def cancel(self, job_id):
        self.cancelled.append(job_id)
        super().cancel(job_id)


def test_a_job_that_can_never_start_ends_the_wait(study, tmp_path, jobs):
    """A cell's job pending with reason PartitionConfig (more CPUs than any node has) was waited for without end:
    it is cancelled and reported, saying what to change."""
    out = tmp_path / "cmp"
    queue = NeverStarts()
    launcher = SlurmLauncher(LauncherSettings(name="slurm", time=10), queue=queue)
    with pytest.raises(CellsFailed) as failed:
        small_study(study, out, attentions=("sdpa",), seeds=[1], launcher=launcher,
                    overrides=["train.max_steps=50", "model.step_sleep_s=0.5"])
    (failure,) = failed.value.failures
    job = job_of(out, "sdpa-seed1")
    assert failure.reason.startswith(f"submitit's local executor job {job} will not start (Slurm holds it as "
                                     "PartitionConfig: it asks for more CPUs, memory or GPUs than any node of the "
                                     "partition has); it was cancelled. Ask for what the cluster has (--cpus-per-cell")
    assert queue.cancelled == [job]
    wait_for(lambda: not slurm_queue.process_runs(int(job)), "the cancelled job to end", timeout=30)


def test_a_real_job_asking_for_more_cpus_than_the_node_has_is_cancelled(study, tmp_path, slurm, capsys):
    from lavo_zoo.cli import main

    out = tmp_path / "cmp"
    assert main(["compare", str(study), "--attentions", "sdpa", "--out", str(out), "--device", "cpu",
                 "--no-efficiency", "--launcher", "slurm", "--time", "10", "--cpus-per-cell", "1000"]) == 1
    job = job_of(out, "sdpa-seed1")
    assert f"Slurm job {job} will not start (Slurm holds it as PartitionConfig" in capsys.readouterr().err
    wait_for(lambda: squeue(job) in (None, "CANCELLED"), f"job {job} to be cancelled", timeout=30)
