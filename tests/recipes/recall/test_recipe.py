"""The recall recipe end to end on tiny built-in data: a short training raises accuracy; the evaluator's groups are
each answer's task, distance and position bucket; `eval`, `answer` + `score accuracy` agree, for the noncausal and
cross tasks too, whose configs keep the recipe contract; the task fixes the form of the attention; `recall-plot`
measures each setting's state and averages its seeds, one line per form of a mechanism."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from lavo_zoo.attention import AttentionSpec
from lavo_zoo.cli import main
from lavo_zoo.config import to_dict
from lavo_zoo.engine.configs import config_from_dict
from lavo_zoo.engine.trainer import Trainer
from lavo_zoo.errors import InputError
from lavo_zoo.evaluators.classification import position_bucket, signed_distance_bucket
from lavo_zoo.recipes.recall.data import IGNORE, TASKS
from lavo_zoo.recipes.recall.model import state_bytes
from lavo_zoo.recipes.recall.plot import markdown_table, plot_state, series_name, state_rows


def tiny(attention: dict | None = None, steps: int = 2, attention_schedule: str | None = None, **data):
    return config_from_dict({
        "recipe": "recall",
        "data": {"task": "mqar", "vocab_size": 16, "seq_len": 16, "num_pairs": 2, "min_distance": 4,
                 "builtin_size": 512, "eval_size": 64, **data},
        "model": {"embed_dim": 32, "ffn_dim": 64, "num_heads": 2, "embed_dropout": 0.0,
                  "attention": attention or {"name": "sdpa"}, "attention_schedule": attention_schedule},
        "train": {"batch_size": 32, "max_epochs": None, "max_steps": steps, "lr": 3e-3, "warmup_steps": 10,
                  "eval_every": steps, "eval_per_epoch": False, "eval_batches": 0, "save_every": steps,
                  "log_every": steps}})


def test_a_short_training_raises_accuracy(tmp_path):
    """80 steps lift validation accuracy above 1/8, the best guess among the 8 values without recall."""
    recipe, cfg = tiny(steps=80)
    cfg = recipe.resolve(cfg)
    cfg.train.batch_size = 16
    torch.manual_seed(0)
    before = recipe.evaluate(recipe.build_model(cfg), cfg, "validation", torch.device("cpu")).compute()
    after = Trainer(recipe, cfg, tmp_path / "run", device="cpu").fit()
    assert after["accuracy"] > max(before["accuracy"] + 0.15, 0.2), (before, after)


SITES = {"encoder_self": {"name": "sdpa"}, "decoder_self": {"name": "sdpa"}, "cross": {"name": "sdpa"}}


@pytest.mark.parametrize("task", TASKS)
def test_predictions_are_grouped_by_task_distance_and_position(task):
    recipe, cfg = tiny(SITES if task == "cross_mqar" else None, task=task, vocab_size=12, seq_len=20, num_pairs=3,
                       min_distance=5)
    cfg = recipe.resolve(cfg)
    dataset = recipe.build_dataset(cfg, "test")
    batch = recipe.collate([dataset[i] for i in range(5)])
    predicted, targets = recipe.predict(recipe.build_model(cfg), batch)
    length = batch["tokens"].shape[1]
    expected = [(task, signed_distance_bucket(int(batch["distances"][b, t])),
                 position_bucket(int(batch["positions"][b, t])), int(batch["targets"][b, t]))
                for b in range(5) for t in range(length) if batch["targets"][b, t] != IGNORE]
    assert [(*g, int(i)) for g, i in zip(targets["groups"], targets["ids"])] == expected
    assert predicted.shape == targets["ids"].shape
    assert min(abs(int(d)) for d in batch["distances"][batch["targets"] != IGNORE]) >= 5 or task == "cross_mqar"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A two-step run on tiny MQAR and its test split written to disk."""
    folder = tmp_path_factory.mktemp("recall")
    recipe, cfg = tiny()
    Trainer(recipe, recipe.resolve(cfg), folder / "run", device="cpu").fit()
    assert main(["data", "recall/mqar", "--out", str(folder / "data"), "--size", "8"]) == 0
    return folder, recipe.data_path(cfg.data)


