"""Long preparation is announced before it starts and timed once done, so a slow first run never looks hung."""
import time

from lavo_zoo.cli import main
from lavo_zoo.engine.logging import phase
from tests.helpers import TOY


def test_phase_announces_first_and_reports_the_time_of_slow_work_only():
    lines = []
    with phase("tokenizing", say=lines.append, quiet_below=0.05):
        assert lines == ["tokenizing ..."]  # said before the work, not after
        time.sleep(0.06)
    assert lines[1].startswith("tokenizing: done in ") and lines[1].endswith(" s")
    with phase("quick", say=lines.append, quiet_below=60):
        pass
    assert lines[2:] == ["quick ..."]
    with phase("silent", enabled=False, say=lines.append, quiet_below=0):
        pass
    assert len(lines) == 3


def test_train_says_it_is_preparing_the_data_before_the_first_step(tmp_path, capsys):
    assert main(["train", TOY, "--out", str(tmp_path / "r"), "--max-steps", "2", "train.eval_every=2",
                 "train.log_every=1"]) == 0
    err = capsys.readouterr().err
    assert err.index("preparing the training split") < err.index("step 1/2") < err.index(
        "preparing the validation split") < err.index("step 2 validation")
