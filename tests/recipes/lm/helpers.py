"""Helpers for the LM recipe tests: tiny configs and attentions that may still be missing."""
from __future__ import annotations

from typing import Any

import pytest

from lavo_zoo.attention import ATTENTIONS
from lavo_zoo.engine.recipe import config_from_dict

# (attention, options) pairs the streaming/generation tests cover, where registered
CAUSAL_ATTENTIONS = [("vanilla", {}), ("lavo", {"num_bases": 8, "window_size": 4}), ("sdpa", {}),
                     ("sdpa", {"rope": True}), ("local", {"window_size": 4})]


def require_attention(name: str) -> None:
    if name not in ATTENTIONS.names():
        pytest.skip(f"attention '{name}' is not registered in this tree yet")


def tiny_config(attention: str = "vanilla", options: dict[str, Any] | None = None, **sections: Any):
    """(recipe, resolved config) for a 2-layer, 32-wide byte-level model on the built-in corpus."""
    data = {"recipe": "lm",
            "model": {"num_layers": 2, "embed_dim": 32, "num_heads": 4, "ffn_dim": 64, "dropout": 0.0,
                      "attention": {"name": attention, **(options or {})}},
            "data": {"tokenizer": "bytes", "block_size": 32},
            "train": {"batch_size": 4}}
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    recipe, cfg = config_from_dict(data)
    return recipe, recipe.resolve(cfg)
