"""Helpers for the LM recipe tests: tiny configs and models over the causal attentions the streaming and generation
tests cover."""
from __future__ import annotations

from typing import Any

import torch

from lavo_zoo.engine.configs import config_from_dict

# (attention, options) pairs the streaming/generation tests cover: built-in names, so a renamed one fails loudly
CAUSAL_ATTENTIONS = [("vanilla", {}), ("lavo", {"num_bases": 8, "window_size": 4}), ("sdpa", {}),
                     ("sdpa", {"rope": True}), ("local", {"window_size": 4})]
IDS = ["-".join([name, *(f"{k}={v}" for k, v in opts.items())]) for name, opts in CAUSAL_ATTENTIONS]


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


def tiny_model(attention: str, options: dict[str, Any]):
    """(recipe, config, model in eval mode) of :func:`tiny_config`, seeded."""
    torch.manual_seed(0)
    recipe, cfg = tiny_config(attention, options)
    return recipe, cfg, recipe.build_model(cfg).eval()
