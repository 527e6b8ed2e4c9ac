"""The tested dependency set (pyproject.toml) and the one import of torchaudio: a torchaudio built for another torch
is refused at its first use (MCD features, resampling, Griffin-Lim) with one line naming both versions and the
repair, never reached as a missing symbol in its compiled library."""
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

from lavo_zoo import dependencies
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


def test_the_torch_set_is_pinned_exactly_and_installed_as_pinned() -> None:
    pins = {r.name: r for r in _requirements()}
    for name in dependencies.TORCH_SET:
        (spec,) = pins[name].specifier
        assert spec.operator == "==", f"{name} must be pinned exactly (==), not {spec}"
        assert Version(metadata.version(name)).release == Version(spec.version).release, name
    assert dependencies.tested_torch_set() == [f"{n}{pins[n].specifier}" for n in dependencies.TORCH_SET]


def test_torch_pins_its_triton_where_it_needs_one() -> None:
    """pyproject does not pin triton because torch does (on Linux x86-64): if a torch stops doing so, pin it."""
    linux = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}
    triton = [Requirement(r) for r in metadata.requires("torch") or [] if r.startswith("triton")]
    assert triton and all(len(r.specifier) == 1 and next(iter(r.specifier)).operator == "=="
                          for r in triton if r.marker is None or r.marker.evaluate(linux)), triton


def test_installed_versions_are_inside_every_declared_range() -> None:
    """The suite runs with versions the pins admit: an upper bound below what it runs with would be untested."""
    outside = [f"{r.name} {metadata.version(r.name)} not in {r.specifier}" for r in _requirements()
               if r.name != "lavo-zoo" and r.specifier and _installed(r.name)
               and not r.specifier.contains(metadata.version(r.name), prereleases=True)]
    assert not outside, outside


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
        return True
    except metadata.PackageNotFoundError:
        return False


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
