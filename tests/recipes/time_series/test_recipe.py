"""The time_series recipe: Informer shapes per feature mode, configs, training lowers validation MSE, CLI round trip."""
import json
from pathlib import Path

import pytest
import torch

from lavo_zoo.cli import main
from lavo_zoo.engine.configs import available_configs, config_from_dict, resolve_config

TINY = {"recipe": "time_series",
        "data": {"builtin_size": 1000, "seq_len": 32, "label_len": 16, "pred_len": 8},
        "model": {"embed_dim": 32, "num_heads": 2, "ffn_dim": 64,
                  "attention": {"encoder_self": {"name": "probsparse", "factor": 5},
                                "decoder_self": {"name": "probsparse", "factor": 5},
                                "cross": {"name": "lavo", "num_bases": 16}}}}


def _tiny(*overrides: str):
    recipe, cfg = config_from_dict(TINY, list(overrides))
    return recipe, recipe.resolve(cfg)


@pytest.mark.parametrize("features,c_out", [("M", 7), ("S", 1), ("MS", 1)])
def test_forecast_shapes_per_feature_mode(features: str, c_out: int) -> None:
    recipe, cfg = _tiny(f"data.features={features}")
    model = recipe.build_model(cfg).eval()
    batch = recipe.collate([recipe.build_dataset(cfg, "test")[i] for i in range(3)])
    assert batch["x"].shape == (3, 32, 1 if features == "S" else 7)
    assert batch["y_mark"].shape == (3, 24, 4)
    forecast, truth = recipe.predict(model, batch)
    assert forecast.shape == truth.shape == (3, 8, c_out)
    torch.testing.assert_close(truth[..., -1], batch["y"][:, -8:, -1])  # MS / S: the target column (OT, last)


def test_forecast_does_not_see_the_horizon() -> None:
    recipe, cfg = _tiny()
    model = recipe.build_model(cfg).eval()
    batch = recipe.collate([recipe.build_dataset(cfg, "test")[i] for i in range(2)])
    changed = {**batch, "y": batch["y"].clone()}
    changed["y"][:, 16:] = 100.0  # the truth beyond the start token
    torch.testing.assert_close(recipe.predict(model, changed)[0], recipe.predict(model, batch)[0])


def test_cross_attention_comes_from_the_registry() -> None:
    recipe, cfg = _tiny("model.attention.cross.name=sdpa")
    layer = recipe.build_model(cfg).decoder.layers[0]
    assert type(layer.cross_attn).__name__ == "SDPAttention" and layer.cross_attn.pattern == "cross"
    assert layer.self_attn.pattern == "causal"


def test_paper_configs_resolve() -> None:
    names = [n for n in available_configs() if n.startswith("time_series/")]
    assert {"time_series/etth1-lavo", "time_series/etth1-sdpa", "time_series/etth1s-lavo", "time_series/tiny-lavo",
            "time_series/weather-lavo"} <= set(names)
    for name in names:
        _, cfg = resolve_config(name)
        if name.endswith("-lavo"):
            assert cfg.model.attention.cross.name == "lavo"
            assert cfg.model.attention.cross.options["num_bases"] == (8 if "tiny" in name else 16)
        if name.endswith("-sdpa"):
            assert cfg.model.attention.cross.name == "sdpa"
    _, cfg = resolve_config("time_series/etth1-lavo")
    assert (cfg.data.seq_len, cfg.data.label_len, cfg.data.pred_len) == (336, 336, 720)
    assert (cfg.train.optimizer, cfg.train.lr, cfg.train.schedule, cfg.train.max_epochs) == ("adam", 1e-4,
                                                                                            "exponential", 6)
    _, cfg = resolve_config("time_series/weather-lavo")
    assert (cfg.data.seq_len, cfg.model.encoder_layers, cfg.model.decoder_layers) == (720, 3, 2)


def test_short_training_lowers_validation_mse() -> None:
    torch.manual_seed(0)
    recipe, cfg = _tiny()
    model = recipe.build_model(cfg)
    before = recipe.evaluate(model, cfg, "validation", torch.device("cpu")).compute()["mse"]
    loader = torch.utils.data.DataLoader(recipe.build_dataset(cfg, "train"), batch_size=16, shuffle=True,
                                         collate_fn=recipe.collate, generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for _, batch in zip(range(40), loader):
        loss, _ = recipe.training_loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = recipe.evaluate(model, cfg, "validation", torch.device("cpu")).compute()["mse"]
    assert after < 0.8 * before, (before, after)


def test_cli_train_eval_and_plot(trained: Path, tmp_path: Path) -> None:
    records = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "validation"] == [10, 20]
    assert main(["eval", str(trained / "checkpoints" / "last"), "--out", str(tmp_path / "test.json")]) == 0
    results = json.loads((tmp_path / "test.json").read_text())
    assert results["recipe"] == "time_series" and results["split"] == "test"
    assert {"mse", "mae", "rmse", "mape", "mspe"} == set(results["metrics"])
    assert results["num_samples"] == 248 - 60 + 1  # test rows [1000 - 200 - 48, 1000), windows of 48 + 12 rows
    assert main(["forecast-plot", str(trained), "--windows", "3", "--out", str(tmp_path / "forecast.png")]) == 0
    assert (tmp_path / "forecast.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_time_series_model_is_built_from_the_checkpoint_without_the_csv(tmp_path):
    from lavo_zoo.engine.checkpoint_io import load_model, save_checkpoint

    assert main(["data", "time_series/etth1", "--out", str(tmp_path), "--size", "500"]) == 0
    csv = tmp_path / "ETTh1.csv"
    recipe, cfg = resolve_config("time_series/tiny-lavo", [f"data.path={csv}", "data.split=ratio", "data.features=MS",
                                                            "data.seq_len=24", "data.label_len=12", "data.pred_len=6"])
    cfg = recipe.resolve(cfg)
    assert (cfg.model.channels, cfg.model.out_channels, cfg.model.time_features) == (7, 1, 4)
    model = recipe.build_model(cfg)
    ckpt = save_checkpoint(tmp_path / "ckpt", 1, model, cfg, "time_series")
    csv.unlink()
    _, loaded_cfg, loaded, _ = load_model(ckpt, "cpu")
    assert loaded_cfg.model == cfg.model
    for a, b in zip(model.state_dict().values(), loaded.state_dict().values()):
        torch.testing.assert_close(a, b)
