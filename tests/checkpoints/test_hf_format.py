"""Transformers model folders (checkpoints/hf_format.py), ``lavo-zoo export CKPT OUT --format hf``: a transformers model
folder with its model card (library_name transformers, the model-index of --results), refusals that leave nothing
behind, and the folder read back wherever a checkpoint is accepted (``lavo-zoo eval``, ``lavo_zoo.load``)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

pytest.importorskip("transformers", reason="the hf extra (pip install -e '.[dev]') is not installed")

from lavo_zoo.cli import main
from lavo_zoo.engine.checkpoint_io import save_checkpoint
from lavo_zoo.engine.evaluate import pin_results
from tests.checkpoints.helpers import make_checkpoint, split_card
from tests.recipes.lm.helpers import tiny_config

FOLDER_FILES = ["README.md", "config.json", "generation_config.json", "lavo_zoo_lm.py", "model.safetensors",
                "tokenizer.json", "tokenizer_config.json"]
EXPORTED = sorted([*FOLDER_FILES, "export-manifest.json"])  # and the manifest of what the export wrote


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def lm_checkpoint(root: Path) -> Path:
    """A tiny LAVO language model's checkpoint, written by the training engine's checkpoint writer."""
    recipe, cfg = tiny_config("lavo", {"num_bases": 8, "window_size": 4}, eval={"batch_size": 4})
    torch.manual_seed(0)
    return save_checkpoint(root / "checkpoints", 12, recipe.build_model(cfg).eval(), cfg, "lm")


def results_for(checkpoint: Path, path: Path) -> Path:
    meta = json.loads((checkpoint / "meta.json").read_text())
    path.write_text(json.dumps(pin_results({
        "recipe": "lm", "checkpoint_sha256": meta["weights_sha256"], "split": "test",
        "metrics": {"ppl@32": {"value": 123.5, "higher_is_better": False}},
        "command": "lavo-zoo eval runs/x/checkpoints/last --out test.json"})))
    return path


def test_export_writes_a_transformers_folder_with_its_card(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = lm_checkpoint(tmp_path / "run")
    out = tmp_path / "dist" / "lm-tiny"
    code, printed, err = run(capsys, "export", str(ckpt), str(out), "--format", "hf", "--name", "lm/tiny-lavo@v1",
                             "--results", str(results_for(ckpt, tmp_path / "test.json")), "--license", "MIT")
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == EXPORTED
    manifest = json.loads((out / "export-manifest.json").read_text())
    assert manifest["written_by"] == "lavo-zoo export" and sorted(manifest["files"]) == FOLDER_FILES
    assert f'AutoModelForCausalLM.from_pretrained("{out}")' in printed
    front, body = split_card((out / "README.md").read_text())
    assert front["library_name"] == "transformers" and front["pipeline_tag"] == "text-generation"
    assert front["license"] == "mit" and {"lavo", "lavo-zoo", "lm"} <= set(front["tags"])
    [entry] = front["model-index"]
    assert entry["name"] == "lm/tiny-lavo@v1"
    assert entry["results"][0]["metrics"] == [{"type": "ppl@32", "name": "ppl@32", "value": 123.5}]
    assert "AutoModelForCausalLM.from_pretrained" in body and "lavo-zoo download" not in body
    config = json.loads((out / "config.json").read_text())
    meta = json.loads((ckpt / "meta.json").read_text())
    assert config["model_type"] == "lavo_zoo_lm" and config["model"]["attention"]["name"] == "lavo"
    assert config["lavo_zoo"]["weights_sha256"] == meta["weights_sha256"] and config["lavo_zoo"]["step"] == 12
    assert config["auto_map"]["AutoModelForCausalLM"] == "lavo_zoo_lm.LavoZooLMForCausalLM"
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")], "no temporary folder left"


def test_export_refusals_leave_nothing_behind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = lm_checkpoint(tmp_path / "run")
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("an earlier export")
    code, _, err = run(capsys, "export", str(ckpt), str(out), "--format", "hf")
    assert code == 2 and "--overwrite" in err and (out / "old.txt").is_file()
    code, _, err = run(capsys, "export", str(ckpt), str(tmp_path / "x"), "--format", "hf", "--with-train-state")
    assert code == 2 and "--with-train-state" in err and not (tmp_path / "x").exists()
    toy = make_checkpoint(tmp_path / "toy")  # a recipe without a transformers form
    meta = json.loads((toy / "meta.json").read_text())
    (toy / "meta.json").write_text(json.dumps({**meta, "recipe": "toy"}))
    code, _, err = run(capsys, "export", str(toy), str(tmp_path / "y"), "--format", "hf")
    assert code == 2 and "recipe 'toy' has no transformers format" in err and not (tmp_path / "y").exists()
    code, _, err = run(capsys, "export", str(ckpt), str(out), "--format", "hf", "--overwrite")
    assert code == 2 and "old.txt" in err and "no export recorded writing there" in err, err
    assert [p.name for p in out.iterdir()] == ["old.txt"], "a folder of the user's own files is never replaced"
    fresh = tmp_path / "fresh"
    assert run(capsys, "export", str(ckpt), str(fresh), "--format", "hf")[0] == 0
    code, _, err = run(capsys, "export", str(ckpt), str(fresh), "--format", "hf")
    assert code == 2 and "holds the 7 files of an earlier export" in err and "--overwrite" in err
    code, _, err = run(capsys, "export", str(ckpt), str(fresh), "--format", "hf", "--overwrite")
    assert code == 0, err
    assert sorted(p.name for p in fresh.iterdir()) == EXPORTED, "an earlier export is replaced whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "out", "run", "toy"], "no lock or staging left"


def _training_run(root: Path) -> Path:
    """A language model's training run as the trainer leaves it: config, metrics, checkpoints and ``last``."""
    ckpt = lm_checkpoint(root)
    (root / "config.yaml").write_bytes((ckpt / "config.yaml").read_bytes())
    (root / "metrics.jsonl").write_text('{"step": 12, "split": "train", "loss": 3.5}\n')
    return ckpt


