"""The sbatch option rules (compare/slurm/options.py), checked before submitit is imported: Slurm's time limits in
minutes, free sbatch options, and the options sbatch would refuse or that would change a job's script refused when the
launcher's settings are read."""
from __future__ import annotations

import pytest

from lavo_zoo.compare.launchers import launcher_settings
from lavo_zoo.compare.slurm.options import parse_slurm_options, slurm_minutes
from lavo_zoo.errors import UsageError
from tests.compare.helpers import NONE_GIVEN


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