def test_eval_and_score_on_the_answers_agree(trained, capsys):
    folder, data = trained
    checkpoint = folder / "run" / "checkpoints" / "last"
    assert main(["eval", str(checkpoint), "--out", str(folder / "eval.json")]) == 0
    answers = folder / "answers.jsonl"
    assert main(["answer", str(checkpoint), "--data", str(data / "test.jsonl"), "--out", str(answers)]) == 0
    assert main(["score", "accuracy", "--pred", str(answers), "--ref", str(data / "test.jsonl"),
                 "--out", str(folder / "score.json")]) == 0
    evaluated, scored = (json.loads((folder / f).read_text()) for f in ("eval.json", "score.json"))
    assert evaluated["num_samples"] == scored["num_samples"] == 64 * 2
    assert {k: v["value"] for k, v in evaluated["metrics"].items()} == pytest.approx(
        {k: v["value"] for k, v in scored["metrics"].items()})
    assert {"accuracy", "accuracy@mqar"} <= set(scored["metrics"])
    assert any(k.startswith("accuracy@dist:") for k in scored["metrics"])
    assert main(["answer", str(checkpoint), "--data", str(data / "test.jsonl"), "--out", str(answers)]) == 2
    # `lavo-zoo data recall` writes Zoology's setting (a vocabulary of 8,192): not what this model reads
    assert main(["answer", str(checkpoint), "--data", str(folder / "data" / "test.jsonl"),
                 "--out", str(folder / "other.jsonl")]) == 1
    assert "but data.seq_len is 16" in capsys.readouterr().err


def test_the_predictor_answers_raw_sequences(trained):
    import lavo_zoo

    folder, data = trained
    model = lavo_zoo.load(folder / "run", device="cpu")
    rows = model.answer_file(data / "test.jsonl")
    first = json.loads((data / "test.jsonl").read_text().splitlines()[0])
    assert rows[0]["queries"] == first["queries"]
    assert model.answer(first["tokens"], first["queries"]) == rows[0]["answers"]
    assert model.answer([first["tokens"]] * 2, [first["queries"], first["queries"][::-1]]) == \
        [rows[0]["answers"], rows[0]["answers"][::-1]]
    assert model.answer(np.array(first["tokens"]), np.array(first["queries"])) == rows[0]["answers"]
    with pytest.raises(ValueError, match="query positions"):
        model.answer(first["tokens"], [99])
    with pytest.raises(InputError, match="batch_size must be an integer from 1"):
        model.answer(first["tokens"], first["queries"], batch_size=0)
    with torch.no_grad():
        next(model.model.parameters()).fill_(float("nan"))
    with pytest.raises(InputError, match="not finite"):
        model.answer(first["tokens"], first["queries"])


TOKENS = [1, 2, 3, 4, 5, 6, 7, 8]


@pytest.mark.parametrize("tokens, queries, match", [
    (TOKENS, [2.5], r"queries\[0\] must be a position \(an int\), got float 2.5"),   # never truncated to 2
    (TOKENS, [2.0], r"queries\[0\] must be a position"),
    (TOKENS, [True], r"queries\[0\] must be a position .* bool True"),
    (TOKENS, np.array([2.5]), r"queries\[0\] must be a position"),
    ([1.0, 2.5, 3.0], [1], r"tokens\[0\] must be a token id \(an int\), got float 1.0"),
    ([1, float("nan"), 2], [1], r"tokens\[1\] must be a token id .* nan"),
    ([True, False], [1], r"tokens\[0\] must be a token id .* bool"),
    ([1, None, 2], [1], r"tokens\[1\] must be a token id .* NoneType"),
    ("1 2 3", [1], r"tokens must be a sequence of token ids .* got str"),
    (None, [1], r"tokens must be a sequence of token ids .* got NoneType"),
    ([[1, [2]], [3]], [[0], [0]], r"tokens\[0\] must be a sequence of token ids"),
    ([], [], r"tokens is empty"),
    (TOKENS, 2, r"queries must be a list of positions .* a single position is given as a list of one"),
    (TOKENS, None, r"queries must be a list of positions .* got NoneType"),
    ([TOKENS, TOKENS], [1, 2], r"one list of positions per sequence \(2 lists\), got one flat list"),
    ([TOKENS, TOKENS], [[1], 2], r"queries\[1\] must be a list of positions"),
])
def test_the_predictor_refuses_malformed_inputs_naming_the_argument(trained, tokens, queries, match):
    """Python API misuse is an InputError naming the argument and the element, never a TypeError, IndexError or a
    silently truncated position."""
    import lavo_zoo

    model = lavo_zoo.load(trained[0] / "run", device="cpu")
    with pytest.raises(InputError, match=match):
        model.answer(tokens, queries)


