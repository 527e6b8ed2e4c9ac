"""``lavo-zoo compare``: every (attention, seed) cell trained with the same budget, an interrupted study continues
(finished cells are kept, the killed one resumes), the table is right; ``--collect`` rebuilds it from results."""
from __future__ import annotations

import csv
import json
import statistics
from dataclasses import dataclass, field

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from lavo_zoo.attention import AttentionSpec
from lavo_zoo.compare import Efficiency, attention_setup, collect, run_study, separation, summarise, write_table
from lavo_zoo.config import RunConfig
from lavo_zoo.engine.recipe import RECIPES, Recipe


@dataclass
class SeqModelConfig:
    embed_dim: int = 8
    num_heads: int = 2
    attention: AttentionSpec = field(default_factory=lambda: AttentionSpec("sdpa"))


@dataclass
class SeqConfig(RunConfig):
    recipe: str = "compare_toy"
    model: SeqModelConfig = field(default_factory=SeqModelConfig)


class _Failure(Exception):
    pass


class SeqRecipe(Recipe):
    """Regress the mean of a random sequence through one attention layer (test-only)."""

    name = "compare_toy"
    description = "test-only sequence regression"
    config_class = SeqConfig
    evaluator = "mean_loss"
    fail_at_call = 0  # raise _Failure on this call of training_loss (0 = never): a run killed mid-training
    calls = 0

    def build_model(self, cfg):
        m = cfg.model
        return nn.ModuleDict({"attn": m.attention.build(m.embed_dim, m.num_heads, "noncausal"),
                              "head": nn.Linear(m.embed_dim, 1)})

    def build_dataset(self, cfg, split):
        g = torch.Generator().manual_seed({"train": 0, "validation": 1, "test": 2}[split])
        x = torch.randn(32, 6, cfg.model.embed_dim, generator=g)
        return TensorDataset(x, x.mean((1, 2))[:, None])

    def _out(self, model, x):
        return model["head"](model["attn"](x).mean(1))

    def training_loss(self, model, batch):
        type(self).calls += 1
        if type(self).calls == type(self).fail_at_call:
            raise _Failure("killed")
        x, y = batch
        return nn.functional.mse_loss(self._out(model, x), y), {}

    def predict(self, model, batch):
        x, y = batch
        return ((self._out(model, x) - y) ** 2).mean(1), None


@pytest.fixture
def study(tmp_path):
    RECIPES.register("compare_toy", SeqRecipe)
    config = tmp_path / "seq.yaml"
    config.write_text("recipe: compare_toy\ntrain: {max_steps: 3, batch_size: 8, save_every: 1, eval_every: 0, "
                      "log_every: 1}\n")
    yield config
    RECIPES._entries.pop("compare_toy", None)
    SeqRecipe.fail_at_call, SeqRecipe.calls = 0, 0


def _study(config, out):
    return run_study(str(config), ["sdpa", "local"], [1, 2], None, [], {"local": {"window_size": 3}}, out, "cpu",
                     "test")


def test_interrupted_study_keeps_finished_cells_and_resumes_the_killed_one(study, tmp_path):
    out = tmp_path / "cmp"
    SeqRecipe.fail_at_call = 3 + 3 + 2  # two cells finish (3 steps each), the third dies in its second step
    with pytest.raises(_Failure):
        _study(study, out)
    finished = sorted(p.parent.name for p in (out / "cells").glob("*/cell.json"))
    assert finished == ["sdpa-seed1", "sdpa-seed2"]
    kept = {p: p.stat().st_mtime_ns for p in (out / "cells").glob("sdpa-*/metrics.jsonl")}
    assert (out / "cells" / "local-seed1" / "checkpoints" / "step-1").is_dir()  # the killed cell saved step 1
    SeqRecipe.fail_at_call, SeqRecipe.calls = 0, 0
    records = _study(study, out)
    assert {p: p.stat().st_mtime_ns for p in kept} == kept  # finished cells were not retrained
    assert SeqRecipe.calls == 2 + 3  # the killed cell resumed at step 2; the last cell trained from scratch
    assert [(r["attention"], r["seed"]) for r in records] == [("sdpa", 1), ("sdpa", 2), ("local", 1), ("local", 2)]
    for r in records:
        assert r["parameters"] > 0 and r["train_time_s"] > 0 and r["peak_memory_bytes"] >= 0
        saved = json.loads((out / "cells" / f"{r['attention']}-seed{r['seed']}" / "results.json").read_text())
        assert saved["config"]["model"]["attention"]["name"] == r["attention"]
        assert saved["config"]["train"]["seed"] == r["seed"]
    # the resumed cell ends where an uninterrupted run of the same cell ends
    fresh = _study(study, tmp_path / "fresh")
    by_cell = {(r["attention"], r["seed"]): r["metrics"]["loss"]["value"] for r in fresh}
    for r in records:
        assert r["metrics"]["loss"]["value"] == by_cell[(r["attention"], r["seed"])]

    paths = write_table(records, out, "test study")
    assert [p.name for p in paths] == ["table.md", "table.csv", "chart.png"] and all(p.stat().st_size for p in paths)
    rows = {row["attention"]: row for row in csv.DictReader((out / "table.csv").open())}
    for name in ("sdpa", "local"):
        losses = [r["metrics"]["loss"]["value"] for r in records if r["attention"] == name]
        assert float(rows[name]["loss_mean"]) == pytest.approx(statistics.fmean(losses))
        assert float(rows[name]["loss_std"]) == pytest.approx(statistics.stdev(losses))
    best = min(rows, key=lambda n: float(rows[n]["loss_mean"]))
    best_line = next(line for line in (out / "table.md").read_text().splitlines() if line.startswith(f"| {best} "))
    assert "**" in best_line  # lower loss is better: the lower mean is marked


