"""Hybrid layer schedules in configs (zoo/attention/schedule.py): the list and text forms, the options an entry
takes from model.attention, the checks when the config is read (each naming the key, the entry and the layers it
sets), the saved config rebuilding the same layers, and what a site's layers run and keep while decoding."""
import pytest

from lavo_zoo.attention import AttentionSchedule, AttentionSpec
from lavo_zoo.attention.schedule import (
    attention_layers,
    describe_layers,
    layer_groups,
    layer_ranges,
    parse_schedule,
    schedule_text,
    site_labels,
    stack_label,
    state_text,
)
from lavo_zoo.config import to_dict
from lavo_zoo.engine.configs import config_from_dict, resolve_config
from lavo_zoo.errors import ConfigError

LAVO = {"num_bases": 32, "window_size": 16}


def test_the_text_form_counts_runs_and_refuses_what_is_not_name_or_name_times_count():
    assert parse_schedule("gated_deltanet*3+sdpa") == ["gated_deltanet"] * 3 + ["sdpa"]
    assert parse_schedule(" lavo + local*2 + lavo ") == ["lavo", "local", "local", "lavo"]
    assert parse_schedule("lavo * 3 + sdpa") == ["lavo"] * 3 + ["sdpa"]  # found by the sweep: spaces around '*'
    assert schedule_text(["lavo", "lavo", "sdpa", "lavo"]) == "lavo*2+sdpa+lavo"
    for text in ("lavo*3+sdpa", "a+b*2+a", "kda"):
        assert schedule_text(parse_schedule(text)) == text
    for bad in ("lavo*0+sdpa", "lavo++sdpa", "lavo*x", "*3", "lavo*-1", ""):
        with pytest.raises(ConfigError, match="is not NAME or NAME\\*COUNT"):
            parse_schedule(bad)


def test_a_schedule_longer_than_any_stack_is_refused_before_it_is_made():
    """Found by the sweep: ``lavo*1000000000`` built a list of a billion names (a MemoryError, or the whole machine's
    memory) before the length check against the layers."""
    from lavo_zoo.attention.schedule import MAX_ENTRIES

    assert len(parse_schedule(f"lavo*{MAX_ENTRIES - 1}+sdpa")) == MAX_ENTRIES
    for bad in ("lavo*1000000000+sdpa", f"lavo*{MAX_ENTRIES}+sdpa", "lavo*99999999999999999999999"):
        with pytest.raises(ConfigError, match=rf"entries, more than any stack has layers \(at most {MAX_ENTRIES}\)"):
            parse_schedule(bad, "model.attention_schedule")


def test_layers_repeat_the_schedule_and_groups_and_labels_read_it_back():
    schedule = AttentionSchedule([AttentionSpec("lavo"), AttentionSpec("lavo"), AttentionSpec("lavo"),
                                  AttentionSpec("sdpa")])
    names = [spec.name for spec in schedule.layers(8)]
    assert names == ["lavo", "lavo", "lavo", "sdpa"] * 2
    assert [(layers, spec.name) for layers, spec in layer_groups(schedule.layers(8))] == [
        ([0, 1, 2, 4, 5, 6], "lavo"), ([3, 7], "sdpa")]
    assert layer_ranges([0, 1, 2, 4, 5, 6]) == "0-2, 4-6" and layer_ranges([3, 7]) == "3, 7"
    assert layer_ranges([5]) == "5" and layer_ranges([2, 3]) == "2-3"
    assert stack_label(names) == "hybrid:lavo*3+sdpa"  # the shortest repeating pattern
    assert stack_label(["a", "b", "a", "c"]) == "hybrid:a+b+a+c" and stack_label(["sdpa"] * 4) == "sdpa"


def _lm(schedule, **model):
    return resolve_config("lm/tiny-lavo", [f"model.attention_schedule={schedule}",
                                           *(f"model.{k}={v}" for k, v in model.items())])[1]


def test_an_entry_naming_model_attentions_mechanism_takes_its_options_others_their_defaults():
    cfg = _lm("[lavo, {name: lavo, num_bases: 8}, {name: local, window_size: 4}, sdpa]")
    layers = attention_layers(cfg.model)[""]
    assert [(spec.name, {k: v for k, v in spec.options.items() if v is not None}) for spec in layers] == [
        ("lavo", LAVO), ("lavo", {**LAVO, "num_bases": 8}), ("local", {"window_size": 4}), ("sdpa", {})]
    assert attention_layers(_lm("lavo*3+sdpa").model)[""][0] == cfg.model.attention  # the text form: the same
    assert attention_layers(resolve_config("lm/tiny-lavo")[1].model)[""] == [cfg.model.attention] * 4  # no schedule