def _cell(folder: Path, cfg, name: str, overrides: list[str], accuracy: float, seed: int) -> None:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(json.dumps(to_dict(cfg)))  # JSON is YAML
    (folder / "cell.json").write_text(json.dumps({
        "attention": name, "seed": seed, "overrides": [*overrides, f"train.seed={seed}"],
        "metrics": {"accuracy": {"value": accuracy, "higher_is_better": True},
                    "accuracy@dist:5-8": {"value": accuracy / 2, "higher_is_better": True}}}))


def test_recall_plot_measures_each_setting_and_averages_its_seeds(tmp_path):
    lavo = {"name": "lavo", "num_bases": 4, "window_size": 4}
    for seed, accuracy in ((1, 0.2), (2, 0.4)):
        recipe, cfg = tiny(lavo)
        _cell(tmp_path / "study" / f"lavo-seed{seed}", recipe.resolve(cfg), "lavo",
              ["model.attention.name=lavo", "model.attention.num_bases=4"], accuracy, seed)
    recipe, cfg = tiny()
    _cell(tmp_path / "study" / "sdpa-seed1", recipe.resolve(cfg), "sdpa", ["model.attention.name=sdpa"], 0.9, 1)
    recipe, cfg = tiny(lavo, attention_schedule="lavo+sdpa")
    _cell(tmp_path / "study" / "hybrid-lavo+sdpa-seed1", recipe.resolve(cfg), "hybrid:lavo+sdpa",
          ["model.attention_schedule=lavo+sdpa"], 0.5, 1)
    rows = state_rows([tmp_path / "study"])
    assert [(r["attention"], r["setting"], r["seeds"]) for r in rows] == [
        ("hybrid:lavo+sdpa", "", [1]), ("lavo", "num_bases=4", [1, 2]), ("sdpa", "", [1])]
    hybrid, lavo_row, sdpa_row = rows
    assert [(layer["attention"], layer["grows"]) for layer in hybrid["layers"]] == [("lavo", False), ("sdpa", True)]
    assert hybrid["state_bytes"] == lavo_row["state_bytes"] // 2 + sdpa_row["state_bytes"] // 2  # a layer of each
    assert lavo_row["metrics"]["accuracy"] == pytest.approx((0.3, np.std([0.2, 0.4], ddof=1)))
    assert (lavo_row["state_bytes"], lavo_row["grows"]) == state_bytes(recipe.build_model(tiny(lavo)[1]), 16)
    assert sdpa_row["grows"] and not lavo_row["grows"]
    table = markdown_table(rows)
    assert "| lavo | num_bases=4 |" in table and "0.300 ± 0.141" in table and "grows with T" in table
    assert "| 0-1 lavo 1.0 |" in table and "| 0-1 sdpa 4.0 (grows) |" in table  # each layer's state (KiB)
    assert "| hybrid:lavo+sdpa | defaults | 5.0 (grows with T; at T=16) | 0 lavo 1.0, 1 sdpa 4.0 (grows) |" in table
    assert plot_state(rows).startswith(b"\x89PNG")
    out = tmp_path / "state.png"
    assert main(["recall-plot", str(tmp_path / "study"), "--out", str(out), "--table", str(tmp_path / "t.md")]) == 0
    assert out.read_bytes().startswith(b"\x89PNG") and (tmp_path / "t.md").read_text() == table
    assert main(["recall-plot", str(tmp_path / "study"), "--out", str(out)]) == 2  # never replaced silently


