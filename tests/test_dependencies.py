"""The tested dependency set: pyproject.toml's ranges, the lock (requirements/lock.txt) inside them, this
environment checked against the lock and no other list, and the one import of torchaudio: a torchaudio built for
another torch is refused at its first use (MCD features, resampling, Griffin-Lim) with one line naming both versions
and the repair, never reached as a missing symbol in its compiled library."""
from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
import torch
from packaging.requirements import Requirement
from packaging.version import Version

from lavo_zoo import dependencies, lockfile
from lavo_zoo.dependencies import DependencyError, import_torchaudio

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirements() -> list[Requirement]:
    return [Requirement(r) for r in PROJECT["dependencies"]] + [
        Requirement(r) for group in PROJECT["optional-dependencies"].values() for r in group]


@pytest.fixture
def torchaudio_2_11_1(monkeypatch: pytest.MonkeyPatch) -> str:
    """This environment as if pip had paired a newer torchaudio patch with the installed torch."""
    real = dependencies.installed_version
    monkeypatch.setattr(dependencies, "installed_version",
                        lambda name: "2.11.1" if name == "torchaudio" else real(name))
    return real("torch")


def _refused(excinfo: pytest.ExceptionInfo, torch_version: str) -> None:
    message = str(excinfo.value)
    assert "\n" not in message
    assert "torchaudio 2.11.1" in message and f"torch {torch_version}" in message
    assert "pip install 'torch==" in message and "'torchaudio==" in message


@pytest.fixture(scope="module")
def lock() -> lockfile.Lock:
    """The lock this suite is held to (the repository's, or the candidate the lock-moving script is testing)."""
    return dependencies.read_project_lock()


def test_the_environment_is_the_lock(lock: lockfile.Lock) -> None:
    """Every installed package but lavo-zoo is locked at its installed version, and every locked one is installed:
    the README's install gave exactly the tested set. The only test that reads an installed version against a list,
    and its list is the lock."""
    if not lock.fits_this_machine():
        pytest.skip(f"the lock is for Python {lock.python} on {lock.system}, this is Python {lockfile.this_python()} "
                    f"on {lockfile.this_system()}: the installed set differs by platform")
    status = dependencies.lock_status()
    assert status["matches"], (f"this environment is not the lock {status['lock']}:\n  "
                               + "\n  ".join(status["differences"])
                               + f"\ninstall the locked set with: {lockfile.INSTALL_COMMAND}\n(or, to move the lock "
                               f"to newer releases: {lockfile.MOVE_COMMAND})")


def test_the_lock_names_no_index_host_or_path() -> None:
    text = (ROOT / lockfile.LOCK_RELPATH).read_text()
    for forbidden in ("--", "://", " @ ", "index", "find-links", "trusted-host", "/opt/", "file:"):
        assert forbidden not in text, forbidden
    lockfile.read_lock(ROOT / lockfile.LOCK_RELPATH)  # and every line is name==version