def test_the_schedule_is_checked_when_the_config_is_read_naming_key_entry_and_layers():
    with pytest.raises(ConfigError, match=r"'model.attention_schedule' has 3 entries, which does not divide "
                                          r"model.num_layers \(4\).*give 1, 2 or 4 entries"):
        _lm("[lavo, lavo, sdpa]")
    with pytest.raises(ConfigError, match=r"'model.attention_schedule\[1\].name': unknown attention 'sdpb' "
                                          r"\(did you mean 'sdpa'\?\).*entry 1 of the schedule sets layers 1, 3, 5, 7 "
                                          r"of model.num_layers=8"):
        _lm("[lavo, sdpb]", num_layers=8)
    with pytest.raises(ConfigError, match=r"'model.attention_schedule\[3\]': attention 'nystromformer' does not "
                                          r"support pattern 'causal'.*sets layer 3 of model.num_layers=4"):
        _lm("lavo*3+nystromformer")
    with pytest.raises(ConfigError, match=r"'model.attention_schedule\[0\].num_base'.*did you mean 'num_bases'"):
        _lm("[{name: lavo, num_base: 4}, sdpa]")
    with pytest.raises(ConfigError, match="empty schedule; leave it out"):
        _lm("[]")
    with pytest.raises(ConfigError, match="must be a list of attentions"):
        _lm("3")
    # an option value a mechanism refuses, when the layer is built: named where it was set
    from lavo_zoo.errors import OptionError

    for overrides, key in ((["model.attention_schedule=[{name: lavo, num_bases: 999}, sdpa]"],
                            r"model.attention_schedule\[0\]' .*num_bases \(999\).*change that entry's options"),
                           (["model.attention_schedule=lavo*3+sdpa", "model.attention.num_bases=999"],
                            r"model.attention' .*num_bases \(999\)")):
        recipe, cfg = resolve_config("lm/tiny-lavo", overrides)
        with pytest.raises(OptionError, match=key):
            recipe.build_model(recipe.resolve(cfg))
    # an encoder-decoder site: its own layers and pattern
    with pytest.raises(ConfigError, match=r"'model.attention_schedule.decoder_self\[1\]': attention 'lara' does "
                                          r"not support pattern 'causal'.*of model.decoder_layers=2"):
        resolve_config("summarization/tiny-sdpa", ["model.attention_schedule.decoder_self=[sdpa, lara]"])
    with pytest.raises(ConfigError, match=r"unknown config key 'model.attention_schedule.crosss'"):
        resolve_config("summarization/tiny-sdpa", ["model.attention_schedule.crosss=[sdpa]"])
    # PoinTr's decoder self-attention is noncausal: lara may sit there
    cfg = resolve_config("point_cloud/tiny-lavo", ["model.attention_schedule.decoder_self=[lara, sdpa]"])[1]
    assert [s.name for s in attention_layers(cfg.model)["decoder_self"]] == ["lara", "sdpa"]


def test_the_saved_config_rebuilds_the_same_layers_with_model_attentions_options_recorded():
    # model.attention set explicitly to a reading that is not today's default: the scheduled layers keep it when
    # the saved config is read back (entries are saved resolved), and null drops the schedule
    cfg = _lm("[lavo, sdpa]", **{"attention.combine": "half", "attention.num_bases": 8})
    saved = to_dict(cfg)
    assert saved["model"]["attention_schedule"][0]["combine"] == "half"
    back = config_from_dict(saved)[1]
    assert back == cfg and attention_layers(back.model) == attention_layers(cfg.model)
    assert attention_layers(back.model)[""][0].options["num_bases"] == 8
    assert resolve_config("lm/tiny-hybrid-lavo-sdpa", ["model.attention_schedule=null"])[1].model.attention_schedule \
        is None
    # a config written before schedules existed reads as before: every layer model.attention
    old = to_dict(resolve_config("lm/tiny-lavo")[1])
    del old["model"]["attention_schedule"]
    assert config_from_dict(old)[1].model.attention_schedule is None


def test_describe_layers_says_per_site_what_each_layer_runs_and_keeps_while_decoding():
    cfg = resolve_config("summarization/tiny-sdpa", ["model.attention_schedule.decoder_self=[lavo, sdpa]",
                                                     "model.attention_schedule.cross=[sdpa, lavo]"])[1]
    rows = [(g.key, g.where, g.spec.name, g.state) for g in describe_layers(cfg.model)]
    assert rows == [
        ("model.attention.encoder_self", "all 2 layers", "sdpa", "none (noncausal: not decoded step by step)"),
        ("model.attention_schedule.decoder_self", "layer 0", "lavo", state_text("lavo", "causal")),
        ("model.attention_schedule.decoder_self", "layer 1", "sdpa", "2 T D (KV cache, grows with T)"),
        ("model.attention_schedule.cross", "layer 0", "sdpa", "the source prepared once (cross cache)"),
        ("model.attention_schedule.cross", "layer 1", "lavo", "the source prepared once (cross cache)")]
    assert site_labels(cfg.model) == {"encoder_self": "sdpa", "decoder_self": "hybrid:lavo+sdpa",
                                      "cross": "hybrid:sdpa+lavo"}
    assert state_text("lavo", "causal") == ("2 (w-1) D window keys/values + 2 D feature sums "
                                            "(memory=binding: 2 r D, r x d per head)")
    assert state_text("longshort", "causal") == "T D inputs (no streaming: re-runs the prefix)"
    groups = describe_layers(resolve_config("lm/tiny-hybrid-gdn-sdpa")[1].model)
    assert [(g.key, g.where, g.spec.name) for g in groups] == [
        ("model.attention_schedule", "layers 0-2", "gated_deltanet"), ("model.attention_schedule", "layer 3", "sdpa")]