def test_collect_rebuilds_the_table_from_results(study, tmp_path):
    out = tmp_path / "cmp"
    records = _study(study, out)
    collected = collect([out / "cells" / "sdpa-seed1" / "results.json", out / "cells" / "local-seed2"])
    assert sorted(r["label"] for r in collected) == ["local", "sdpa"]
    again = collect([out])  # a compare folder: its cell records
    assert len(again) == len(records)
    run = out / "cells" / "local-seed2"  # a run folder without its cell record: its results JSON, not checkpoint meta
    (run / "cell.json").unlink()
    assert any("metrics" in json.loads(p.read_text()) for p in run.glob("checkpoints/*/meta.json"))
    assert [r["source"] for r in collect([run])] == [str(run / "results.json")]


def test_refusals(study, tmp_path):
    from lavo_zoo.errors import ConfigError, UsageError
    with pytest.raises(UsageError, match="not sites"):
        run_study(str(study), ["sdpa"], [1], "encoder_self", [], {}, tmp_path / "x", "cpu", "test")
    with pytest.raises(UsageError, match="-o names performer"):
        run_study(str(study), ["sdpa"], [1], None, [], {"performer": {"num_features": 4}}, tmp_path / "x", "cpu",
                  "test")
    with pytest.raises((UsageError, ConfigError)):  # an unknown attention is refused before anything trains
        run_study(str(study), ["sdpa", "nosuch"], [1], None, [], {}, tmp_path / "y", "cpu", "test")
    assert not (tmp_path / "y" / "cells").exists()


def test_repeated_runs_of_the_configs_own_attention(study, tmp_path):
    """Without --attentions: one row, the config's attention, over the seeds (Informer's --itr): mean and spread of
    each metric; more seeds later keep the finished ones."""
    out = tmp_path / "rep"
    records = run_study(str(study), [], [1, 2], None, [], {}, out, "cpu", "test")
    assert [(r["attention"], r["seed"]) for r in records] == [("sdpa", 1), ("sdpa", 2)]
    kept = (out / "cells" / "sdpa-seed1" / "cell.json").read_text()
    run_study(str(study), [], [1, 2, 3], None, [], {}, out, "cpu", "test")
    assert (out / "cells" / "sdpa-seed1" / "cell.json").read_text() == kept
    write_table([json.loads(p.read_text()) for p in sorted(out.rglob("cell.json"))], out, "repeats")
    rows = list(csv.DictReader((out / "table.csv").open()))
    values = [json.loads(p.read_text())["metrics"]["loss"]["value"] for p in sorted(out.rglob("cell.json"))]
    assert len(rows) == 1 and rows[0]["seeds"] == "3"
    assert float(rows[0]["loss_mean"]) == pytest.approx(statistics.fmean(values))
    assert float(rows[0]["loss_std"]) == pytest.approx(statistics.stdev(values))


