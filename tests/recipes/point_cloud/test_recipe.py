"""The point_cloud recipe: PoinTr's shapes and attention sites, configs, a 2-step training run, eval's results JSON,
``complete`` on a real PCN demo scan and ``score chamfer`` on files and folders."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from lavo_zoo.cli import main
from lavo_zoo.engine.configs import available_configs, resolve_config
from lavo_zoo.errors import ConfigError, InputError
from lavo_zoo.formats.pcd import read_pcd, write_pcd
from lavo_zoo.recipes.point_cloud.cli import complete
from tests.recipes.point_cloud.helpers import SMALL


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):
    """A private LAVO_ZOO_CACHE for the built-in data of this module."""
    before = os.environ.get("LAVO_ZOO_CACHE")
    os.environ["LAVO_ZOO_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield Path(os.environ["LAVO_ZOO_CACHE"])
    if before is None:
        os.environ.pop("LAVO_ZOO_CACHE")
    else:
        os.environ["LAVO_ZOO_CACHE"] = before


def _tiny(*overrides: str):
    return resolve_config("point_cloud/tiny-lavo", [*SMALL, *overrides])


def test_pointr_shapes_and_outputs() -> None:
    recipe, cfg = _tiny()
    model = recipe.build_model(cfg).eval()
    partial = torch.rand(2, 128, 3) - 0.5
    coarse, dense = model(partial)
    assert coarse.shape == (2, 32 + 32, 3) and dense.shape == (2, 128 + 128, 3)
    assert torch.equal(dense[:, 128:], partial)  # the input is appended to the folded points
    assert all(any(torch.equal(p, q) for q in partial[0]) for p in coarse[0, 32:])  # FPS of the input
    # the folded points sit around their centres: S = 4 points per centre, as many centres as queries
    assert model.fold_step == 2 and model.foldingnet.seed.shape == (2, 4)


def test_attention_sites_come_from_the_registry() -> None:
    recipe, cfg = _tiny("model.attention.encoder_self.name=performer", "model.attention.decoder_self.name=abc")
    model = recipe.build_model(cfg)
    enc, dec = model.base_model.encoder[0], model.base_model.decoder[0]
    assert type(enc.attn).__name__ == "PerformerAttention" and enc.attn.pattern == "noncausal"
    assert type(dec.self_attn).__name__ == "ABCAttention" and dec.self_attn.pattern == "noncausal"
    assert type(dec.cross_attn).__name__ == "LavoAttention" and dec.cross_attn.pattern == "cross"
    assert dec.cross_attn.num_bases == 8
    assert enc.knn is not None and model.base_model.encoder[1].knn is None  # knn_layers = 1
    with pytest.raises(ConfigError, match="'model.attention.cross': attention 'local' does not support pattern"):
        _tiny("model.attention.cross.name=local")
    # the decoder's queries are a set: its self-attention is noncausal, so a mechanism without a causal form fits
    recipe, cfg = _tiny("model.attention.decoder_self.name=nystromformer")
    dec = recipe.build_model(cfg).base_model.decoder[0]
    assert type(dec.self_attn).__name__ == "NystromAttention" and dec.self_attn.pattern == "noncausal"
    recipe, cfg = _tiny("model.num_pred=100")
    with pytest.raises(ConfigError, match=r"model.num_pred \(100\) must be model.num_query \(32\) times a square"):
        recipe.build_model(cfg)


def test_configs_resolve() -> None:
    names = {n for n in available_configs() if n.startswith("point_cloud/")}
    assert names == {f"point_cloud/{n}" for n in ("pcn-lavo", "pcn-sdpa", "pcn-abc", "pcn-performer", "tiny-lavo",
                                                     "tiny-sdpa")}
    crosses = {}
    for name in names:
        _, cfg = resolve_config(name)
        crosses[name] = cfg.model.attention.cross
        assert cfg.model.attention.encoder_self.name == cfg.model.attention.decoder_self.name == "sdpa"
    assert crosses["point_cloud/pcn-lavo"].name == "lavo" and crosses["point_cloud/pcn-lavo"].options["num_bases"] == 64
    assert crosses["point_cloud/pcn-sdpa"].name == "sdpa"
    _, cfg = resolve_config("point_cloud/pcn-lavo")
    m, t = cfg.model, cfg.train
    assert (m.embed_dim, m.num_heads, m.encoder_layers, m.decoder_layers, m.num_query, m.proxy_points) == (
        384, 6, 6, 8, 3584, [1536])
    assert (t.optimizer, t.lr, t.weight_decay, t.batch_size, t.decay_gamma) == ("adamw", 5e-4, 5e-4, 48, 0.9)


def test_training_lowers_the_loss_on_a_batch(cache: Path) -> None:
    torch.manual_seed(0)
    recipe, cfg = _tiny("model.attention.cross.name=sdpa")
    model = recipe.build_model(cfg)
    ds = recipe.build_dataset(cfg, "train")
    batch = recipe.collate([ds[i] for i in range(4)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    losses = []
    for _ in range(12):
        loss, logs = recipe.training_loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert set(logs) == {"cd_l1_coarse", "cd_l1_dense"}
    assert losses[-1] < 0.7 * losses[0], losses


@pytest.fixture(scope="module")
def trained(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run")
    assert main(["train", "point_cloud/tiny-lavo", "--out", str(out), "--max-steps", "2", "train.eval_every=2",
                 "train.eval_batches=1", *SMALL]) == 0
    return out


def test_train_two_steps_and_eval_writes_results(trained: Path, tmp_path: Path) -> None:
    records = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    validation = [r for r in records if r["split"] == "validation"]
    assert [r["step"] for r in validation] == [2] and {"loss", "cd_l1", "cd_l2", "fscore"} <= set(validation[0])
    assert main(["eval", str(trained / "checkpoints" / "last"), "--out", str(tmp_path / "test.json")]) == 0
    results = json.loads((tmp_path / "test.json").read_text())
    assert results["recipe"] == "point_cloud" and results["split"] == "test" and results["num_samples"] == 16
    metrics = results["metrics"]
    assert {"cd_l1", "cd_l2", "fscore", "cd_l1@chair", "fscore@watercraft"} <= set(metrics)
    assert not metrics["cd_l1"]["higher_is_better"] and metrics["fscore@chair"]["higher_is_better"]
    per_category = [metrics[f"cd_l1@{c}"]["value"] for c in ("airplane", "cabinet", "car", "chair", "lamp", "sofa",
                                                              "table", "watercraft")]
    assert metrics["cd_l1"]["value"] == pytest.approx(np.mean(per_category))


def test_complete_a_real_demo_scan(trained: Path, shared_data: Path, tmp_path: Path) -> None:
    scan = shared_data / "pcn-demo" / "chair.pcd"
    if not scan.is_file():
        pytest.skip(f"{scan} is absent")
    out, png = tmp_path / "chair-completed.pcd", tmp_path / "chair.png"
    result = CliRunner().invoke(complete, [str(trained / "checkpoints" / "last"), str(scan), "--out", str(out),
                                           "--png", str(png), "--gt", str(scan)])
    assert result.exit_code == 0, result.output
    completed = read_pcd(out)
    partial = read_pcd(scan)
    assert completed.shape == (128 + min(128, len(partial)), 3)  # folded points + the real input points
    assert all(k in result.output for k in ("cd_l1=", "fscore="))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_python_api_completes_what_the_command_writes(trained: Path, tmp_path: Path) -> None:
    import lavo_zoo

    rng = np.random.default_rng(0)
    scans = [rng.uniform(-0.3, 0.3, (n, 3)).astype(np.float32) for n in (200, 90)]
    completer = lavo_zoo.load(trained, device="cpu")
    one = completer.complete(scans[0], seed=1)
    both = completer.complete(scans, seed=1)  # one batch; the first cloud draws the same subset
    assert len(both) == 2 and both[1].shape == (128 + 90, 3)
    np.testing.assert_allclose(both[0], one, atol=1e-5)
    write_pcd(tmp_path / "scan.pcd", scans[0], "binary")
    result = CliRunner().invoke(complete, [str(trained), str(tmp_path / "scan.pcd"), "--out",
                                           str(tmp_path / "done.pcd"), "--seed", "1", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(read_pcd(tmp_path / "done.pcd"), one)
    with pytest.raises(InputError, match=r"cloud 0: expected finite points \[N, 3\]"):
        completer.complete(np.zeros((5, 2), np.float32))


def test_complete_never_replaces_an_existing_file(trained: Path, tmp_path: Path) -> None:
    scan = tmp_path / "scan.pcd"
    write_pcd(scan, np.random.default_rng(0).uniform(-0.3, 0.3, (200, 3)).astype(np.float32), "binary")
    out = tmp_path / "mine.pcd"
    out.write_text("my own cloud")
    result = CliRunner().invoke(complete, [str(trained / "checkpoints" / "last"), str(scan), "--out", str(out),
                                           "--device", "cpu"])
    assert result.exit_code != 0 and "already exists" in str(result.exception)
    assert out.read_text() == "my own cloud"
    result = CliRunner().invoke(complete, [str(trained / "checkpoints" / "last"), str(scan), "--out", str(out),
                                           "--device", "cpu", "--overwrite"])
    assert result.exit_code != 0 and "is not a point cloud" in str(result.exception)  # not an earlier completion
    assert out.read_text() == "my own cloud"
    done = tmp_path / "done.pcd"
    for extra in ([], ["--overwrite"]):  # an earlier completion is what --overwrite replaces
        result = CliRunner().invoke(complete, [str(trained / "checkpoints" / "last"), str(scan), "--out", str(done),
                                               "--device", "cpu", *extra])
        assert result.exit_code == 0, result.output
        assert len(read_pcd(done)) > 0
    missing = CliRunner().invoke(complete, [str(trained / "checkpoints" / "last"), str(tmp_path / "none.pcd"),
                                            "--out", str(tmp_path / "x.pcd")])
    assert missing.exit_code != 0 and "no such file" in str(missing.exception)