def _snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every file's bytes and every link's target under ``folder``."""
    return {p.relative_to(folder).as_posix(): str(p.readlink()) if p.is_symlink() else p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_symlink() or p.is_file()}


@pytest.mark.parametrize("target", ["run", "last", "checkpoints", "step"])
def test_export_hf_never_replaces_a_training_run_or_its_checkpoints(tmp_path: Path, target: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`export RUN/checkpoints/last RUN --format hf --overwrite` (and OUT = the `last` link, the checkpoints folder, a
    checkpoint) is refused before any work, naming what OUT is, and the run is left exactly as it was: it still
    resumes."""
    run_dir = tmp_path / "run"
    _training_run(run_dir)
    last = run_dir / "checkpoints" / "last"
    out = {"run": run_dir, "last": last, "checkpoints": run_dir / "checkpoints", "step": last.resolve()}[target]
    before = _snapshot(run_dir)
    code, printed, err = run(capsys, "export", str(last), str(out), "--format", "hf", "--overwrite")
    assert code == 2, err
    said = {"run": "is a training run", "checkpoints": f"is part of the training run {run_dir}"}
    assert said.get(target, f"is in the checkpoints of the training run {run_dir}") in err, err
    assert "Traceback" not in err and "wrote" not in printed
    assert _snapshot(run_dir) == before and last.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"], "no lock or staging folder left"


