"""``--launcher local``: cells at once on this machine, each in a process of its own, with the same results as a
serial study; a failed cell is reported with its log while the others go on, and the same command runs it again."""
from __future__ import annotations

import csv
import json
import os
import signal
import threading
import time

import pytest

from lavo_zoo.compare.local import LocalLauncher, Slot, exit_reason, plan_slots, shares_cores
from tests.compare.helpers import ROOT, small_study


@pytest.fixture
def cell_processes(monkeypatch):
    """The cells' processes import the test recipe (tests.compare.helpers) from the repository."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def test_a_local_study_equals_the_serial_one_cell_for_cell(study, tmp_path, cell_processes):
    serial = small_study(study, tmp_path / "serial")
    local = small_study(study, tmp_path / "local", launcher=LocalLauncher(jobs=2, device="cpu"))
    assert [(r.attention, r.seed) for r in local] == [(r.attention, r.seed) for r in serial]
    for a, b in zip(serial, local):  # the same weights, scored the same, whichever launcher ran the cell
        assert b.metrics == a.metrics and b.checkpoint_sha256 == a.checkpoint_sha256, (a.attention, a.seed)
        assert a.launch["launcher"] == "serial"
        shared = {"cores_shared": True} if len(os.sched_getaffinity(0)) < 2 else {}
        assert b.launch == {"launcher": "local", "cells_at_once": 2, "threads": b.launch["threads"],
                            "host": a.launch["host"], **shared} and b.launch["threads"] >= 1
    job = json.loads((tmp_path / "local" / "cells" / "sdpa-seed1" / "job.json").read_text())
    assert job["cores"] and job["threads"] == len(job["cores"])  # the cell's process was given its cores
    log = (tmp_path / "local" / "cells" / "sdpa-seed1" / "cell.log").read_text()
    assert "RuntimeWarning" not in log and "step 3/3" in log  # runpy's warning headed every cell's log


def test_a_failed_cell_is_reported_the_others_go_on_and_it_goes_again(study, tmp_path, cell_processes, capsys):
    from lavo_zoo.cli import main

    out = tmp_path / "cmp"
    args = ["compare", str(study), "--attentions", "sdpa,local", "-o", "local.window_size=3", "--out", str(out),
            "--device", "cpu", "--no-efficiency"]
    assert main([*args, "--jobs", "2"]) == 2  # --jobs belongs to --launcher local
    assert "--jobs is an option of --launcher local" in capsys.readouterr().err
    assert main([*args, "--launcher", "local", "--jobs", "2", "--partition", "gpu"]) == 2
    assert "--partition is an option of --launcher slurm" in capsys.readouterr().err
    assert not (out / "cells").exists()

    broken = out / "cells" / "local-seed1" / "checkpoints" / "best"
    broken.mkdir(parents=True)  # a run that left only checkpoints/best cannot be resumed: this cell fails
    assert main([*args, "--launcher", "local", "--jobs", "2"]) == 1
    err = capsys.readouterr().err
    assert "2 cell(s) to train, 2 at once" in err
    assert f"local-seed1: its process exited with code 2; its log: {out / 'cells' / 'local-seed1' / 'cell.log'}" in err
    assert "no checkpoint to continue from" in err  # the last lines of its log
    rows = list(csv.DictReader((out / "table.csv").open()))
    assert [r["attention"] for r in rows] == ["sdpa"]  # the other cell finished, and is in the table
    assert "(1 of 2 cells finished)" in (out / "table.md").read_text()

    broken.rmdir()
    kept = (out / "cells" / "sdpa-seed1" / "cell.json").read_text()
    assert main([*args, "--launcher", "local", "--jobs", "2"]) == 0
    assert "1 cell(s) to train, 1 at once" in capsys.readouterr().err
    assert (out / "cells" / "sdpa-seed1" / "cell.json").read_text() == kept  # finished earlier, kept
    rows = {row["attention"]: row for row in csv.DictReader((out / "table.csv").open())}
    assert set(rows) == {"sdpa", "local"}
    assert "2 at once" in (out / "table.md").read_text()  # the step times' note: cells shared the machine


def test_sigterm_stops_the_running_cells_at_a_step_and_the_same_command_continues(study, tmp_path, cell_processes,
                                                                                    capsys):
    from lavo_zoo.cli import main

    out = tmp_path / "cmp"
    args = ["compare", str(study), "--attentions", "sdpa", "--seeds", "1,2", "--out", str(out), "--device", "cpu",
            "--no-efficiency", "--launcher", "local", "--jobs", "2", "train.max_steps=12", "model.step_sleep_s=0.2"]
    cells = [out / "cells" / f"sdpa-seed{seed}" for seed in (1, 2)]
    deadline = time.monotonic() + 120

    def stop_once_both_train():
        while not all((cell / "checkpoints" / "step-2").is_dir() for cell in cells):
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler stops the study's process

    threading.Thread(target=stop_once_both_train, daemon=True).start()
    assert main(args) == 143
    assert "SIGTERM: the study stopped; the running cells (sdpa-seed1, sdpa-seed2) saved their step" in \
        capsys.readouterr().err
    for cell in cells:  # each cell's process got one SIGTERM: it ended its step, saved it and stopped
        assert "SIGTERM: training stopped at step" in (cell / "cell.log").read_text()
        assert not (cell / "cell.json").exists()
    assert main(args) == 0
    for cell in cells:
        log = (cell / "cell.log").read_text()
        assert "resumed from" in log and (cell / "cell.json").is_file()


def test_slots_divide_the_gpus_and_the_cores():
    cores = [0, 1, 2, 3, 4, 5, 6, 7]
    assert plan_slots(2, 1, [], cores, cells=6) == [Slot((0, 1, 2, 3)), Slot((4, 5, 6, 7))]
    assert plan_slots(None, 1, [], cores, cells=6) == [Slot((0, 1, 2, 3)), Slot((4, 5, 6, 7))]  # a cell per 4 cores
    assert len(plan_slots(8, 1, [], cores, cells=3)) == 3  # never more slots than cells
    assert plan_slots(3, 1, [], [0, 1], cells=3) == [Slot((0,)), Slot((1,)), Slot((0,))]  # more cells than cores
    assert plan_slots(None, 1, ["0", "1"], cores, cells=9) == [Slot((0, 1, 2, 3), "0"), Slot((4, 5, 6, 7), "1")]
    assert [s.gpu for s in plan_slots(None, 2, ["3", "5"], cores, cells=9)] == ["3", "3", "5", "5"]
    assert plan_slots(None, 2, ["3", "5"], cores, cells=9)[1].describe() == "GPU 3, cores 2-3"
    from lavo_zoo.errors import UsageError
    with pytest.raises(UsageError, match=r"--jobs 3: .*2 GPU\(s\) are visible.*--cells-per-gpu 2"):
        plan_slots(3, 1, ["0", "1"], cores, cells=9)
    with pytest.raises(UsageError, match="--cells-per-gpu 2: the cells run on the CPU"):
        plan_slots(None, 2, [], cores, cells=9)


def test_a_killed_cell_says_what_killed_it_and_shared_cores_are_said():
    """A cell killed by the out-of-memory killer said only 'exited with code -9'; --jobs above the core count still
    said each cell had cores of its own."""
    from lavo_zoo.compare import CellRecord
    from lavo_zoo.compare.table import table_text

    assert exit_reason(2) == "its process exited with code 2"
    assert exit_reason(-9).startswith("its process was killed by SIGKILL (signal 9): by the system's out-of-memory "
                                      "killer (see `dmesg`")
    assert exit_reason(-15).startswith("its process was killed by SIGTERM (signal 15)")
    assert shares_cores(plan_slots(3, 1, [], [0, 1], cells=3)) and not shares_cores(plan_slots(2, 1, [], [0, 1], 3))

    def note(**launch):
        records = [CellRecord(attention="sdpa", seed=s, metrics={"mse": {"value": float(s), "higher_is_better": False}},
                              launch={"launcher": "local", "cells_at_once": 3, **launch}) for s in (1, 2, 3)]
        return table_text(records, "t")

    assert "each on cores of its own" in note() and "shared their cores" not in note()
    assert "shared their cores" in note(cores_shared=True) and "cores of its own" not in note(cores_shared=True)
    assert "more cells than the machine had cores for" in note(cores_shared=True)
