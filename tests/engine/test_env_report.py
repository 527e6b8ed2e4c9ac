"""``lavo-zoo env``: every section a bug report needs, the same facts as text and JSON, a failing probe reported in
its line, and nothing written."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from lavo_zoo import dependencies, lockfile
from lavo_zoo.cli import main
from lavo_zoo.dependencies import installed_version
from lavo_zoo.engine import env_report


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    (root / "lm" / "builtin").mkdir(parents=True)
    (root / "lm" / "builtin" / "a.bin").write_bytes(b"x" * 3000)
    (root / "b.json").write_bytes(b"y" * 500)
    (root / "link").symlink_to(root / "b.json")  # not followed: counted by its own size
    monkeypatch.setenv("LAVO_ZOO_CACHE", str(root))
    monkeypatch.chdir(tmp_path)
    return root


def _tree(folder: Path) -> list[tuple[str, int, float]]:
    return sorted((str(p), p.lstat().st_size, p.lstat().st_mtime) for p in folder.rglob("*"))


def test_json_report_has_the_facts(cache: Path, capsys: pytest.CaptureFixture) -> None:
    before = _tree(cache.parent)
    assert main(["env", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert _tree(cache.parent) == before  # writes nothing
    assert info["torch"]["version"] == torch.__version__
    rows = {r["name"].lower(): r for r in info["dependencies"]}
    assert rows["torch"]["installed"] == installed_version("torch") and rows["torch"]["ok"] is True
    assert rows["transformers"]["extra"] == "hf" and rows["transformers"]["required"].count("=") >= 2
    assert len(rows) == len(info["dependencies"])  # a requirement repeated by two extras is one row
    assert info["extensions"]["torchaudio"]["loads"] and info["extensions"]["torchaudio"]["version"]
    assert info["cuda"]["available"] == torch.cuda.is_available()
    assert info["cache"] == {"folder": str(cache), "exists": True,
                             "bytes": 3500 + os.lstat(cache / "link").st_size}
    assert isinstance(info["lavo_kernels"]["triton_by_default_on_cuda"], bool)
    assert info["variables"]["LAVO_ZOO_CACHE"] == str(cache)


def test_text_report_names_each_section(cache: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["env"]) == 0
    text = capsys.readouterr().out
    for line in (f"torch {torch.__version__}", "dependencies (installed / required):", "compiled extensions:",
                 "torchaudio: loads", "CUDA:", "LAVO on CUDA:", "espeak-ng:", f"cache: {cache}"):
        assert line in text, line
    assert "outside the required range" not in text


def test_a_version_outside_its_range_is_marked(monkeypatch: pytest.MonkeyPatch) -> None:
    real = env_report.installed_version
    monkeypatch.setattr(env_report, "installed_version", lambda n: "99.0" if n == "transformers" else real(n))
    info = env_report.collect()
    (row,) = [r for r in info["dependencies"] if r["name"] == "transformers"]
    assert row["ok"] is False
    assert "99.0" in env_report.format_report(info).split("transformers", 1)[1].splitlines()[0]
    assert "<- outside the required range" in env_report.format_report(info)


def test_a_failing_probe_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                                                cache: Path) -> None:
    real = env_report.installed_version
    monkeypatch.setattr(env_report, "check_torchaudio_matches",
                        lambda: (_ for _ in ()).throw(OSError("libtorchaudio.so: undefined symbol: x")))
    monkeypatch.setattr(env_report, "installed_version", real)
    assert main(["env"]) == 0
    assert "torchaudio: error: OSError: libtorchaudio.so: undefined symbol: x" in capsys.readouterr().out


def test_an_extension_that_exits_on_import_is_reported(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture, cache: Path) -> None:
    """A torchaudio whose import calls sys.exit (SystemExit is no Exception) ended the report with exit 3 and no
    output; it is one line of the report like any failing probe."""
    monkeypatch.setattr(env_report, "import_torchaudio", lambda: (_ for _ in ()).throw(SystemExit(3)))
    monkeypatch.setattr(env_report, "check_torchaudio_matches", lambda: None)
    assert main(["env"]) == 0
    assert "torchaudio: error: SystemExit: 3" in capsys.readouterr().out


def test_a_cache_that_is_a_file_or_too_big_to_count_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture, cache: Path) -> None:
    """LAVO_ZOO_CACHE naming a file was reported "absent"; a tree too big to count in time (/: 22 s) is counted for
    CACHE_COUNT_SECONDS and said to be at least that size. Nothing is written either way."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    monkeypatch.setenv("LAVO_ZOO_CACHE", str(afile))
    assert main(["env"]) == 0
    assert f"cache: {afile} (not a folder: set LAVO_ZOO_CACHE to a folder)" in capsys.readouterr().out
    assert afile.read_text() == "x"
    monkeypatch.setenv("LAVO_ZOO_CACHE", str(cache))
    monkeypatch.setattr(env_report, "CACHE_COUNT_SECONDS", 0.0)  # stops after the first folder
    assert main(["env", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["cache"]
    assert report["complete"] is False and 0 < report["bytes"] < 3000 + 500 + len(str(cache / "b.json"))
    assert env_report.folder_size(cache) == (3000 + 500 + (cache / "link").lstat().st_size, True)


def _lock_file(tmp_path: Path, pins: dict[str, str]) -> Path:
    path = tmp_path / "lock.txt"
    path.write_text(f"# for: Python {lockfile.this_python()} on {lockfile.this_system()}\n"
                    + "".join(f"{n}=={v}\n" for n, v in pins.items()))
    return path


def test_the_report_says_whether_the_environment_is_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture, cache: Path) -> None:
    installed = {n: v for n, v in dependencies.installed_distributions().items() if n.lower() != "lavo-zoo"}
    monkeypatch.setenv(dependencies.LOCK_VARIABLE, str(_lock_file(tmp_path, installed)))
    assert main(["env"]) == 0
    assert f"lock: this environment is the locked set ({tmp_path / 'lock.txt'}, for Python" in capsys.readouterr().out

    moved = dict(installed, numpy="0.0.1")
    monkeypatch.setenv(dependencies.LOCK_VARIABLE, str(_lock_file(tmp_path, moved)))
    assert main(["env"]) == 0
    text = capsys.readouterr().out
    assert "differs from the lock" in text and "in 1 package:" in text
    assert f"  numpy is installed at {installed['numpy']}, the lock has 0.0.1" in text
    assert f"install the locked set: {lockfile.INSTALL_COMMAND}" in text
    assert main(["env", "--json"]) == 0
    lock = json.loads(capsys.readouterr().out)["lock"]
    assert lock["matches"] is False and lock["fits_this_machine"] is True and len(lock["differences"]) == 1


def test_a_bad_lock_or_none_is_one_line_of_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture, cache: Path) -> None:
    bad = tmp_path / "lock.txt"
    bad.write_text("numpy>=2\n")
    monkeypatch.setenv(dependencies.LOCK_VARIABLE, str(bad))
    assert main(["env"]) == 0
    assert f"lock: error: DependencyError: {bad}:1: 'numpy>=2' is not name==version" in capsys.readouterr().out
    monkeypatch.delenv(dependencies.LOCK_VARIABLE)
    monkeypatch.setattr(dependencies, "lock_path", lambda: None)
    assert main(["env"]) == 0
    assert "lock: none (not a source checkout: an install from a release is not locked)" in capsys.readouterr().out


