"""One cell as a job: it works only under its cell's lock, so a cell another process is training is waited for and
kept, never trained a second time; its process runs from a job file."""
from __future__ import annotations

import json
import subprocess
import sys

from lavo_zoo.compare import locks
from lavo_zoo.compare.jobs import CellJob, main, recipe_target
from lavo_zoo.engine.configs import load_config
from lavo_zoo.engine.recipe import get_recipe
from tests.compare.helpers import SeqRecipe

WRITE_AFTER = ("import json, sys, time; from lavo_zoo.compare.locks import FolderLock\n"
               "with FolderLock(sys.argv[1] + '/.cell.lock'):\n"
               "    print('held', flush=True); time.sleep(0.5)\n"
               "    open(sys.argv[1] + '/cell.json', 'w').write(sys.argv[2])\n")


def cell_job(study, cell_dir) -> CellJob:
    loaded = load_config(study)
    return CellJob(config=str(study), config_data=loaded.data, config_file=loaded.source,
                   overrides=["model.attention.name=sdpa", "train.seed=1"], cell_dir=str(cell_dir),
                   attention="sdpa", seed=1, split="test", device="cpu",
                   recipe=recipe_target(get_recipe("compare_toy")))


def test_a_cell_another_process_works_on_is_waited_for_and_kept(study, tmp_path, monkeypatch):
    monkeypatch.setattr(locks, "POLL_S", 0.1)
    record = cell_job(study, tmp_path / "a" / "sdpa-seed1")()  # trained here
    assert SeqRecipe.calls == 3 and record["launch"]["host"]
    SeqRecipe.calls = 0
    other = tmp_path / "b" / "sdpa-seed1"
    other.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", WRITE_AFTER, str(other), json.dumps(record)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    assert cell_job(study, other)() == record  # waited for the other process, then kept what it wrote
    assert proc.wait() == 0 and SeqRecipe.calls == 0  # nothing was trained here
    assert not (other / "checkpoints").exists()


def test_a_cells_process_runs_its_job_file(study, tmp_path, capsys):
    assert main([]) == 2 and "usage: python -m lavo_zoo.compare.jobs" in capsys.readouterr().err
    job = cell_job(study, tmp_path / "sdpa-seed1")
    job.overrides = [*job.overrides, "train.max_steps=0"]  # refused by the trainer: a usage error, exit 2
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(job.to_json()))
    assert CellJob.from_file(spec) == job
    assert main([str(spec)]) == 2
    assert "train.max_steps" in capsys.readouterr().err  # the config's own message, as `lavo-zoo` prints it
