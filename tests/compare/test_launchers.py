"""The launcher's settings: the config's ``launcher:`` section (compare's, left out of the runs' config) under the
command line's options, each launcher's options refused with another, Slurm's time limits and free options, and the
sbatch lines a cell's job gets."""
from __future__ import annotations

import pytest

from lavo_zoo.compare.launchers import LAUNCHER_SECTION, LauncherSettings, launcher_settings
from lavo_zoo.compare.slurm.options import parse_slurm_options, slurm_minutes
from lavo_zoo.errors import ConfigError, UsageError

NONE_GIVEN = {"name": None, "jobs": None, "partition": None, "time": None, "slurm_options": {}, "wait": None}


def test_the_command_line_goes_over_the_configs_section():
    section = {"name": "slurm", "partition": "gpu", "time": "4:00:00", "gpus_per_cell": 1,
               "slurm_options": {"mail-type": "END"}}
    s = launcher_settings(section, NONE_GIVEN, "cluster.yaml")
    assert (s.name, s.partition, s.time, s.gpus_per_cell, s.wait) == ("slurm", "gpu", "4:00:00", 1, True)
    s = launcher_settings(section, {**NONE_GIVEN, "partition": "debug", "slurm_options": {"exclusive": True},
                                    "wait": False}, "cluster.yaml")
    assert s.partition == "debug" and not s.wait
    assert s.slurm_options == {"mail-type": "END", "exclusive": True}  # free options add up
    s = launcher_settings(section, {**NONE_GIVEN, "name": "local", "jobs": 2}, "cluster.yaml")
    assert (s.name, s.jobs) == ("local", 2)  # the section's cluster settings wait for --launcher slurm
    assert launcher_settings(None, NONE_GIVEN, "c.yaml") == LauncherSettings()  # serial, the default


def test_the_launcher_section_is_compares_and_left_out_of_the_runs_config(tmp_path):
    """A config's ``launcher:`` section says where `compare` runs the cells: `train` and the runs' config.yaml never
    see it, so it cannot make a kept cell look trained otherwise; anything else unknown is still refused. The section
    is compare's, declared in the config-sections entry-point group (the engine names none)."""
    from lavo_zoo.config import to_dict
    from lavo_zoo.engine.configs import CONFIG_SECTIONS, load_config, resolve_config

    assert LAUNCHER_SECTION in CONFIG_SECTIONS, ("compare's launcher: section is not declared: reinstall lavo-zoo "
                                                 "(pip install -e .) so that its entry points are read")
    path = tmp_path / "cluster.yaml"
    path.write_text("extends: time_series/tiny-lavo\nlauncher: {name: slurm, partition: gpu}\n")
    _, cfg = resolve_config(str(path))
    _, plain = resolve_config("time_series/tiny-lavo")
    assert to_dict(cfg) == to_dict(plain)
    assert load_config(path).sections[LAUNCHER_SECTION] == {"name": "slurm", "partition": "gpu"}
    path.write_text("extends: time_series/tiny-lavo\nlaunchers: {name: slurm}\n")
    with pytest.raises(ConfigError, match="unknown config key 'launchers'"):
        resolve_config(str(path))


def test_options_of_another_launcher_and_bad_values_are_refused():
    with pytest.raises(UsageError, match="--jobs is an option of --launcher local.*add --launcher local"):
        launcher_settings(None, {**NONE_GIVEN, "jobs": 2}, "c.yaml")
    with pytest.raises(UsageError, match="--partition is an option of --launcher slurm"):
        launcher_settings({"name": "local"}, {**NONE_GIVEN, "partition": "gpu"}, "c.yaml")
    with pytest.raises(UsageError, match="--slurm-option is an option of --launcher slurm"):
        launcher_settings(None, {**NONE_GIVEN, "slurm_options": {"exclusive": True}}, "c.yaml")
    with pytest.raises(UsageError, match="--no-wait .* goes with --launcher slurm"):
        launcher_settings({"name": "local"}, {**NONE_GIVEN, "wait": False}, "c.yaml")
    with pytest.raises(ConfigError, match=r"unknown config key 'launcher.partiton' in c.yaml, section 'launcher'.*"
                                          r"launcher.partition"):
        launcher_settings({"name": "slurm", "partiton": "gpu"}, NONE_GIVEN, "c.yaml")
    with pytest.raises(ConfigError, match="launcher.name"):
        launcher_settings({"name": "kubernetes"}, NONE_GIVEN, "c.yaml")
    with pytest.raises(ConfigError, match=r"launcher.jobs.*>= 1"):
        launcher_settings({"name": "local", "jobs": 0}, NONE_GIVEN, "c.yaml")
    with pytest.raises(UsageError, match="--time '4 hours'"):
        launcher_settings({"name": "slurm"}, {**NONE_GIVEN, "time": "4 hours"}, "c.yaml")


@pytest.mark.parametrize("value, minutes", [(90, 90), ("90", 90), ("1:30", 2), ("4:00:00", 240), ("2-0", 2880),
                                            ("1-02:30", 1590), ("0-00:00:30", 1), ("1-00:00:00", 1440)])
def test_slurm_time_limits_in_minutes(value, minutes):
    assert slurm_minutes(value) == minutes


@pytest.mark.parametrize("value", ["", "4h", "1:2:3:4", "0", "-5", True])
def test_malformed_time_limits_are_refused(value):
    with pytest.raises(UsageError, match="--time"):
        slurm_minutes(value)


def test_free_sbatch_options():
    assert parse_slurm_options(("exclusive", "mail-type=END", "--comment=a=b")) == {
        "exclusive": True, "mail-type": "END", "comment": "a=b"}
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_slurm_options(("mail-type=",))


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


@pytest.mark.parametrize("section, given, match", [
    (None, {"slurm_options": {"comment": "a\nb"}}, "must be one line"),  # a newline became a line of the script
    (None, {"slurm_options": {"mail type": "END"}}, "letters, digits and dashes"),
    (None, {"slurm_options": {"time": "2:00:00"}}, "give it as --time"),  # two time limits, one silently lost
    (None, {"slurm_options": {"cpus-per-task": "4"}}, "give it as --cpus-per-cell"),
    (None, {"slurm_options": {"output": "x.log"}}, "the launcher sets this sbatch option itself"),
    ({"slurm_options": {"exclusive": False}}, {}, "leave it out"),
    ({"slurm_options": {"mail-type": ["END"]}}, {}, "one line of text"),
    (None, {"mem": "64X"}, "--mem '64X'"),
    (None, {"slurm_options": {"export": "NONE"}}, "export=NONE: a cell's job runs this Python with this environment"),
    ({"slurm_options": {"export": "PATH"}}, {}, "Give export=ALL,NAME=VALUE"),  # ended in submitit's traceback
])
def test_sbatch_options_that_are_not_one_are_refused_before_submitting(section, given, match):
    """Free sbatch options (command line or the config's section) and --mem that sbatch would refuse, or that
    would change the job's script, are refused when the settings are read (the dry run said they checked out)."""
    with pytest.raises(UsageError, match=match):
        launcher_settings({"name": "slurm", **(section or {})}, {**NONE_GIVEN, "time": "1:00:00", **given}, "c.yaml")
    ok = launcher_settings({"name": "slurm"}, {**NONE_GIVEN, "time": "1:00:00", "mem": "16000M",
                                               "slurm_options": {"mail-type": "END", "exclusive": True,
                                                                 "export": "ALL,X=1"}}, "c.yaml")
    assert ok.mem == "16000M" and ok.slurm_options == {"mail-type": "END", "exclusive": True, "export": "ALL,X=1"}
