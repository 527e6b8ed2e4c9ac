"""``lavo-zoo new``: the scaffolded plugin packages work as written. Each package is made importable the way
``pip install -e`` would (the package folder on ``sys.path`` and a real ``.dist-info`` carrying its entry points),
then driven through the CLI in a subprocess: ``list``, ``train NAME/tiny``, ``eval``, the recipe's own command, and
the plugin's own tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from lavo_zoo.cli import main


def _new(kind: str, name: str, out: Path) -> None:
    assert main(["new", kind, name, "--out", str(out)]) == 0


def _install(package: Path, site: Path) -> dict[str, str]:
    """What `pip install -e package` gives: its folder importable and a .dist-info with its entry points; returns the
    environment for subprocesses that see it."""
    project = tomllib.loads((package / "pyproject.toml").read_text())["project"]
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = []
    for group, entries in project["entry-points"].items():
        lines.append(f"[{group}]")
        lines += [f"{k} = {v}" for k, v in entries.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(package), env.get("PYTHONPATH", "")])
    return env


def _cli(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lavo_zoo.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600, check=False)


def _pytest(env: dict[str, str], tests: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def recipe_plugin(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugin")
    _new("recipe", "brackets_demo", root / "pkg")
    return root, _install(root / "pkg", root / "site")


def test_a_scaffolded_recipe_lists_trains_and_evaluates_through_the_cli(recipe_plugin):
    root, env = recipe_plugin
    listed = _cli(env, "list", "recipes", cwd=root)
    assert listed.returncode == 0 and "brackets_demo" in listed.stdout, listed.stderr
    configs = _cli(env, "list", "configs", cwd=root)
    assert "brackets_demo/tiny" in configs.stdout, configs.stdout + configs.stderr
    train = _cli(env, "train", "brackets_demo/tiny", "--out", "run", "--device", "cpu", "train.max_steps=3",
                 "train.eval_every=3", "train.save_every=3", "train.batch_size=8", "data.builtin_size=64", cwd=root)
    assert train.returncode == 0, train.stderr[-3000:]
    evaluated = _cli(env, "eval", "run/checkpoints/last", "--split", "test", "--device", "cpu", "--out", "res.json",
                     cwd=root)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    results = json.loads((root / "res.json").read_text())
    assert results["recipe"] == "brackets_demo" and 0.0 <= results["metrics"]["accuracy"]["value"] <= 1.0
    assert results["metrics"]["accuracy"]["higher_is_better"] is True
    classified = _cli(env, "brackets-demo-classify", "run/checkpoints/last", "--text", "([])", "--device", "cpu",
                      cwd=root)  # cli.py's COMMANDS, mounted as lavo-zoo's own
    assert classified.returncode == 0 and classified.stdout.startswith("([])\t"), classified.stderr[-3000:]


def test_a_scaffolded_recipe_passes_its_own_tests(recipe_plugin):
    root, env = recipe_plugin
    run = _pytest(env, str(root / "pkg" / "tests"), cwd=root / "pkg")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "failed" not in run.stdout


def test_a_scaffolded_attention_is_registered_and_passes_its_own_tests(tmp_path):
    _new("attention", "mean_demo", tmp_path / "pkg")
    env = _install(tmp_path / "pkg", tmp_path / "site")
    listed = _cli(env, "list", "attentions", cwd=tmp_path)
    assert listed.returncode == 0 and "mean_demo" in listed.stdout, listed.stderr
    tests = str(tmp_path / "pkg" / "tests")
    run = _pytest(env, tests, cwd=tmp_path / "pkg")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


@pytest.mark.parametrize("args, message", [
    (["recipe", "My-Domain"], "not a valid recipe name"),
    (["recipe", "lm"], "already registered"),
    (["attention", "lavo"], "already registered"),
    (["recipe", "json"], "shadow the importable module"),
])
def test_bad_names_are_refused(args, message, tmp_path, capsys):
    assert main(["new", *args, "--out", str(tmp_path / "x")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_non_empty_output_directory_is_refused_and_kept(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "mine.txt").write_text("keep me")
    assert main(["new", "recipe", "fresh_name", "--out", str(tmp_path / "x")]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert (tmp_path / "x" / "mine.txt").read_text() == "keep me" and len(list((tmp_path / "x").iterdir())) == 1
