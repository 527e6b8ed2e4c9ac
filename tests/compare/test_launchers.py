"""The launcher's settings (compare/launchers.py): the config's ``launcher:`` section (compare's, left out of the runs'
config) under the command line's options, each launcher's options refused with another. Slurm's time limits, free
options and the sbatch lines a cell's job gets: tests/compare/slurm/."""
from __future__ import annotations

import pytest

from lavo_zoo.compare.launchers import LAUNCHER_SECTION, LauncherSettings, launcher_settings, with_options
from lavo_zoo.errors import ConfigError, UsageError
from tests.compare.helpers import NONE_GIVEN


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
    assert load_config(path).settings[LAUNCHER_SECTION] == LauncherSettings(name="slurm", partition="gpu")
    path.write_text("extends: time_series/tiny-lavo\nlauncher: {name: slurm, partiton: gpu}\n")
    with pytest.raises(ConfigError, match=rf"'launcher.partiton' in {path}, section 'launcher'"):
        load_config(path)  # refused where the config is read, before the study is built
    path.write_text("extends: time_series/tiny-lavo\nlaunchers: {name: slurm}\n")
    with pytest.raises(ConfigError, match="unknown config key 'launchers'"):
        resolve_config(str(path))


def test_the_command_line_goes_over_the_sections_settings_as_read():
    """The command takes the section as the config's reading validated it: the command line's values over it, each
    checked."""
    base = LauncherSettings(name="slurm", partition="gpu", slurm_options={"mail-type": "END"})
    s = with_options(base, {**NONE_GIVEN, "time": "1:00:00", "slurm_options": {"exclusive": True}})
    assert (s.name, s.partition, s.time) == ("slurm", "gpu", "1:00:00")
    assert s.slurm_options == {"mail-type": "END", "exclusive": True} and base.slurm_options == {"mail-type": "END"}
    assert with_options(None, NONE_GIVEN) == LauncherSettings()
    with pytest.raises(ConfigError, match=r"'launcher.jobs' in the command line's launcher options must be >= 1"):
        with_options(None, {**NONE_GIVEN, "name": "local", "jobs": 0})


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
