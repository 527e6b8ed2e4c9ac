"""The lra recipe end to end on tiny built-in data: 2 training steps per task, eval's results JSON, the model's
padding invariance and two-tower head, every LRA config resolving."""
import json
from pathlib import Path

import pytest
import torch

from lavo_zoo.engine.configs import available_configs, resolve_config
from lavo_zoo.engine.evaluate import evaluate_checkpoint
from lavo_zoo.engine.trainer import Trainer
from tests.recipes.lra.helpers import SETTINGS, tiny


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
