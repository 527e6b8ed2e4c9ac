"""Each row's efficiency lengths against softmax, measured for the study's own layer, kept and collected."""
from __future__ import annotations

import csv
import json

import pytest

from lavo_zoo.compare import Efficiency, attention_setup, collect, run_study, write_table
from tests.compare.helpers import TINY_EFFICIENCY, a_study


def test_efficiency_lengths_beside_the_metrics_kept_and_collected(study, tmp_path, monkeypatch):
    out = tmp_path / "cmp"
    records = run_study(a_study(study, out, ["sdpa", "local"], [1, 2], options={"local": {"window_size": 3}},
                                efficiency=TINY_EFFICIENCY))
    found = {r.attention: r.efficiency for r in records}
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
    again = run_study(a_study(study, out, ["sdpa", "local"], [1, 2], options={"local": {"window_size": 3}},
                              efficiency=TINY_EFFICIENCY))  # a re-run keeps the measurement
    assert [r.efficiency for r in again] == [r.efficiency for r in records]
    collected = collect([out])  # so does --collect
    assert {r.label: r.efficiency for r in collected} == found
    assert all(r.efficiency is None for r in collect([out], efficiency=False))
    monkeypatch.undo()
    other = Efficiency(lengths=(8, 16), repeats=1, warmup=0, isolate=False)  # other settings: measured again
    run_study(a_study(study, out, ["sdpa", "local"], [1], options={"local": {"window_size": 3}}, efficiency=other))
    assert json.loads((out / "efficiency" / "local.json").read_text())["key"]["lengths"] == [8, 16]


def test_repeated_runs_measure_the_configs_own_attention(study, tmp_path):
    out = tmp_path / "rep"
    local = ["model.attention.name=local", "model.attention.window_size=3"]
    (record,) = run_study(a_study(study, out, [], [1], overrides=local, efficiency=TINY_EFFICIENCY))
    assert record.attention == "local" and record.efficiency["memory"]["text"]
    key = json.loads((out / "efficiency" / "local.json").read_text())["key"]
    assert key["options"] == {"window_size": 3} and key["pattern"] == "noncausal"


@pytest.mark.parametrize("config, site, pattern", [
    ("summarization/tiny-sdpa", "decoder_self", "causal"),
    ("summarization/tiny-sdpa", "cross", "cross"),
    ("point_cloud/tiny-lavo", "decoder_self", "noncausal"),  # PoinTr's queries are a set
])
def test_attention_setup_uses_the_sites_pattern_and_the_models_sizes(config, site, pattern):
    from lavo_zoo.engine.configs import resolve_config

    recipe, cfg = resolve_config(config, [])
    setup = attention_setup(recipe, cfg, f"model.attention.{site}")
    spec = getattr(cfg.model.attention, site)
    assert setup == {"attention": spec.name, "options": dict(spec.options), "embed_dim": cfg.model.embed_dim,
                     "heads": cfg.model.num_heads, "pattern": pattern}