def test_a_cell_trained_with_another_config_is_refused_or_rerun(study, tmp_path):
    from lavo_zoo.errors import UsageError

    out = tmp_path / "cmp"
    run_study(str(study), ["sdpa"], [1], None, ["train.max_steps=2"], {}, out, "cpu", "test")
    first = (out / "cells" / "sdpa-seed1" / "cell.json").read_text()
    with pytest.raises(UsageError, match=r"train\.max_steps: 2 there, 3 now.*--rerun"):
        run_study(str(study), ["sdpa"], [1], None, ["train.max_steps=3"], {}, out, "cpu", "test")
    assert (out / "cells" / "sdpa-seed1" / "cell.json").read_text() == first  # nothing lost
    (record,) = run_study(str(study), ["sdpa"], [1], None, ["train.max_steps=3"], {}, out, "cpu", "test", rerun=True)
    steps = [json.loads(line)["step"] for line in (out / "cells" / "sdpa-seed1" / "metrics.jsonl").read_text()
             .splitlines() if json.loads(line).get("split") == "train"]
    assert max(steps) == 3 and record["overrides"][-1] == "train.seed=1"


def test_collect_mixes_compare_folders_and_results_files(study, tmp_path):
    """A compare folder and a single results JSON together (metrics one of them lacks are left blank)."""
    out = tmp_path / "cmp"
    _study(study, out)
    extra = tmp_path / "x.json"
    extra.write_text(json.dumps({"metrics": {"other": {"value": 1.0, "higher_is_better": True}},
                                 "config": {"model": {"attention": {"name": "performer"}}, "train": {"seed": 1}}}))
    paths = write_table(collect([out, extra]), tmp_path / "table", "mixed")
    table = paths[0].read_text()
    assert "| performer |" in table and "| sdpa |" in table


TINY_EFFICIENCY = Efficiency(lengths=(8, 64), repeats=1, warmup=0, isolate=False)  # in process: milliseconds


@pytest.fixture
def in_process(monkeypatch):
    """Isolated efficiency measurements run in this process (isolation is tested in tests/bench)."""
    from lavo_zoo.bench import attention

    monkeypatch.setattr(attention, "run_isolated", lambda target, spec, timeout=None: attention.measure(spec))


def test_efficiency_lengths_beside_the_metrics_kept_and_collected(study, tmp_path, monkeypatch):
    out = tmp_path / "cmp"
    records = run_study(str(study), ["sdpa", "local"], [1, 2], None, [], {"local": {"window_size": 3}}, out, "cpu",
                        "test", efficiency=TINY_EFFICIENCY)
    found = {r["attention"]: r["efficiency"] for r in records}
    assert found["sdpa"] == {"is_baseline": True}  # softmax itself: "-"
    local = found["local"]
    assert local["time"]["bound"] in ("crossing", "at_start", "never") and local["swept"] == [8, 64]
    cached = json.loads((out / "efficiency" / "local.json").read_text())  # the study's layer, measured with sdpa
    assert {k: cached["key"][k] for k in ("attention", "options", "embed_dim", "heads", "pattern", "lengths",
                                          "mode")} == {"attention": "local", "options": {"window_size": 3},
                                                       "embed_dim": 8, "heads": 2, "pattern": "noncausal",
                                                       "lengths": [8, 64], "mode": "fwdbwd"}
    assert {r["attention"] for r in cached["results"]} == {"local", "sdpa"}
    assert not (out / "efficiency" / "sdpa.json").exists()

    write_table(records, out, "test study")
    lines = (out / "table.md").read_text().splitlines()
    header = [c.strip() for c in lines[2].strip("|").split("|")]
    assert header[2:5] == ["loss (lower is better)", "faster than softmax from", "smaller than softmax from"]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")] for line in lines[4:6]}
    assert rows["sdpa"][3:5] == ["-", "-"] and rows["local"][3:5] == [local["time"]["text"], local["memory"]["text"]]
    assert "Faster / smaller than softmax from" in (out / "table.md").read_text()
    table = {row["attention"]: row for row in csv.DictReader((out / "table.csv").open())}
    assert table["local"]["faster than softmax from"] == local["time"]["text"]
    assert table["sdpa"]["smaller than softmax from"] == "-"

    from lavo_zoo.bench import attention

    def no_measuring(*args, **kwargs):
        raise AssertionError("measured again")
    monkeypatch.setattr(attention, "run_sweep", no_measuring)
    again = run_study(str(study), ["sdpa", "local"], [1, 2], None, [], {"local": {"window_size": 3}}, out, "cpu",
                      "test", efficiency=TINY_EFFICIENCY)  # a re-run keeps the measurement
    assert [r["efficiency"] for r in again] == [r["efficiency"] for r in records]
    collected = collect([out])  # so does --collect
    assert {r["label"]: r["efficiency"] for r in collected} == found
    assert all("efficiency" not in r for r in collect([out], efficiency=False))
    monkeypatch.undo()
    other = Efficiency(lengths=(8, 16), repeats=1, warmup=0, isolate=False)  # other settings: measured again
    run_study(str(study), ["sdpa", "local"], [1], None, [], {"local": {"window_size": 3}}, out, "cpu", "test",
              efficiency=other)
    assert json.loads((out / "efficiency" / "local.json").read_text())["key"]["lengths"] == [8, 16]


