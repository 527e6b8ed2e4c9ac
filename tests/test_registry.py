"""Registries: lookup errors, glob listing, and extension by a third-party package's entry point."""
import sys
import textwrap

import pytest

from lavo_zoo.errors import UsageError
from lavo_zoo.registry import Registry


def test_lookup_error_suggests_closest_name():
    reg = Registry("widget", "lavo_zoo.test_widgets")
    reg.register("alpha", 1)
    reg.register("beta", 2)
    assert reg.get("alpha") == 1 and reg.names("b*") == ["beta"]
    with pytest.raises(UsageError, match="unknown widget 'alpah' \\(did you mean 'alpha'\\?\\); known: alpha, beta"):
        reg.get("alpah")
    with pytest.raises(ValueError, match="already registered"):
        reg.register("alpha", 3)


def test_lazy_string_target_is_imported_on_first_use():
    reg = Registry("widget", "lavo_zoo.test_widgets")
    reg.register("dumps", "json:dumps")
    import json
    assert reg.get("dumps") is json.dumps


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
    from lavo_zoo.attention import ATTENTIONS, build_attention
    monkeypatch.setattr(ATTENTIONS, "_discovered", False)
    monkeypatch.setattr(ATTENTIONS, "_entries", dict(ATTENTIONS._entries))
    assert "identity_plugin" in ATTENTIONS.names()
    assert ATTENTIONS.entry("identity_plugin").source.startswith("entry point")
    attn = build_attention("identity_plugin", embed_dim=8, num_heads=2, pattern="noncausal")
    import torch
    x = torch.randn(1, 3, 8)
    assert torch.equal(attn(x), x)
    with pytest.raises(UsageError, match="does not support pattern 'cross'; it supports: causal, noncausal"):
        build_attention("identity_plugin", embed_dim=8, num_heads=2, pattern="cross")
    sys.modules.pop("thirdparty_attn", None)