def test_recall_plot_counts_each_cell_once_however_many_paths_reach_it(tmp_path, capsys):
    """The same study twice, a study and one of its cells, a link to it, a copied cell: one run, one seed (not
    "2 seeds, ± 0.000"), with a note for each repeat; a damaged cell record is named with its line."""
    lavo = {"name": "lavo", "num_bases": 4, "window_size": 4}
    recipe, cfg = tiny(lavo)
    study = tmp_path / "study"
    _cell(study / "lavo-seed1", recipe.resolve(cfg), "lavo", ["model.attention.name=lavo"], 0.25, 1)
    (tmp_path / "link").symlink_to(study)
    shutil.copytree(study / "lavo-seed1", tmp_path / "copy")
    rows = state_rows([study, study, study / "lavo-seed1", study / "lavo-seed1" / "cell.json", tmp_path / "link",
                       tmp_path / "copy"])
    assert [(r["attention"], r["seeds"]) for r in rows] == [("lavo", [1])]
    assert rows[0]["metrics"]["accuracy"] == (0.25, 0.0)
    assert capsys.readouterr().err.count("counted once") == 5
    assert main(["recall-plot", str(study), str(tmp_path / "link"), "--out", str(tmp_path / "s.png")]) == 0
    assert "| lavo | defaults | " in capsys.readouterr().out
    (study / "lavo-seed1" / "cell.json").write_text('{"attention": "lavo",\n "metrics": {')
    assert main(["recall-plot", str(study), "--out", str(tmp_path / "t.png")]) == 2
    assert f"{study / 'lavo-seed1' / 'cell.json'}, line 2" in capsys.readouterr().err


def test_recall_plot_never_writes_over_its_inputs_even_with_overwrite(tmp_path, capsys):
    """`recall-plot --table` naming a study cell's own file (even one that reads like a table of ours), a study given
    as an input, another command's table or a figure's name is refused before any work, with or without --overwrite,
    and nothing changes; the command's own earlier table is what --overwrite replaces."""
    recipe, cfg = tiny({"name": "lavo", "num_bases": 4, "window_size": 4})
    study = tmp_path / "study"
    cell = study / "cells" / "lavo-seed1"
    _cell(cell, recipe.resolve(cfg), "lavo", ["model.attention.name=lavo"], 0.25, 1)
    (study / "table.md").write_text("# compare's table\n\n| attention | seeds | accuracy |\n|---|---|---|\n")
    (cell / "notes.md").write_text("| attention | setting |\n")  # a cell's own file, even one that looks like ours
    before = {p: p.read_bytes() for p in study.rglob("*") if p.is_file()}
    png = tmp_path / "s.png"
    for table, inputs, said in [
            (cell / "cell.json", [study], "is a file of the study cell"),
            (cell / "config.yaml", [study], "is a file of the study cell"),
            (cell / "notes.md", [study], "is a file of the study cell"),
            (cell / "cell.json", [cell / "cell.json"], "is the study"),
            (study / "table.md", [study], "is not a Markdown table of recall-plot"),
            (png, [study], ".png does not name")]:
        for extra in ([], ["--overwrite"]):
            code = main(["recall-plot", *map(str, inputs), "--out", str(png), "--table", str(table), *extra])
            err = capsys.readouterr().err
            assert code == 2 and said in err, (table, extra, err)
            assert {p: p.read_bytes() for p in study.rglob("*") if p.is_file()} == before
            assert not png.exists()
    mine = tmp_path / "state.md"
    for extra in ([], ["--overwrite"]):
        assert main(["recall-plot", str(study), "--out", str(png), "--table", str(mine), *extra]) == 0
        assert mine.read_text().startswith("| attention | setting |") and png.read_bytes().startswith(b"\x89PNG")
    assert {p: p.read_bytes() for p in study.rglob("*") if p.is_file()} == before


def test_a_batch_that_cannot_fit_is_refused_before_it_runs(trained, monkeypatch):
    import lavo_zoo
    from lavo_zoo.engine import memory

    model = lavo_zoo.load(trained[0] / "run", device="cpu")
    monkeypatch.setattr(memory, "available_memory", lambda device: 10_000_000)
    monkeypatch.setattr(model, "model", lambda *a: pytest.fail("the model ran"))
    with pytest.raises(InputError, match=r"answering batches of up to 2 sequence\(s\) of 50,000 tokens needs about "
                                         ".* lower batch_size"):
        model.answer([[1] * 50_000] * 3, [[0]] * 3, batch_size=2)


def test_answer_on_a_split_of_another_length_says_what_the_model_reads(trained, tmp_path, capsys):
    """The checkpoint's settings are fixed: `answer` is not told to set data.seq_len, which it has no way to do."""
    folder, _ = trained
    assert main(["answer", str(folder / "run" / "checkpoints" / "last"), "--data", str(folder / "data" / "test.jsonl"),
                 "--out", str(tmp_path / "a.jsonl")]) == 1
    err = capsys.readouterr().err
    assert "this model was trained on 16-token examples over ids 0..15" in err and "set data.seq_len" not in err


