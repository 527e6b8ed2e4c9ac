"""The queue of a Slurm study's jobs (compare/slurm/queue.py): the sbatch lines a cell's job gets from the
launcher's settings."""
from __future__ import annotations

from lavo_zoo.compare.launchers import LauncherSettings


def test_a_cells_sbatch_script_carries_the_studys_options(tmp_path):
    """What submitit writes for a cell's job from the settings (no cluster needed to write it)."""
    from lavo_zoo.compare.slurm.queue import SlurmQueue, submitit

    _make_sbatch_string = submitit().slurm.slurm._make_sbatch_string

    settings = LauncherSettings(name="slurm", partition="gpu", gpus_per_cell=2, cpus_per_cell=8, mem="64G",
                                time="12:00:00", account="proj", qos="high", constraint="a100",
                                slurm_options={"mail_type": "END", "exclusive": True})
    script = _make_sbatch_string(command="python -m x", folder=tmp_path,
                                 **SlurmQueue.parameters(settings, "lavo-sdpa-seed1", ["41", "42"]))
    lines = set(script.splitlines())
    for expected in ("--partition=gpu", "--gpus-per-node=2", "--cpus-per-task=8", "--mem=64G", "--time=720",
                     "--account=proj", "--qos=high", "--constraint=a100", "--mail-type=END", "--exclusive",
                     "--requeue", "--job-name=lavo-sdpa-seed1", "--dependency=afterany:41:42", "--signal=USR2@90"):
        assert f"#SBATCH {expected}" in lines, (expected, script)
    assert f"#SBATCH --output={tmp_path}/%j_0_log.out" in lines  # the log in the cell's folder
    bare = SlurmQueue.parameters(LauncherSettings(name="slurm", time=30), "x", [])
    assert bare == {"job_name": "x", "time": 30, "additional_parameters": {"requeue": True}}
