"""Two CPU processes under torchrun (gloo) train with DistributedDataParallel; only rank 0 writes."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import RUNNER, TOY, weights

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
