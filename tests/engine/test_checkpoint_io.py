"""Loading refuses missing, corrupt, truncated and mismatched checkpoints, naming the file and the reason;
``lavo-zoo eval`` writes the results JSON of docs/architecture.md."""
import json
import shlex

import pytest
import torch
import yaml

from lavo_zoo.cli import main
from lavo_zoo.engine.checkpoint_io import load_model, save_checkpoint
from lavo_zoo.engine.configs import resolve_config
from lavo_zoo.errors import CheckpointError
from tests.helpers import TOY, run_cli


@pytest.fixture
def checkpoint(tmp_path):
    recipe, cfg = resolve_config(TOY)
    torch.manual_seed(0)
    model = recipe.build_model(cfg)
    path = save_checkpoint(tmp_path / "ck", 3, model, cfg, recipe.name, metrics={"loss": 1.0})
    return path, model


def test_round_trip_rebuilds_the_model_from_its_config(checkpoint):
    path, model = checkpoint
    recipe, _, loaded, meta = load_model(path)
    assert recipe.name == "toy" and meta["step"] == 3 and not loaded.training
    for (k, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), k


def test_resave_same_step_replaces_atomically(checkpoint):
    path, model = checkpoint
    recipe, cfg = resolve_config(TOY)
    with torch.no_grad():
        model[0].weight.add_(1)
    save_checkpoint(path.parent, 3, model, cfg, recipe.name)
    assert torch.equal(load_model(path)[2][0].weight, model[0].weight)
    assert sorted(p.name for p in path.parent.iterdir()) == ["last", "step-3"]


def test_corrupt_weights_refused_with_exit_1(checkpoint, capsys):
    path, _ = checkpoint
    data = bytearray((path / "model.safetensors").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (path / "model.safetensors").write_bytes(bytes(data))
    assert main(["eval", str(path)]) == 1
    err = capsys.readouterr().err
    assert "model.safetensors is corrupt or truncated" in err and "sha256" in err and "Traceback" not in err


def test_truncated_weights_refused(checkpoint):
    path, _ = checkpoint
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 3])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_model(path)


def test_unreadable_safetensors_with_matching_hash_refused(checkpoint):
    """A garbage file whose hash was (wrongly) recorded still fails with a clear message."""
    path, _ = checkpoint
    (path / "model.safetensors").write_bytes(b"not a safetensors file")
    meta = json.loads((path / "meta.json").read_text())
    from lavo_zoo.engine.checkpoint_io import sha256_file
    meta["weights_sha256"] = sha256_file(path / "model.safetensors")
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="model.safetensors is corrupt or truncated and cannot be read"):
        load_model(path)


def test_an_edited_config_is_refused_before_any_override_is_blamed(checkpoint):
    """meta.json records the sha256 of config.yaml: an edit (a window size, an ablation switch) scores a different
    model, so loading refuses it, naming the file; the harmless evaluation overrides are not blamed."""
    path, _ = checkpoint
    text = (path / "config.yaml").read_text()
    (path / "config.yaml").write_text(text.replace("hidden: 8", "hidden: 9") if "hidden: 8" in text
                                      else text + "# edited\n")
    with pytest.raises(CheckpointError, match=r"config\.yaml was changed after the checkpoint was saved"):
        load_model(path)
    with pytest.raises(CheckpointError, match="config.yaml was changed") as err:
        load_model(path, overrides=["eval.batch_size=2"])
    assert "eval.batch_size" not in str(err.value)  # the override is not blamed
    meta = json.loads((path / "meta.json").read_text())
    assert set(meta["files_sha256"]) == {"model.safetensors", "config.yaml"}


def test_a_corrupt_training_state_is_refused_by_its_hash(tmp_path):
    recipe, cfg = resolve_config(TOY)
    model = recipe.build_model(cfg)
    state = {"step": 1, "optimizer": {}, "rng": []}
    path = save_checkpoint(tmp_path / "ck", 1, model, cfg, recipe.name, train_state=state)
    from lavo_zoo.engine.checkpoint_io import load_train_state

    assert load_train_state(path)["step"] == 1
    blob = bytearray((path / "train_state.pt").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (path / "train_state.pt").write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match="train_state.pt is corrupt or truncated"):
        load_train_state(path)


def test_a_full_disk_during_a_save_leaves_the_previous_checkpoint_and_names_the_path(checkpoint, monkeypatch):
    import errno

    import lavo_zoo.engine.checkpoint_io as ckpt

    path, model = checkpoint
    recipe, cfg = resolve_config(TOY)
    before = sorted(p.name for p in path.parent.iterdir())

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt, "save_safetensors_model", full)
    with pytest.raises(CheckpointError, match=r"could not save checkpoint .*step-4.*the disk is full.*intact"):
        save_checkpoint(path.parent, 4, model, cfg, recipe.name)
    assert sorted(p.name for p in path.parent.iterdir()) == before  # no step-4, no temporary folder
    load_model(path)  # the previous one still loads