# ----------------------------------------------------------------------------------- noncausal and cross recall
# the new tasks' CPU configs, made tiny: smaller data, a one-step run
SMALL = ["data.builtin_size=64", "data.eval_size=8", "data.seq_len=16", "data.num_pairs=3", "data.num_queries=2",
         "data.start_pairs=1", "data.vocab_size=16", "model.embed_dim=16", "model.ffn_dim=32", "train.batch_size=4",
         "eval.batch_size=4", "train.warmup_steps=0"]
PATTERN_CONFIGS = ["recall/tiny-noncausal-sdpa", "recall/tiny-cross-sdpa"]


@pytest.mark.parametrize("config", PATTERN_CONFIGS)
def test_each_pattern_trains_evaluates_answers_and_scores_through_the_cli(config, tmp_path):
    """One training step, `eval`, `answer` on the test split and `score accuracy` on the answers: the same figures,
    every answer grouped by task, distance and position; the predictor answers a raw example as `answer` did."""
    import lavo_zoo
    from lavo_zoo.engine.configs import resolve_config

    run = tmp_path / "run"
    assert main(["train", config, *SMALL, "--out", str(run), "--max-steps", "1"]) == 0
    checkpoint = run / "checkpoints" / "last"
    assert main(["eval", str(checkpoint), "--out", str(tmp_path / "eval.json")]) == 0
    recipe, cfg = resolve_config(config, SMALL)
    split = recipe.data_path(cfg.data) / "test.jsonl"
    answers = tmp_path / "answers.jsonl"
    assert main(["answer", str(checkpoint), "--data", str(split), "--out", str(answers)]) == 0
    assert main(["score", "accuracy", "--pred", str(answers), "--ref", str(split),
                 "--out", str(tmp_path / "score.json")]) == 0
    evaluated, scored = (json.loads((tmp_path / f).read_text()) for f in ("eval.json", "score.json"))
    assert evaluated["num_samples"] == scored["num_samples"] == 8 * 2
    assert {k: v["value"] for k, v in evaluated["metrics"].items()} == pytest.approx(
        {k: v["value"] for k, v in scored["metrics"].items()})
    assert f"accuracy@{cfg.data.task}" in scored["metrics"]
    assert {k.split(":")[0] for k in scored["metrics"] if ":" in k} >= {"accuracy@dist", "accuracy@pos"}
    model = lavo_zoo.load(run, device="cpu")
    first = json.loads(split.read_text().splitlines()[0])
    context = {"context": first["context"]} if "context" in first else {}
    assert model.answer(first["tokens"], first["queries"], **context) == \
        json.loads(answers.read_text().splitlines()[0])["answers"]


def test_a_cross_model_answers_from_its_source_and_refuses_a_request_without_one(tmp_path):
    import lavo_zoo

    assert main(["train", "recall/tiny-cross-sdpa", *SMALL, "--out", str(tmp_path / "run"), "--max-steps", "1"]) == 0
    model = lavo_zoo.load(tmp_path / "run", device="cpu")
    source = [3, 12, 5, 14, 0, 1, 7, 9] * 2
    single = model.answer([5, 3], [0, 1], context=source)
    assert model.answer([[5, 3], [5, 3, 5]], [[0, 1], [0, 1]], context=[source, source[:9]])[0] == single
    for context, match in [(None, "give context="), ([source], "one sequence of ids; got a list of 1 sequence$"),
                           ([1, 99], r"context: the model reads ids 0..15"), ([], "context is empty"),
                           ([1, 2.5], r"context\[1\] must be a token id")]:
        with pytest.raises(InputError, match=match):
            model.answer([5, 3], [0, 1], context=context)
    with pytest.raises(InputError, match=r"context holds one source per sequence \(2 lists of ids\); got a list of 1"):
        model.answer([[5, 3], [5, 3]], [[0], [1]], context=[source])
    with pytest.raises(InputError, match="got one sequence of ids"):
        model.answer([[5, 3], [5, 3]], [[0], [1]], context=source)