def test_a_second_export_to_the_same_folder_at_once_is_refused(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Two exports to one OUT at once: the second finds OUT claimed (its lock held) and is refused, saying by whom,
    instead of both saying "wrote" and the later replacing the earlier; once the first is done, OUT is its export."""
    from lavo_zoo.locking import release_lock, try_lock

    ckpt = lm_checkpoint(tmp_path / "run")
    out = tmp_path / "hf"
    lock = tmp_path / ".hf.lock"
    fd = try_lock(lock, json.dumps({"pid": 4242, "command": "lavo-zoo export"}).encode())  # the first, at work
    try:
        for extra in ([], ["--overwrite"]):
            code, printed, err = run(capsys, "export", str(ckpt), str(out), "--format", "hf", *extra)
            assert code == 2 and f"OUT {out} is being written by another command now (lavo-zoo export, pid 4242)" \
                in err, err
            assert "wrote" not in printed and not out.exists()
    finally:
        release_lock(fd, lock)
    assert run(capsys, "export", str(ckpt), str(out), "--format", "hf")[0] == 0
    assert sorted(p.name for p in out.iterdir()) == EXPORTED and not lock.exists()


def test_export_hf_files_follow_the_umask(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The folder and its files get what the umask gives (not the 0700 / 0600 of temporary files)."""
    import os

    ckpt = lm_checkpoint(tmp_path / "run")
    old = os.umask(0o027)
    try:
        assert run(capsys, "export", str(ckpt), str(tmp_path / "hf"), "--format", "hf")[0] == 0
    finally:
        os.umask(old)
    folder = tmp_path / "hf"
    assert folder.stat().st_mode & 0o777 == 0o750
    assert {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()} == {name: 0o640 for name in EXPORTED}


def test_an_exported_folder_is_read_as_the_checkpoint_it_came_from(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import lavo_zoo

    ckpt = lm_checkpoint(tmp_path / "run")
    folder = tmp_path / "hf"
    assert run(capsys, "export", str(ckpt), str(folder), "--format", "hf")[0] == 0
    from_folder = lavo_zoo.load(folder, device="cpu")
    from_checkpoint = lavo_zoo.load(ckpt, device="cpu")
    assert type(from_folder).__name__ == "LanguageModel"
    assert from_folder.cfg.model == from_checkpoint.cfg.model and from_folder.cfg.data == from_checkpoint.cfg.data
    for name, tensor in from_checkpoint.model.state_dict().items():
        assert torch.equal(from_folder.model.state_dict()[name], tensor), name
    assert from_folder.generate("def f(", 16, temperature=0) == from_checkpoint.generate("def f(", 16, temperature=0)
    scores = []
    for source in (ckpt, folder):
        out = tmp_path / f"{source.name}.json"
        code, _, err = run(capsys, "eval", str(source), "--max-batches", "1", "--device", "cpu", "--out", str(out))
        assert code == 0, err
        scores.append(json.loads(out.read_text())["metrics"])
    assert scores[0] == scores[1]


def test_a_damaged_folder_is_a_checkpoint_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = lm_checkpoint(tmp_path / "run")
    folder = tmp_path / "hf"
    assert run(capsys, "export", str(ckpt), str(folder), "--format", "hf")[0] == 0
    weights = folder / "model.safetensors"
    tensors = load_file(weights)
    del tensors["model.ln_f.weight"]
    save_file(tensors, weights, metadata={"format": "pt"})
    code, _, err = run(capsys, "eval", str(folder), "--max-batches", "1")
    assert code == 1 and str(folder) in err and "missing: model.ln_f.weight" in err
    weights.write_bytes(weights.read_bytes()[:200])
    code, _, err = run(capsys, "eval", str(folder), "--max-batches", "1")
    assert code == 1 and str(folder) in err and "not a readable transformers folder" in err


def test_an_unsupported_transformers_is_named_with_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import lavo_zoo.recipes.lm.hf as lm_hf

    ckpt = lm_checkpoint(tmp_path / "run")
    monkeypatch.setattr(lm_hf, "transformers_version", lambda: (4, 57))
    code, _, err = run(capsys, "export", str(ckpt), str(tmp_path / "hf"), "--format", "hf")
    assert code == 2 and "needs transformers >= 5.24, < 6" in err and "pip install 'lavo-zoo[hf]'" in err
    assert not (tmp_path / "hf").exists()