def test_the_hf_extras_real_state_the_plugins_and_pythonpath_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """env reported the hf extra as installed from its metadata while transformers did not import, listed no plugins
    and did not show PYTHONPATH."""
    import sys

    from tests.helpers import broken_plugins

    broken_plugins(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{tmp_path / 'gone'}")
    monkeypatch.setitem(sys.modules, "transformers", None)  # installed by its metadata, but it does not import
    assert main(["env", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["extras"] == {"hf": "transformers is not installed"}
    plugins = {p["name"]: p for p in info["plugins"]}
    assert set(plugins) == {"bad_attn", "bad_recipe", "bad_commands"}
    assert plugins["bad_attn"]["package"] == "badplug 0.1"
    assert "RuntimeError: boom at import" in plugins["bad_attn"]["state"]
    assert info["python_path"] == [{"folder": str(tmp_path), "exists": True},
                                   {"folder": str(tmp_path / "gone"), "exists": False}]
    assert main(["env"]) == 0
    text = capsys.readouterr().out
    for line in ("  hf: transformers is not installed", "plugins (entry points of other packages):",
                 "  attentions: bad_attn = badplug_attn:BadAttention (badplug 0.1): the plugin 'bad_attn'",
                 "PYTHONPATH:", f"  {tmp_path / 'gone'} (does not exist)"):
        assert line in text, line