def test_a_one_sequence_model_refuses_a_source(trained):
    import lavo_zoo

    model = lavo_zoo.load(trained[0] / "run", device="cpu")
    with pytest.raises(InputError, match="this model is causal recall .* leave context out"):
        model.answer([1, 2, 3], [2], context=[1, 2])


@pytest.mark.parametrize("config", PATTERN_CONFIGS)
def test_the_recipe_contract_holds_for_each_pattern(config, tmp_path):
    """What tests/recipes/test_recipe_contract.py checks on the recipe's tiny config, on the new tasks' configs: the
    public kit (trains, resumes exactly, evaluates, refuses missing data) and the recipe's hooks."""
    from lavo_zoo.engine.configs import resolve_config
    from lavo_zoo.testing import recipe_checks
    from tests.recipes import test_recipe_contract as contract

    for check in recipe_checks(config, SMALL, max_eval_batches=1):
        folder = tmp_path / repr(check).replace("/", "-")
        folder.mkdir()
        check(folder)
    recipe, cfg = resolve_config(config, SMALL + contract.FAST)
    tiny_pair = (recipe, recipe.resolve(cfg))
    contract.test_every_split_builds_and_the_loss_is_finite_with_gradients(tiny_pair)
    contract.test_validation_step_agrees_with_training_loss_and_predict(tiny_pair)
    contract.test_the_evaluator_is_registered_and_declares_every_metric_direction(tiny_pair)
    contract.test_one_trainer_step_and_the_checkpoint_round_trip(tiny_pair, tmp_path / "round-trip")


@pytest.mark.parametrize("settings, match", [
    ({"data": {"task": "cross_mqar"}}, ("data.task=cross_mqar runs an encoder-decoder: model.attention gives one "
                                       "attention per site")),
    ({"data": {"task": "noncausal_mqar"}, "model": {"attention": SITES}}, ("data.task=noncausal_mqar runs an encoder "
                                                                            "with one noncausal attention")),
    ({"data": {"task": "mqar"}, "model": {"attention": {"name": "lara"}}}, "model.attention"),  # no causal form
    ({"data": {"task": "cross_mqar"}, "model": {"attention": {**SITES, "cross": {"name": "local"}}}},
     "model.attention.cross"),
    ({"data": {"num_queries": 5}}, "data.num_queries=5 is more than data.num_pairs=4"),
    ({"model": {"binding": {"name": "local"}}}, "model.binding is the noncausal task's first encoder layer"),
    ({"data": {"task": "noncausal_mqar"}, "model": {"binding": {"name": "sdpa", "rope": 1}}}, "model.binding"),
    ({"model": {"attention": {"num_bases": 4}}}, "attention 'sdpa' has no option 'num_bases'"),  # over the default
    ({"data": {"task": "cross_mqar"}, "model": {"attention": {"cross": {"name": "sdpa"}, "crosss": {}}}},
     "unknown attention site 'model.attention.crosss'"),
])
def test_the_task_fixes_the_form_of_the_attention(settings, match):
    from lavo_zoo.errors import ConfigError

    with pytest.raises(ConfigError, match=match):
        config_from_dict({"recipe": "recall", **settings})


def test_a_site_named_on_the_command_line_switches_its_mechanism_alone():
    """compare --site cross: `model.attention.cross.name=...` replaces that site's mechanism and its options, and
    leaves the other sites as the config has them; a single spec's name switches it the same way."""
    from lavo_zoo.engine.configs import resolve_config

    over = ["model.attention.cross.name=lavo", "model.attention.cross.num_bases=4"]
    _, cfg = resolve_config("recall/tiny-cross-sdpa", over + ["model.attention.cross.name=mean"])
    assert cfg.model.attention.cross == AttentionSpec("mean")
    assert cfg.model.attention.encoder_self == AttentionSpec("local", {"window_size": 2, "relative_bias": True})
    _, cfg = resolve_config("recall/tiny-cross-sdpa", ["model.attention.encoder_self={name: sdpa, rope: true}"])
    assert cfg.model.attention.encoder_self == AttentionSpec("sdpa", {"rope": True})  # another name: its options
    _, cfg = resolve_config("recall/tiny-cross-sdpa", ["model.attention.encoder_self.window_size=3"])
    assert cfg.model.attention.encoder_self == AttentionSpec("local", {"window_size": 3, "relative_bias": True})
    _, cfg = resolve_config("recall/tiny-noncausal-sdpa", ["model.attention.name=lavo", "model.attention.num_bases=4",
                                                           "model.attention.name=gla"])
    assert cfg.model.attention == AttentionSpec("gla")


