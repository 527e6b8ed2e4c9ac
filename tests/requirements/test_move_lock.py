"""requirements/move_lock.py, with its commands answered by a fake runner (a real run makes a 6 GB environment and
runs the whole suite): the lock is rewritten from the environment's freeze only when the suite passes, the suite is
the README's test command pointed at the candidate lock, a move keeps every other package as locked, and a failure
at any step leaves the lock byte for byte as it was."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from lavo_zoo import lockfile

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def move_lock() -> ModuleType:
    spec = importlib.util.spec_from_file_location("move_lock", ROOT / "requirements" / "move_lock.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["move_lock"] = module
    spec.loader.exec_module(module)
    return module


OLD = ("# old\n# for: Python 3.11 on Linux x86_64\nclick==8.5.1\nnumpy==2.4.6\npip==23.2.1\ntorch==2.11.0\n\n"
       "# extra: fla\nfla-core==0.6.0\n")
FREEZE = "Click==8.5.1\nlavo_zoo==0.1.0\nnumpy==2.4.7\npip==23.2.1\nrich==15.0.0\ntorch==2.11.0\n"


class FakeRunner:
    """Answers each step as pip, venv and the suite would, recording the commands; ``fail`` names a step that
    fails (venv, install, freeze, extra, suite)."""

    def __init__(self, fail: str | None = None, freeze: str = FREEZE) -> None:
        self.fail, self.freeze, self.calls = fail, freeze, []

    def run(self, cmd, env=None, capture=False, cwd=ROOT):
        import subprocess

        self.calls.append((cmd, env))
        text = cmd if isinstance(cmd, str) else " ".join(cmd)
        step = ("venv" if " -m venv " in text else "extra" if "--dry-run" in text else "freeze" if " freeze " in text
                else "probe" if "platform.machine()" in text else "install" if " install " in text else "suite")
        out = ""
        if step == "venv":
            Path(cmd[-1]).mkdir(parents=True, exist_ok=True)
        elif step == "freeze":
            out = self.freeze
        elif step == "probe":
            out = "3.11 Linux x86_64\n"
        elif step == "extra":
            report = Path(cmd[cmd.index("--report") + 1])
            report.write_text(json.dumps({"install": [
                {"metadata": {"name": n, "version": v}} for n, v in
                [("lavo-zoo", "0.1.0"), ("fla-core", "0.6.0"), ("flash-linear-attention", "0.6.0"),
                 ("numpy", "2.4.7")]]}))
        elif step == "suite":
            self.suite_lock = Path(env["LAVO_ZOO_LOCK"]).read_text()  # what the suite was pointed at
        return subprocess.CompletedProcess(cmd, 1 if step == self.fail else 0, out, "boom" if step == self.fail
                                           else "")


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    lock = tmp_path / "lock.txt"
    lock.write_text(OLD)
    return lock, tmp_path / "venv"


def test_the_suite_passing_writes_the_freeze_as_the_lock(move_lock: ModuleType, tmp_path: Path) -> None:
    lock, venv = _setup(tmp_path)
    runner = FakeRunner()
    moved = move_lock.move_lock(lock, {}, venv, runner)
    new = lockfile.read_lock(lock)
    assert new.pins == {"click": "8.5.1", "numpy": "2.4.7", "pip": "23.2.1", "rich": "15.0.0", "torch": "2.11.0"}
    assert new.extras == {"fla": {"fla-core": "0.6.0", "flash-linear-attention": "0.6.0"}}  # numpy: installed set
    assert (new.python, new.system) == ("3.11", "Linux x86_64")
    assert moved == ["numpy 2.4.6 -> 2.4.7", "flash-linear-attention 0.6.0 (new)", "rich 15.0.0 (new)"]
    assert runner.suite_lock == lock.read_text()  # the suite checked exactly what became the lock
    install = next(c for c, _ in runner.calls if isinstance(c, list) and "install" in c and "--dry-run" not in c)
    assert install[-2:] == ["-e", f"{ROOT}[dev]"] and "eager" in install and "-c" not in install
    suite, env = runner.calls[-1]
    assert suite == move_lock.suite_command(venv) and f"{venv}/bin/python -m pytest" in suite
    assert env["PATH"].startswith(str(venv / "bin"))
    assert not list(tmp_path.glob(".lock.txt*"))  # no staging file left


@pytest.mark.parametrize("step", ["venv", "install", "freeze", "extra", "suite"])
def test_a_failing_step_leaves_the_lock_as_it_was(move_lock: ModuleType, tmp_path: Path, step: str) -> None:
    lock, venv = _setup(tmp_path)
    with pytest.raises(move_lock.MoveError, match="failed|does not resolve"):
        move_lock.move_lock(lock, {}, venv, FakeRunner(fail=step))
    assert lock.read_text() == OLD
    assert not list(tmp_path.glob(".lock.txt*"))


def test_a_freeze_with_a_package_from_a_path_is_not_locked(move_lock: ModuleType, tmp_path: Path) -> None:
    lock, venv = _setup(tmp_path)
    runner = FakeRunner(freeze=FREEZE + "torchvision @ file:///opt/wheels/tv.whl\n")
    with pytest.raises(move_lock.MoveError, match="not a release from the index"):
        move_lock.move_lock(lock, {}, venv, runner)
    assert lock.read_text() == OLD


def test_moving_one_package_keeps_the_rest_as_locked(move_lock: ModuleType, tmp_path: Path) -> None:
    lock, venv = _setup(tmp_path)
    runner = FakeRunner()
    move_lock.move_lock(lock, move_lock.parse_moves(["NumPy==2.4.7"]), venv, runner)
    install = next(c for c, _ in runner.calls if isinstance(c, list) and "install" in c and "--dry-run" not in c)
    assert install[-1] == "numpy==2.4.7" and "eager" not in install
    constraints = install[install.index("-c") + 1]
    # the constraints file is gone with the work folder; what it held is the lock's installed set without numpy
    assert move_lock.constraints_without(lockfile.read_lock(lock), {"numpy": None}, tmp_path / "c.txt").read_text() \
        == "click==8.5.1\npip==23.2.1\nrich==15.0.0\ntorch==2.11.0\n"
    assert constraints.endswith("constraints.txt")


def test_bad_moves_and_a_used_folder_are_refused(move_lock: ModuleType, tmp_path: Path) -> None:
    for bad in ["numpy>=2", "numpy==", "", "x @ file:///a"]:
        with pytest.raises(move_lock.MoveError, match="give a package name"):
            move_lock.parse_moves([bad])
    lock, venv = _setup(tmp_path)
    venv.mkdir()
    (venv / "x").write_text("")
    with pytest.raises(move_lock.MoveError, match="not empty"):
        move_lock.move_lock(lock, {}, venv, FakeRunner())
    with pytest.raises(move_lock.MoveError, match="needs a lock to start from"):
        move_lock.move_lock(tmp_path / "none.txt", {"numpy": None}, tmp_path / "v2", FakeRunner())


def test_the_suite_is_the_readmes_test_command(move_lock: ModuleType) -> None:
    install, *tests = move_lock.readme_commands()
    assert lockfile.INSTALL_COMMAND in install
    assert move_lock.suite_command(Path("/v")) == " && ".join(t.replace(".venv/bin/", "/v/bin/") for t in tests)
    assert "pytest" in move_lock.suite_command(Path("/v")) and ".venv" not in move_lock.suite_command(Path("/v"))


def test_main_says_what_moved_and_fails_with_one_line(move_lock: ModuleType, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    lock, venv = _setup(tmp_path)
    assert move_lock.main(["--lock", str(lock), "--venv", str(venv)], runner=FakeRunner()) == 0
    out = capsys.readouterr().out
    assert f"the suite passed; wrote {lock}: 3 moved" in out and "  numpy 2.4.6 -> 2.4.7" in out
    lock.write_text(OLD)
    assert move_lock.main(["--lock", str(lock), "--venv", str(tmp_path / "v3")], runner=FakeRunner("suite")) == 1
    err = capsys.readouterr().err
    assert err.startswith("move_lock: the suite failed with the new set; the lock is unchanged")
    assert lock.read_text() == OLD


def test_a_lock_that_cannot_be_read_or_a_move_it_does_not_name_is_refused(move_lock: ModuleType,
                                                                         tmp_path: Path) -> None:
    """Found by the sweep: an unreadable lock (a range line, bytes that are not UTF-8) raised a raw LockFileError or
    UnicodeDecodeError traceback; a --venv that is a file, a raw NotADirectoryError; NAME==1==2 and a package the lock
    does not name were taken (pip would install the package and the lock would name what the README's install does
    not bring)."""
    lock, venv = _setup(tmp_path)
    for bad in ["numpy==2==3", "numpy==2.0=1"]:
        with pytest.raises(move_lock.MoveError, match="give a package name"):
            move_lock.parse_moves([bad])
    with pytest.raises(move_lock.MoveError, match=r"--move left-pad: not in the lock"):
        move_lock.move_lock(lock, {"left-pad": None}, venv, FakeRunner())
    (tmp_path / "file").write_text("")
    with pytest.raises(move_lock.MoveError, match="is a file or is not empty"):
        move_lock.move_lock(lock, {}, tmp_path / "file", FakeRunner())
    with pytest.raises(move_lock.MoveError, match="is not a file"):
        move_lock.move_lock(tmp_path, {}, venv, FakeRunner())
    for text in (b"numpy>=2\n", b"\xff\xfenumpy==1\n"):
        lock.write_bytes(text)
        with pytest.raises(move_lock.MoveError, match="--move keeps the other packages as locked, and the lock cannot"):
            move_lock.move_lock(lock, {"numpy": None}, venv, FakeRunner())
        assert lock.read_bytes() == text
    # without --move the script is what rewrites a broken lock: it writes every package afresh
    assert move_lock.main(["--lock", str(lock), "--venv", str(venv)], runner=FakeRunner()) == 0
    assert lockfile.read_lock(lock).pins["numpy"] == "2.4.7"
