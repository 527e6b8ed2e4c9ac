"""The attention registry (``lavo_zoo.attention.registry``): every built-in mechanism module registers, one check of a
name, a pattern and options serves build_attention and the config specs alike, and a third-party package adds a
mechanism through its entry point."""
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import lavo_zoo.attention
from lavo_zoo.attention import ATTENTIONS, Attention, AttentionSpec, build_attention, list_attentions, registry
from lavo_zoo.errors import ConfigError, OptionError, UsageError


@pytest.fixture
def scratch(monkeypatch):
    """Registrations made in a test are forgotten after it."""
    ATTENTIONS.names()  # discover the built-ins first
    monkeypatch.setattr(ATTENTIONS, "_entries", dict(ATTENTIONS._entries))


def test_the_package_re_exports_the_registry():
    for name in ("ATTENTIONS", "attention_class", "attention_info", "build_attention", "check_attention",
                 "list_attentions", "register_attention"):
        assert getattr(lavo_zoo.attention, name) is getattr(registry, name), name


def test_the_built_in_mechanisms_are_the_listed_ones_each_from_its_module():
    """The registry's built-ins are exactly BUILTIN_MECHANISMS, each registered by the module listed for it, and
    only listed modules are imported as mechanisms (no helper: base, common, spec, registry, ops)."""
    listed = registry.BUILTIN_MECHANISMS
    assert {e.name for e in ATTENTIONS if e.source == "builtin"} == set(listed)
    for name, module in listed.items():
        home = registry.attention_class(name).__module__
        assert home == f"lavo_zoo.attention.{module}" or home.startswith(f"lavo_zoo.attention.{module}."), name
    assert set(ATTENTIONS._builtin_modules) == {f"lavo_zoo.attention.{m}" for m in listed.values()}
    assert not {"base", "common", "spec", "registry", "ops"} & set(listed.values())


def test_every_module_that_registers_a_mechanism_is_listed():
    """A mechanism file that decorates a class with register_attention but is missing from the list would never be
    imported: every such module or package of zoo/attention is listed."""
    folder = Path(lavo_zoo.attention.__file__).parent
    registering = {path.relative_to(folder).parts[0].removesuffix(".py") for path in folder.rglob("*.py")
                   if "@register_attention(" in path.read_text() and path.name != "registry.py"}
    assert registering == set(registry.BUILTIN_MECHANISMS.values())


# (name, pattern, options, the config key suffix a spec's error names, the message every caller gives)
BAD = {
    "unknown name": ("lavoo", "causal", {}, ".name",
                     r"unknown attention 'lavoo' \(did you mean 'lavo'\?\); choose one of abc"),
    "unsupported pattern": ("local", "cross", {}, "",
                            "attention 'local' does not support pattern 'cross'; it supports: causal, noncausal; "
                            + "mechanisms with 'cross': .*lavo"),
    "unknown option": ("lavo", "causal", {"num_base": 3}, ".num_base",
                       r"attention 'lavo' has no option 'num_base' \(did you mean 'num_bases'\?\); its options: "
                       + "num_bases"),
}


@pytest.mark.parametrize("case", BAD, ids=str)
def test_one_check_for_build_attention_and_the_config_specs(case):
    name, pattern, options, suffix, message = BAD[case]
    with pytest.raises(UsageError, match=f"^{message}") as built:
        build_attention(name, 16, 2, pattern, **options)
    assert not isinstance(built.value, ConfigError)  # a library call, not a config file
    with pytest.raises(ConfigError, match=f"^config key 'model.attention{suffix}': {message}"):
        AttentionSpec(name, options).check(pattern, "model.attention")
    with pytest.raises(ConfigError, match=f"^config key 'model.attention.cross{suffix}': {message}"):
        registry.check_attention(name, pattern, options, key="model.attention.cross")


def test_a_good_selection_gives_its_class_and_an_unknown_pattern_is_refused():
    assert registry.check_attention("lavo", "cross", {"num_bases": 4}) is registry.attention_class("lavo")
    assert registry.check_attention("local") is registry.attention_class("local")  # no pattern: not checked
    with pytest.raises(UsageError, match=r"unknown attention pattern 'casual' \(did you mean 'causal'\?\)"):
        build_attention("sdpa", 16, 2, "casual")
    with pytest.raises(UsageError, match=r"unknown attention pattern 'crosss' \(did you mean 'cross'\?\)"):
        list_attentions(supports="crosss")
    assert {i.name for i in list_attentions(supports="cross")} == {
        n for n in ATTENTIONS.names() if "cross" in registry.attention_class(n).patterns}