def test_repeated_runs_measure_the_configs_own_attention(study, tmp_path):
    out = tmp_path / "rep"
    (record,) = run_study(str(study), [], [1], None, ["model.attention.name=local", "model.attention.window_size=3"],
                          {}, out, "cpu", "test", efficiency=TINY_EFFICIENCY)
    assert record["attention"] == "local" and record["efficiency"]["memory"]["text"]
    key = json.loads((out / "efficiency" / "local.json").read_text())["key"]
    assert key["options"] == {"window_size": 3} and key["pattern"] == "noncausal"


def test_compare_command_measures_and_switches_off_the_efficiency_lengths(study, tmp_path, in_process):
    from lavo_zoo.cli import main

    out = tmp_path / "cmp"
    args = ["compare", str(study), "--attentions", "local,sdpa", "-o", "local.window_size=3", "--out", str(out),
            "--device", "cpu"]
    assert main([*args, "--efficiency-lengths", "0"]) == 2 and not (out / "cells").exists()
    assert main([*args, "--efficiency-lengths", "8,32"]) == 0
    rows = {row["attention"]: row for row in csv.DictReader((out / "table.csv").open())}
    assert rows["sdpa"]["faster than softmax from"] == "-" and rows["local"]["faster than softmax from"]
    assert json.loads((out / "efficiency" / "local.json").read_text())["key"]["isolate"] is True  # CPU: isolated
    assert main([*args, "--no-efficiency"]) == 0
    assert "softmax" not in (out / "table.md").read_text()
    assert main(["compare", "--collect", str(out), "--out", str(tmp_path / "table")]) == 0
    assert "faster than softmax from" in (tmp_path / "table" / "table.md").read_text()


@pytest.mark.parametrize("config, site, pattern", [
    ("summarization/tiny-sdpa", "decoder_self", "causal"),
    ("summarization/tiny-sdpa", "cross", "cross"),
    ("point_cloud/tiny-lavo", "decoder_self", "noncausal"),  # PoinTr's queries are a set
])
def test_attention_setup_uses_the_sites_pattern_and_the_models_sizes(config, site, pattern):
    from lavo_zoo.engine.recipe import resolve_config

    recipe, cfg = resolve_config(config, [])
    setup = attention_setup(recipe, cfg, f"model.attention.{site}")
    spec = getattr(cfg.model.attention, site)
    assert setup == {"attention": spec.name, "options": dict(spec.options), "embed_dim": cfg.model.embed_dim,
                     "heads": cfg.model.num_heads, "pattern": pattern}


@pytest.mark.slow
@pytest.mark.parametrize("config, overrides", [
    ("lm/tiny-lavo", ["model.num_layers=1", "model.embed_dim=64", "model.num_heads=2", "data.block_size=32",
                      "train.batch_size=2", "eval.length_factors=[1]", "eval.max_tokens=256"]),
    ("time_series/tiny-lavo", ["--site", "cross", "data.builtin_size=600", "data.seq_len=24", "data.label_len=12",
                               "data.pred_len=6"]),
])
def test_compare_runs_recipes_whose_sizes_come_from_the_data(tmp_path, config, overrides, in_process):
    """The model's data-derived sizes (vocabulary, channels) are resolved before the parameters are counted (and
    before the attention layer of the efficiency lengths is read from the built model)."""
    from lavo_zoo.cli import main

    assert main(["compare", config, "--attentions", "lavo,sdpa", "--out", str(tmp_path / "cmp"), "--max-steps", "2",
                 "--max-batches", "1", "--device", "cpu", "--efficiency-lengths", "8,16", "train.eval_every=0",
                 "train.save_every=2", *overrides]) == 0
    rows = list(csv.DictReader((tmp_path / "cmp" / "table.csv").open()))
    assert [r["attention"] for r in rows] == ["lavo", "sdpa"] and all(int(float(r["parameters"])) > 0 for r in rows)
    assert rows[1]["faster than softmax from"] == "-" and rows[0]["faster than softmax from"]
    key = json.loads((tmp_path / "cmp" / "efficiency" / "lavo.json").read_text())["key"]
    assert key["pattern"] == ("cross" if "--site" in overrides else "causal") and key["embed_dim"] > 0


