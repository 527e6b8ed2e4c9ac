"""Distributed training (engine/distributed.py): two CPU processes under torchrun (gloo) train with
DistributedDataParallel; only rank 0 writes. The same under a Slurm job (docs/slurm/train.sbatch: srun + torchrun, the
rendezvous from Slurm's environment), where one answers."""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import RUNNER, TOY, slurm_missing, weights

pytestmark = pytest.mark.slow


def test_torchrun_two_processes_train_and_write_one_checkpoint(tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not on PATH")
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [torchrun, "--nproc-per-node", "2", "--master-port", "0", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", "127.0.0.1:0", RUNNER, "train", TOY, "train.max_steps=4", "train.save_every=4",
           "train.eval_every=0", "--out", str(out), "--device", "cpu"]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    ck = out / "checkpoints"
    assert sorted(p.name for p in ck.iterdir()) == ["last", "step-4"]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2, 4]  # written once, by rank 0 only
    assert result.stderr.count("saved ") == 1
    meta = json.loads((ck / "step-4" / "meta.json").read_text())
    assert meta["step"] == 4
    import torch
    state = torch.load(ck / "step-4" / "train_state.pt", weights_only=True)
    assert state["world_size"] == 2 and len(state["rng"]) == 2  # both ranks' RNG for exact resume
    assert all(t.isfinite().all() for t in weights(ck / "step-4").values())


def squeue_state(job: str) -> str | None:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"], capture_output=True, text=True,
                         check=False).stdout.strip()
    return out or None


def test_the_sbatch_script_trains_one_run_over_the_jobs_processes(tmp_path):
    """docs/slurm/train.sbatch on the one-node cluster with two CPU processes: torchrun finds its rendezvous from
    Slurm's environment, and the run's checkpoint holds both ranks (it continues only with them)."""
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)
    script = Path(__file__).resolve().parents[2] / "docs" / "slurm" / "train.sbatch"
    out, log = tmp_path / "ddp", tmp_path / "job.out"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # the venv active
    cmd = ["sbatch", "--parsable", "--nodes", "1", "--cpus-per-task", "1", "--time", "10", "--output", str(log),
           "--export", "ALL,NPROC_PER_NODE=2", str(script), "time_series/tiny-lavo", "--out", str(out), "--device",
           "cpu", "--max-steps", "4", "train.eval_every=0", "train.save_every=4"]
    job = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=True).stdout
    job = job.strip().split(";")[0]
    deadline = time.monotonic() + 300  # sbatch --wait would look at the job ever more rarely: look every 0.5 s
    while (state := squeue_state(job)) not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", None):
        assert time.monotonic() < deadline, f"job {job} is still {state}"
        time.sleep(0.5)
    text = log.read_text() if log.exists() else ""
    assert state == "COMPLETED", f"job {job} {state}: {text}"
    assert "1 node(s) x 2 process(es)" in text
    import torch
    state = torch.load(out / "checkpoints" / "step-4" / "train_state.pt", weights_only=True)
    assert state["world_size"] == 2 and state["step"] == 4
