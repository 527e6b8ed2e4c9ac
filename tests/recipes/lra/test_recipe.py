"""The lra recipe end to end on tiny built-in data: 2 training steps per task, eval's results JSON, the model's
padding invariance and two-tower head, every LRA config resolving, `score accuracy` on files."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lavo_zoo.engine.evaluate import evaluate_checkpoint
from lavo_zoo.engine.recipe import available_configs, config_from_dict, resolve_config
from lavo_zoo.engine.trainer import Trainer
from lavo_zoo.evaluators import build_evaluator

SETTINGS = {"listops": {"builtin_min_length": 10, "builtin_max_length": 60},
            "text": {"builtin_min_length": 40, "builtin_max_length": 120},
            "retrieval": {"builtin_min_length": 40, "builtin_max_length": 120},
            "image": {}, "pathfinder": {"difficulty": "curv_baseline"}}


def tiny(task: str, attention: dict | None = None):
    return config_from_dict({
        "recipe": "lra",
        "data": {"task": task, "max_length": 64, "builtin_size": 16, **SETTINGS[task]},
        "model": {"embed_dim": 16, "ffn_dim": 32, "num_heads": 2,
                  "attention": attention or {"name": "lavo", "num_bases": 8, "window_size": 8}},
        "train": {"batch_size": 4, "max_steps": 2, "warmup_steps": 1, "eval_every": 2, "eval_batches": 1,
                  "save_every": 2, "log_every": 1}})


@pytest.mark.parametrize("task", list(SETTINGS))
def test_two_training_steps_per_task(tmp_path: Path, task: str) -> None:
    recipe, cfg = tiny(task)
    metrics = Trainer(recipe, cfg, tmp_path / "run", device="cpu").fit()
    assert {"loss", "accuracy"} <= set(metrics) and 0.0 <= metrics["accuracy"] <= 1.0
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert f"num_classes: {cfg.model.num_classes}" in saved and "vocab_size:" in saved  # resolved sizes kept
    assert cfg.model.two_tower == (task == "retrieval")
    if task == "listops":  # eval rebuilds the model from the checkpoint and writes the results JSON
        results = evaluate_checkpoint(tmp_path / "run" / "checkpoints" / "last", split="test", device="cpu")
        json.dumps(results)  # serialisable
        assert results["metrics"]["accuracy"]["higher_is_better"] is True
        matrix = results["details"]["confusion_matrix"]
        assert len(matrix) == 10 and sum(map(sum, matrix)) == results["num_samples"] == 16
        assert results["metrics"]["accuracy"]["value"] == pytest.approx(
            sum(matrix[i][i] for i in range(10)) / 16)


def test_mean_pooling_ignores_padding_and_retrieval_uses_both_documents() -> None:
    recipe, cfg = tiny("retrieval", {"name": "sdpa"})
    model = recipe.build_model(cfg).eval()
    torch.manual_seed(0)
    a, b = torch.randint(1, 257, (1, 20)), torch.randint(1, 257, (1, 30))
    ones = lambda t: torch.ones_like(t, dtype=torch.bool)
    ref = model(a, ones(a), b, ones(b))
    padded = torch.cat([a, torch.zeros(1, 10, dtype=torch.long)], 1)
    mask = torch.cat([ones(a), torch.zeros(1, 10, dtype=torch.bool)], 1)
    torch.testing.assert_close(model(padded, mask, b, ones(b)), ref, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(model(a, ones(a), a, ones(a)), ref)  # the second document matters
    u, v = model.encoder(a, ones(a)), model.encoder(b, ones(b))
    torch.testing.assert_close(model.classifier(torch.cat([u, v, u * v, u - v], -1)), ref)


def test_accuracy_evaluator_against_a_direct_count() -> None:
    torch.manual_seed(1)
    ev = build_evaluator("accuracy", num_classes=3)
    logits, labels = torch.randn(50, 3), torch.randint(0, 3, (50,))
    ev.update(logits[:20], labels[:20])
    ev.update(logits[20:], labels[20:])
    pred = logits.argmax(1).tolist()
    assert ev.compute()["accuracy"] == pytest.approx(sum(p == t for p, t in zip(pred, labels.tolist())) / 50)
    d = ev.details()
    for c in range(3):
        rows = [i for i in range(50) if labels[i] == c]
        assert d["per_class_accuracy"][str(c)] == pytest.approx(sum(pred[i] == c for i in rows) / len(rows))
        assert d["confusion_matrix"][c] == [sum(pred[i] == k for i in rows) for k in range(3)]
    with pytest.raises(ValueError, match="outside the evaluator's 3 classes"):
        ev.update(torch.tensor([3]), torch.tensor([0]))


def test_lra_configs_resolve_with_skyformer_settings() -> None:
    names = {n for n in available_configs() if n.startswith("lra/")}
    tasks = ("listops", "text", "retrieval", "image", "pathfinder")
    assert {f"lra/{t}-{a}" for t in tasks for a in ("sdpa", "lavo")} <= names
    assert {f"lra/tiny-{t}-{a}" for t in tasks for a in ("sdpa", "lavo")} <= names
    batch = {"listops": 32, "text": 32, "retrieval": 16, "image": 256, "pathfinder": 128}
    for t in tasks:
        _, cfg = resolve_config(f"lra/{t}-lavo")
        assert cfg.data.task == t and cfg.train.batch_size == batch[t]
        assert (cfg.model.embed_dim, cfg.model.ffn_dim, cfg.model.num_heads, cfg.model.num_layers) == (64, 128, 2, 2)
        assert cfg.model.attention.name == "lavo" and cfg.model.attention.options == {"num_bases": 32,
                                                                                   "window_size": 256}


def test_write_data_hook_writes_a_release_folder_the_loader_reads(tmp_path: Path) -> None:
    from lavo_zoo.engine.recipe import get_recipe
    from lavo_zoo.errors import UsageError
    from lavo_zoo.recipes.lra.data import DataConfig, load_examples

    recipe = get_recipe("lra")
    root = recipe.write_data(tmp_path / "lo", "listops", size=20)
    assert (root / "basic_val.tsv").read_text().startswith("Source\tTarget\n")
    assert len(load_examples(DataConfig(task="listops", path=str(root)), "train")) == 20
    with pytest.raises(UsageError, match="no built-in dataset 'cifar'"):
        recipe.write_data(tmp_path / "x", "cifar")


@pytest.mark.parametrize("task", ["listops", "image", "retrieval"])
def test_the_classifier_reads_raw_inputs_as_the_release_data_is_read(tmp_path: Path, task: str) -> None:
    """``lavo_zoo.load`` of a run classifies raw test inputs (expressions, RGB pictures, pairs of texts) with the
    same probabilities as the recipe's evaluation of the tokenized test split."""
    import csv

    import lavo_zoo
    from lavo_zoo.recipes.lra.data import image, listops
    from lavo_zoo.recipes.lra.infer import class_logits

    recipe, cfg = tiny(task)
    Trainer(recipe, cfg, tmp_path / "run", device="cpu").fit()
    classifier = lavo_zoo.load(tmp_path / "run", device="cpu")
    root = recipe.data_path(cfg.data)
    if task == "listops":
        with (root / listops.FILES["test"]).open(newline="") as f:
            raw = [row[0] for row in list(csv.reader(f, delimiter="\t"))[1:]]
    elif task == "image":
        records = np.fromfile(image.batches_root(root) / image.TEST_FILE, np.uint8).reshape(-1, image.RECORD)
        raw = [r[1:].reshape(3, image.SIDE, image.SIDE).transpose(1, 2, 0) for r in records]  # [H, W, 3] RGB
    else:
        lines = (root / "new_aan_pairs.test.tsv").read_text(encoding="utf-8").splitlines()
        raw = [tuple(line.split("\t")[3:5]) for line in lines]
    dataset = recipe.build_dataset(cfg, "test")
    assert len(raw) == len(dataset)
    expected = torch.softmax(class_logits(classifier.model, recipe.collate([dataset[i] for i in range(len(raw))])),
                             -1).detach().numpy()
    np.testing.assert_allclose(classifier.scores(raw, batch_size=5), expected, atol=1e-5)
    assert classifier.classify(raw[:3]) == expected[:3].argmax(-1).tolist()
    assert classifier.classify(raw[0]) == int(expected[0].argmax())