def test_the_evaluator_knows_which_tasks_ask_before_their_keys():
    from lavo_zoo.evaluators.classification import QUERIES_BEFORE_KEYS
    from lavo_zoo.recipes.recall.data import TASK_PATTERNS

    assert QUERIES_BEFORE_KEYS == {task for task, pattern in TASK_PATTERNS.items() if pattern == "noncausal"}


def test_recall_plots_table_shows_every_bucket_kind_in_order():
    """Noncausal and cross studies: the keys after their queries (ahead:) and the pairs' positions (pos:) are columns
    too, after the distances, each kind by its lower bound."""
    metrics = {m: (0.5, 0.1) for m in ("accuracy", "accuracy@pos:4-7", "accuracy@ahead:9-16", "accuracy@dist:17-32",
                                       "accuracy@pos:0", "accuracy@dist:3-4", "accuracy@noncausal_mqar")}
    row = {"attention": "sdpa", "setting": "", "state_bytes": 2048, "grows": True, "seq_len": 64, "seeds": [1, 2],
           "metrics": metrics}
    head = markdown_table([row]).splitlines()[0]
    assert head.endswith("| accuracy | dist:3-4 | dist:17-32 | ahead:9-16 | pos:0 | pos:4-7 |")


def test_recall_plot_keeps_each_task_apart(tmp_path):
    """The same attention on two tasks (causal and noncausal MQAR) is two rows, each with its own state (a causal
    KV cache, a noncausal layer's keys and values of the sequence), and the table names the task."""
    for task, seed in (("mqar", 1), ("noncausal_mqar", 2)):
        recipe, cfg = tiny(task=task)
        _cell(tmp_path / "study" / f"sdpa-seed{seed}", recipe.resolve(cfg), "sdpa", ["model.attention.name=sdpa"],
              0.5 * seed, seed)
    rows = state_rows([tmp_path / "study"])
    assert [(r["task"], r["attention"], r["seeds"]) for r in rows] == [("mqar", "sdpa", [1]),
                                                                        ("noncausal_mqar", "sdpa", [2])]
    for row in rows:  # each measured on its own model (a decoder's KV cache, an encoder's keys and values)
        recipe, cfg = tiny(task=row["task"])
        assert (row["state_bytes"], row["grows"]) == state_bytes(recipe.build_model(cfg), 16)
    table = markdown_table(rows)
    assert table.startswith("| task | attention |") and "| noncausal_mqar | sdpa | defaults |" in table
    assert plot_state(rows).startswith(b"\x89PNG")


def test_recall_plot_draws_each_form_of_a_mechanism_as_its_own_line():
    """Sizes vary along a mechanism's line; a form (a switch off, a named noncausal form, a short convolution) is a
    line of its own, so that the bidirectional and the final-state noncausal layers are never joined."""
    def row(name: str, setting: str, size: int) -> dict:
        return {"task": "noncausal_mqar", "attention": name, "setting": setting, "state_bytes": size,
                "grows": False, "seq_len": 32, "seeds": [1], "metrics": {"accuracy": (0.5, 0.0)}}

    rows = [row("gla", "", 1024), row("gla", "expand_k=1.0", 4096), row("gla", "noncausal_form=final_state", 1024),
            row("gla", "conv_size=4 expand_k=0.25", 2048), row("gla", "conv_size=4 expand_k=1.0", 8192),
            row("deltanet", "num_heads=1", 4096), row("deltanet", "", 2048),
            row("lavo", "window_size=2 global_read=false", 256), row("lavo", "window_size=4 global_read=false", 512),
            row("lavo", "window_size=4 num_bases=8", 512), row("local", "relative_bias=true window_size=4", 512)]
    assert [series_name(r) for r in rows] == [
        "gla", "gla", "gla noncausal_form=final_state", "gla conv_size=4", "gla conv_size=4", "deltanet", "deltanet",
        "lavo global_read=false", "lavo global_read=false", "lavo", "local"]
    assert series_name(rows[0], task=True) == "gla (noncausal_mqar)"
    assert plot_state(rows).startswith(b"\x89PNG")