def test_the_readme_installs_the_lock() -> None:
    """The README's install command (what CI runs) constrains pip with the lock, as the drift message says."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- ci-commands -->", 1)[1].split("```", 2)[1]
    install = next(line for line in block.splitlines() if "pip install" in line)
    assert install.split("&& ", 1)[1] == lockfile.INSTALL_COMMAND


def test_the_torch_set_is_pinned_exactly_and_locked_as_pinned(lock: lockfile.Lock) -> None:
    pins = {r.name: r for r in _requirements()}
    for name in dependencies.TORCH_SET:
        (spec,) = pins[name].specifier
        assert spec.operator == "==", f"{name} must be pinned exactly (==), not {spec}"
        assert Version(lock.pins[name]).release == Version(spec.version).release, name
    assert dependencies.tested_torch_set() == [f"{n}{pins[n].specifier}" for n in dependencies.TORCH_SET]


def test_the_lock_holds_every_requirement_inside_its_declared_range(lock: lockfile.Lock) -> None:
    """Every requirement pyproject.toml declares (the dependencies and every extra's) is locked, at a version its
    range admits: an upper bound below the locked version would be untested. The extras the README's install leaves
    out (fla) are locked in their own section, inside their ranges too. (What they bring in turn is held by the
    drift test: every installed package is locked.)"""
    outside, missing = [], []
    for req in _requirements():
        name = lockfile.canonical(req.name)
        if name == "lavo-zoo" or (req.marker and not req.marker.evaluate({"extra": ""})
                                  and "extra" not in str(req.marker)):
            continue
        version = lock.version(name)
        if version is None:
            missing.append(name)
        elif req.specifier and not req.specifier.contains(version, prereleases=True):
            outside.append(f"{name} {version} not in {req.specifier}")
    assert not missing, f"not locked: {missing} (move the lock: {lockfile.MOVE_COMMAND})"
    assert not outside, outside


def test_setting_the_lock_variable_points_every_check_at_that_lock(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "candidate.txt"
    path.write_text(f"# for: Python {lockfile.this_python()} on {lockfile.this_system()}\nnumpy==0.0.1\n")
    monkeypatch.setenv(dependencies.LOCK_VARIABLE, str(path))
    assert dependencies.lock_path() == path
    status = dependencies.lock_status()
    assert not status["matches"] and status["lock"] == str(path)
    assert f"numpy is installed at {metadata.version('numpy')}, the lock has 0.0.1" in status["differences"]
    path.write_text("numpy>=1\n")
    with pytest.raises(DependencyError, match=r"candidate\.txt:1: 'numpy>=1' is not name==version"):
        dependencies.lock_status()


def test_torch_pins_its_triton_where_it_needs_one() -> None:
    """pyproject does not pin triton because torch does (on Linux x86-64): if a torch stops doing so, pin it."""
    linux = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}
    triton = [Requirement(r) for r in metadata.requires("torch") or [] if r.startswith("triton")]
    assert triton and all(len(r.specifier) == 1 and next(iter(r.specifier)).operator == "=="
                          for r in triton if r.marker is None or r.marker.evaluate(linux)), triton


def test_api_dependencies_have_an_upper_bound_at_a_tested_release() -> None:
    bounded = {r.name.lower().replace("_", "-"): r for r in _requirements()}
    for name in ("transformers", "huggingface-hub", "lm-eval", "accelerate"):
        assert any(s.operator in ("<=", "<") for s in bounded[name].specifier), f"{name} needs an upper bound"


def test_a_mismatched_torchaudio_is_refused_by_the_mcd_features(torchaudio_2_11_1: str) -> None:
    from lavo_zoo.evaluators import mcd

    mcd._transforms.cache_clear()
    try:
        with pytest.raises(DependencyError) as excinfo:
            mcd.mcd_features(np.zeros(22_050, dtype=np.float32), 22_050)
    finally:
        mcd._transforms.cache_clear()
    _refused(excinfo, torchaudio_2_11_1)


def test_a_mismatched_torchaudio_is_refused_by_griffin_lim_and_resampling(torchaudio_2_11_1: str,
                                                                          tmp_path: Path) -> None:
    import soundfile as sf

    from lavo_zoo.recipes.tts.audio import griffin_lim, read_wav

    with pytest.raises(DependencyError) as excinfo:
        griffin_lim(np.zeros((20, 80), dtype=np.float32))
    _refused(excinfo, torchaudio_2_11_1)
    sf.write(tmp_path / "a.wav", np.zeros(1600, dtype=np.float32), 16_000)
    with pytest.raises(DependencyError) as excinfo:
        read_wav(tmp_path / "a.wav", 22_050)
    _refused(excinfo, torchaudio_2_11_1)


def test_a_torchaudio_whose_library_fails_to_load_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchaudio", None)  # importing it now raises ImportError
    with pytest.raises(DependencyError, match=r"torchaudio \S+ fails to load beside torch \S+ .*repair: pip install"):
        import_torchaudio()


def test_matching_versions_import_torchaudio() -> None:
    assert import_torchaudio().functional.resample(torch.zeros(160), 16_000, 8_000).shape == (80,)


@pytest.mark.parametrize(("torch_version", "audio_version", "ok"), [
    ("2.11.0+cu130", "2.11.0+cu130", True), ("2.11.0", "2.11.0+cpu", True), ("2.11.0", "2.11.1", False),
    ("2.12.0", "2.11.0", False)])
def test_the_match_ignores_build_tags_only(monkeypatch: pytest.MonkeyPatch, torch_version: str, audio_version: str,
                                           ok: bool) -> None:
    versions = {"torch": torch_version, "torchaudio": audio_version}
    monkeypatch.setattr(dependencies, "installed_version", versions.get)
    if ok:
        dependencies.check_torchaudio_matches()
    else:
        with pytest.raises(DependencyError, match=f"torchaudio {audio_version} does not match torch {torch_version}"):
            dependencies.check_torchaudio_matches()


def test_a_missing_transformers_says_how_to_install_it(monkeypatch) -> None:
    """What needs the transformers format with transformers missing was a raw ModuleNotFoundError (a missing
    submitit already got its pip install line)."""
    from lavo_zoo.checkpoints.hf_format import transformers_plugin

    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(DependencyError, match=r"export --format hf needs lavo-zoo's \[hf\] extra, and transformers "
                                              r"is not installed: pip install 'lavo-zoo\[hf\]'"):
        transformers_plugin("lm", "export --format hf")
