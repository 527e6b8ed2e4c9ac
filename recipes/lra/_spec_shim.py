"""Interim stand-in for ``lavo_zoo.attention.AttentionSpec`` until the conventions change lands on main
(delete this file then). Same fields and ``build`` as the conventions' spec; YAML here is nested
(``attention: {name: lavo, options: {num_bases: 32}}``) until the flat form is supported by the config loader."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class AttentionSpec:
    name: str = "sdpa"
    options: dict[str, Any] = field(default_factory=dict)

    def build(self, embed_dim: int, num_heads: int, pattern: str):
        from lavo_zoo.attention import build_attention

        return build_attention(self.name, embed_dim, num_heads, pattern, **self.options)