def test_register_attention_takes_attention_subclasses_and_options_follow_the_constructor(scratch):
    with pytest.raises(TypeError, match="expects an Attention subclass"):
        registry.register_attention("not_attention")(dict)

    @registry.register_attention("any_options")
    class AnyOptions(Attention):
        """Takes any keyword (test-only)."""
        patterns = ("noncausal",)

        def __init__(self, embed_dim, num_heads, pattern, scale: float = 2.0, **extra):
            super().__init__(embed_dim, num_heads, pattern)
            self.scale, self.extra = scale, extra

        def attend(self, x, padding_mask, context, context_mask, state, return_state):
            return x * self.scale

    info = registry.attention_info("any_options")
    assert info.options == {"scale": 2.0} and info.patterns == ("noncausal",)
    assert info.description == "Takes any keyword (test-only)."
    attn = build_attention("any_options", 8, 2, "noncausal", whatever=1)  # **extra: every option is taken
    assert attn.extra == {"whatever": 1}
    with pytest.raises(ValueError, match="already registered"):
        registry.register_attention("any_options")(type("Other", (AnyOptions,), {}))


def test_third_party_entry_point_is_discovered(tmp_path, monkeypatch):
    """A package installed elsewhere adds an attention without editing this repository."""
    pkg = tmp_path / "thirdparty_attn.py"
    pkg.write_text(textwrap.dedent("""
        from lavo_zoo.attention import Attention
        class Identity(Attention):
            '''Returns its input (test plug-in).'''
            patterns = ("causal", "noncausal")
            def attend(self, x, padding_mask, context, context_mask, state, return_state):
                return x
    """))
    dist = tmp_path / "thirdparty_attn-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-attn\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[lavo_zoo.plugins.attentions]\nidentity_plugin = thirdparty_attn:Identity\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(ATTENTIONS, "_discovered", False)
    monkeypatch.setattr(ATTENTIONS, "_entries", dict(ATTENTIONS._entries))
    assert "identity_plugin" in ATTENTIONS.names()
    assert ATTENTIONS.entry("identity_plugin").source.startswith("entry point")
    attn = build_attention("identity_plugin", embed_dim=8, num_heads=2, pattern="noncausal")
    x = torch.randn(1, 3, 8)
    assert torch.equal(attn(x), x)
    with pytest.raises(UsageError, match="does not support pattern 'cross'; it supports: causal, noncausal"):
        build_attention("identity_plugin", embed_dim=8, num_heads=2, pattern="cross")
    sys.modules.pop("thirdparty_attn", None)


def test_every_builtin_mechanism_declares_its_family_and_state() -> None:
    """`lavo-zoo list attentions` shows each built-in mechanism's family and the size of its decoding state."""
    from lavo_zoo.attention import ATTENTIONS, attention_class, attention_info

    for name in ATTENTIONS.names():
        if attention_class(name).__module__.startswith("lavo_zoo.attention."):
            info = attention_info(name)
            assert info.family and info.state, f"{name}: set `family` and `decoding_state` on its class"


@pytest.mark.parametrize("name, option, value", [
    ("based", "feature_dim", "8"), ("based", "conv_size", 2.0), ("mamba2", "state_size", float("nan")),
    ("gla", "gate_logit_normalizer", float("nan")), ("gla", "gate_logit_normalizer", "16"),
    ("gated_deltanet", "expand_v", "2"), ("local", "num_sinks", True), ("local", "num_sinks", 2.5),
    ("deltanet", "kernels", 1), ("sdpa", "rope", "yes"), ("lavo", "num_bases", 3.5),
])
def test_an_option_of_the_wrong_type_is_refused_naming_it(name, option, value):
    """An option value of another type than the constructor declares is an OptionError naming the option, its
    value and its default (a raw TypeError from deep in the layer, a string expand_v that asked for 10^17 bytes,
    a NaN normaliser that gave NaN outputs), and a ConfigError naming the key when a config is read."""
    with pytest.raises(OptionError, match=rf"option '{option}' must be .* got {type(value).__name__}"):
        build_attention(name, 16, 2, **{option: value})
    with pytest.raises(ConfigError, match=rf"config key 'model.attention.{option}'"):
        AttentionSpec(name, {option: value}).check("causal", "model.attention")


def test_options_of_their_declared_type_are_taken():
    """An int where a float is declared, null where None is allowed, and the defaults themselves pass."""
    assert build_attention("gated_deltanet", 16, 2, expand_v=1).value_dim == 16
    build_attention("lavo", 16, 2, num_bases=None, read_temperature=None)
    for info in list_attentions():
        build_attention(info.name, 16, 2, "causal" if "causal" in info.patterns else info.patterns[0],
                        **{k: v for k, v in info.options.items() if v is not None})