def _records(values: dict[str, list[float]], higher: bool = False) -> list[dict]:
    return [{"attention": name, "seed": seed, "metrics": {"mse": {"value": v, "higher_is_better": higher}}}
            for name, vs in values.items() for seed, v in enumerate(vs, 1)]


@pytest.mark.parametrize("higher", [False, True])
def test_the_table_says_whether_softmax_beats_the_mean_control_by_two_std(tmp_path, higher):
    sign = -1 if higher else 1  # the same study with the metric's direction flipped
    control = [sign * v for v in (0.50, 0.52, 0.54)]  # std 0.02
    cases = {"wide": ([sign * v for v in (0.40, 0.41, 0.42)], True),  # better by 0.11 = 5.5 std
             "close": ([sign * v for v in (0.48, 0.49, 0.50)], False),  # better by 0.03 = 1.5 std
             "worse": ([sign * v for v in (0.60, 0.61, 0.62)], False),
             "two seeds": ([sign * v for v in (0.40, 0.41)], False)}  # far apart, but fewer than three seeds
    for case, (softmax, separates) in cases.items():
        rows, directions = summarise(_records({"sdpa": softmax, "mean": control, "lavo": control}, higher))
        verdict = separation(rows, directions)["mse"]
        assert verdict["separates"] is separates, case
        assert verdict["gap"] == pytest.approx(statistics.fmean(control) * sign - statistics.fmean(softmax) * sign)
        out = tmp_path / case
        write_table(_records({"sdpa": softmax, "mean": control}, higher), out, case)
        note = next(line for line in (out / "table.md").read_text().splitlines() if line.startswith("- mse:"))
        assert ("does NOT separate" not in note) is separates, note
    breakdown = [{**r, "metrics": {**r["metrics"], "mse@chair": r["metrics"]["mse"]}}
                 for r in _records({"sdpa": [0.4, 0.41, 0.42], "mean": [0.5, 0.51, 0.5]})]
    assert list(separation(*summarise(breakdown))) == ["mse"]  # per-category breakdowns get no verdict
    rows, directions = summarise(_records({"sdpa": [0.4, 0.41, 0.42], "lavo": [0.5, 0.51, 0.5]}))
    assert separation(rows, directions) == {}  # no control in the study: no verdict
    write_table(_records({"sdpa": [0.4, 0.41, 0.42], "lavo": [0.5, 0.51, 0.5]}), tmp_path / "none", "none")
    assert "separate" not in (tmp_path / "none" / "table.md").read_text()


def test_collected_studies_that_share_an_attention_get_rows_told_apart_by_their_settings(tmp_path):
    def cell(seed: int, extra: list[str], config: str = "tts/tiny-sdpa", value: float = 1.0) -> dict:
        return {"attention": "lavo", "seed": seed, "config": config, "metrics": {"mcd": {"value": value + seed,
                "higher_is_better": False}},
                "overrides": ["eval.max_frames=1000", *extra, f"train.seed={seed}"]}

    records = [cell(s, ["model.attention.decoder_self.window_size=8"]) for s in (1, 2)] + \
        [cell(s, ["model.attention.decoder_self.window_size=32"], value=5.0) for s in (1, 2)]
    rows, _ = summarise(records)
    assert [(r["attention"], r["seeds"]) for r in rows] == [("lavo (window_size=8)", 2), ("lavo (window_size=32)", 2)]
    assert rows[1]["mcd"][0] == pytest.approx(6.5)
    records = [cell(1, [], config="summarization/tiny-lavo-noncausal"), cell(1, [], config="summarization/tiny-sdpa")]
    assert [r["attention"] for r in summarise(records)[0]] == ["lavo (summarization/tiny-lavo-noncausal)",
                                                             "lavo (summarization/tiny-sdpa)"]
    same = [cell(s, ["x.window_size=8"]) for s in (1, 2, 3)]  # one study over seeds: one row, plain label
    assert [r["attention"] for r in summarise(same)[0]] == ["lavo"]