def test_mismatched_config_refused(checkpoint):
    """A config that does not fit the weights (meta.json rewritten with it, as a careless tool might) is refused
    when the weights do not load into the model it builds."""
    from lavo_zoo.engine.checkpoint_io import sha256_file

    path, _ = checkpoint
    cfg = yaml.safe_load((path / "config.yaml").read_text())
    cfg["model"]["hidden"] = 32
    (path / "config.yaml").write_text(yaml.safe_dump(cfg))
    meta = json.loads((path / "meta.json").read_text())
    meta["files_sha256"]["config.yaml"] = sha256_file(path / "config.yaml")
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="does not match the model built from .*config.yaml.*size mismatch"):
        load_model(path)


@pytest.mark.parametrize("name, message", [("meta.json", "meta.json is missing"),
                                           ("config.yaml", "config.yaml is missing")])
def test_missing_files_refused(checkpoint, name, message):
    path, _ = checkpoint
    (path / name).unlink()
    with pytest.raises(CheckpointError, match=message):
        load_model(path)


def test_bad_meta_and_unknown_config_key(checkpoint):
    path, _ = checkpoint
    (path / "meta.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="meta.json is corrupt"):
        load_model(path)


def test_eval_writes_results_json(tmp_path):
    out = tmp_path / "run"
    assert run_cli("train", TOY, "train.max_steps=4", "train.save_every=4", "--out", str(out)).returncode == 0
    result = run_cli("eval", str(out / "checkpoints" / "last"), "--split", "validation",
                     "--out", str(tmp_path / "r.json"))
    assert result.returncode == 0, result.stderr
    assert "loss" in result.stdout and "lower" in result.stdout  # the printed table
    res = json.loads((tmp_path / "r.json").read_text())
    assert {"recipe", "checkpoint", "checkpoint_sha256", "split", "metrics", "num_samples", "config", "versions",
            "device", "duration_s"} <= res.keys()
    assert res["split"] == "validation" and res["num_samples"] == 10 and res["device"] == "cpu"
    meta = json.loads((out / "checkpoints" / "last" / "meta.json").read_text())
    assert res["checkpoint_sha256"] == meta["weights_sha256"]
    assert meta["command"] == shlex.join(["lavo-zoo", "train", TOY, "train.max_steps=4", "train.save_every=4",
                                          "--out", str(out)])  # the training command, as the user would type it
    assert res["metrics"]["loss"]["higher_is_better"] is False and res["metrics"]["loss"]["value"] > 0
    bad_split = run_cli("eval", str(out / "checkpoints" / "last"), "--split", "dev")
    assert bad_split.returncode == 2 and "no split 'dev'" in bad_split.stderr

    # earlier results are never replaced without --overwrite, and the refusal comes before any scoring
    earlier = (tmp_path / "r.json").read_text()
    last = str(out / "checkpoints" / "last")
    assert main(["eval", last, "--split", "validation", "--out", str(tmp_path / "r.json")]) == 2
    assert (tmp_path / "r.json").read_text() == earlier
    assert main(["eval", last, "--split", "test", "--out", str(tmp_path / "r.json"), "--overwrite"]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["split"] == "test"

    # a checkpoint packed for release scores the same from its archive
    archive = tmp_path / "toy.tar.gz"
    assert run_cli("export", str(out / "checkpoints" / "last"), str(archive)).returncode == 0
    packed = run_cli("eval", str(archive), "--split", "validation", "--out", str(tmp_path / "p.json"))
    assert packed.returncode == 0, packed.stderr
    from_archive = json.loads((tmp_path / "p.json").read_text())
    assert from_archive["metrics"] == res["metrics"] and from_archive["checkpoint"] == str(archive)

    # the results record the command that scored them, and a release's model card reports them as they are
    assert res["command"] == shlex.join(["lavo-zoo", "eval", last, "--split", "validation", "--out",
                                         str(tmp_path / "r.json")])
    assert from_archive["command"].startswith(f"lavo-zoo eval {archive} --split validation --out ")
    released = tmp_path / "release" / "toy-v1.tar.gz"
    assert run_cli("export", last, str(released), "--results", str(tmp_path / "p.json")).returncode == 0
    card = (tmp_path / "release" / "toy-v1.README.md").read_text()
    [result] = yaml.safe_load(card.split("---\n")[1])["model-index"][0]["results"]
    assert result["dataset"]["split"] == "validation"
    assert {m["name"]: m["value"] for m in result["metrics"]} == {k: v["value"] for k, v in res["metrics"].items()}
    assert from_archive["command"] in card
