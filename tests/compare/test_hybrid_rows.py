"""Hybrid rows of a study (``--attentions "sdpa,hybrid:local+sdpa"``): each row trains the schedule it names, a
mechanism's row over a hybrid config runs that mechanism in every layer, the rows are labelled as written (runs
counted) in folders without ':' or '*', a hybrid config's own row is its schedule, and malformed rows are refused
before anything trains."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pytest
import yaml
from torch import nn

from lavo_zoo.attention import AttentionSchedule, AttentionSpec
from lavo_zoo.attention.schedule import attention_layers, resolve_schedules
from lavo_zoo.compare import run_study, write_table
from lavo_zoo.compare.records import attention_label
from lavo_zoo.compare.study import Cell, cell_overrides, has_schedule, normal_row
from lavo_zoo.engine.configs import resolve_config
from lavo_zoo.engine.recipe import RECIPES
from lavo_zoo.engine.records import attention_names
from lavo_zoo.engine.run_config import RunConfig
from lavo_zoo.errors import UsageError
from tests.compare.helpers import SeqRecipe, a_study


@dataclass
class StackModelConfig:
    attention_patterns: ClassVar[str] = "noncausal"
    embed_dim: int = 8
    num_heads: int = 2
    num_layers: int = 2
    attention: AttentionSpec = field(default_factory=lambda: AttentionSpec("sdpa"))
    attention_schedule: AttentionSchedule | None = None

    def __post_init__(self) -> None:
        resolve_schedules(self)


@dataclass
class StackConfig(RunConfig):
    recipe: str = "compare_stack"
    model: StackModelConfig = field(default_factory=StackModelConfig)


class StackRecipe(SeqRecipe):
    """SeqRecipe's regression through a residual stack of attention layers, one per scheduled entry (test-only)."""

    name = "compare_stack"
    config_class = StackConfig

    def build_model(self, cfg):
        m = cfg.model
        model = nn.ModuleDict({"layers": nn.ModuleList(spec.build(m.embed_dim, m.num_heads, "noncausal")
                                                       for spec in attention_layers(m)[""]),
                               "head": nn.Linear(m.embed_dim, 1)})
        model.step_sleep_s = 0.0
        return model

    def _out(self, model, x):
        for layer in model["layers"]:
            x = x + layer(x)
        return model["head"](x.mean(1))


@pytest.fixture
def hybrid_study(tmp_path):
    RECIPES.register("compare_stack", StackRecipe)
    config = tmp_path / "stack.yaml"
    config.write_text("recipe: compare_stack\nmodel: {attention: {name: local, window_size: 2}, "
                      "attention_schedule: [local, sdpa]}\n"
                      "train: {max_steps: 2, batch_size: 8, save_every: 2, eval_every: 0, log_every: 1}\n")
    yield config
    RECIPES._entries.pop("compare_stack", None)
    SeqRecipe.calls = 0


def _saved_layers(cell):
    saved = yaml.safe_load((cell / "config.yaml").read_text())["model"]
    schedule = saved["attention_schedule"]
    return [e["name"] for e in schedule] if schedule else [saved["attention"]["name"]] * 2


def test_each_row_trains_what_it_names_labelled_as_written(hybrid_study, tmp_path):
    out = tmp_path / "cmp"
    records = run_study(a_study(hybrid_study, out, ["sdpa", "hybrid:local+sdpa", "hybrid:mean+mean"], [1]))
    assert [r.attention for r in records] == ["sdpa", "hybrid:local+sdpa", "hybrid:mean*2"]
    cells = {p.name for p in (out / "cells").iterdir()}
    assert cells == {"sdpa-seed1", "hybrid-local+sdpa-seed1", "hybrid-mean_x2-seed1"}
    assert _saved_layers(out / "cells" / "sdpa-seed1") == ["sdpa", "sdpa"]  # the config's schedule dropped
    assert _saved_layers(out / "cells" / "hybrid-local+sdpa-seed1") == ["local", "sdpa"]
    assert _saved_layers(out / "cells" / "hybrid-mean_x2-seed1") == ["mean", "mean"]
    local = yaml.safe_load((out / "cells" / "hybrid-local+sdpa-seed1" / "config.yaml").read_text())
    assert local["model"]["attention_schedule"][0]["window_size"] == 2  # model.attention's options
    assert all(r.options() == [] for r in records)  # a row's schedule is its attention, not a setting
    write_table(records, out, "hybrids")
    table = (out / "table.md").read_text()
    assert "| hybrid:local+sdpa |" in table and "| hybrid:mean*2 |" in table and "| sdpa |" in table


def test_a_hybrid_configs_own_row_is_its_schedule(hybrid_study, tmp_path):
    (record,) = run_study(a_study(hybrid_study, tmp_path / "own", [], [1]))
    assert record.attention == "hybrid:local+sdpa"
    assert (tmp_path / "own" / "cells" / "hybrid-local+sdpa-seed1" / "cell.json").is_file()
    config = yaml.safe_load((tmp_path / "own" / "cells" / "hybrid-local+sdpa-seed1" / "config.yaml").read_text())
    assert attention_label(config) == "hybrid:local+sdpa"  # what --collect labels its results JSON
    sites = {"model": {"attention": {"encoder_self": {"name": "sdpa"}, "decoder_self": {"name": "lavo"},
                                     "cross": {"name": "sdpa"}},
                       "attention_schedule": {"decoder_self": [{"name": "lavo"}] * 3 + [{"name": "sdpa"}]}}}
    assert attention_names(sites) == {"encoder_self": "sdpa", "decoder_self": "hybrid:lavo*3+sdpa", "cross": "sdpa"}


def test_rows_select_a_schedule_or_drop_it_and_malformed_rows_are_refused(hybrid_study, tmp_path):
    assert normal_row("hybrid:lavo+lavo+lavo+sdpa") == "hybrid:lavo*3+sdpa" and normal_row("lavo") == "lavo"
    assert Cell("hybrid:lavo*3+sdpa", 2).name == "hybrid-lavo_x3+sdpa-seed2"
    assert cell_overrides("model.attention.decoder_self", Cell("hybrid:lavo*3+sdpa", 1), {}) == [
        "model.attention_schedule.decoder_self=lavo*3+sdpa", "train.seed=1"]
    assert cell_overrides("model.attention", Cell("sdpa", 1), {}, scheduled=True) == [
        "model.attention.name=sdpa", "model.attention_schedule=null", "train.seed=1"]
    assert cell_overrides("model.attention", Cell("sdpa", 1), {}) == ["model.attention.name=sdpa", "train.seed=1"]
    assert has_schedule(resolve_config(str(hybrid_study))[1], "model.attention")  # no one layer: no efficiency row
    assert not has_schedule(resolve_config(str(hybrid_study), ["model.attention_schedule=null"])[1], "model.attention")
    out = tmp_path / "refused"
    for rows, options, match in (
            (["lavo*3+sdpa"], {}, "a hybrid row starts with 'hybrid:'"),
            (["hybrid:local*0+sdpa"], {}, "is not NAME or NAME\\*COUNT"),
            (["hybrid:local+sdpb"], {}, "unknown attention 'sdpb'.*in hybrid:local\\+sdpb"),
            (["hybrid:local*2", "hybrid:local+local"], {}, "lists the attention hybrid:local\\*2 more than once"),
            (["hybrid:local+sdpa"], {"hybrid:local+sdpa": {"window_size": 3}}, "a hybrid row takes its options")):
        with pytest.raises(UsageError, match=match):
            run_study(a_study(hybrid_study, out, rows, [1], options=options))
    assert not out.exists()  # refused before anything trained
