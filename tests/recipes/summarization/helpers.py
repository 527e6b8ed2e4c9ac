"""Helpers for the summarization tests: the overrides of a tiny model, small data folders in the Multi-News and
JSON-lines layouts."""
from __future__ import annotations

import json
from pathlib import Path

SMALL = ["model.embed_dim=32", "model.num_heads=2", "model.ffn_dim=64", "model.encoder_layers=1",
         "model.decoder_layers=1", "model.max_source_positions=128", "model.max_target_positions=24",
         "data.max_source_tokens=96", "data.max_target_tokens=16", "eval.max_len_b=12", "eval.min_len_b=2",
         "model.attention.encoder_self.num_bases=8", "train.batch_size=4", "train.eval_every=0",
         "train.save_every=2", "train.log_every=1", "eval.batch_size=8"]


def write_multinews(root: Path, splits: dict[str, list[tuple[str, str]]]) -> Path:
    """A Multi-News folder: ``<split>.src`` / ``.tgt`` from (source line, target line) pairs, written verbatim."""
    root.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        (root / f"{split}.src").write_text("".join(s + "\n" for s, _ in rows), encoding="utf-8")
        (root / f"{split}.tgt").write_text("".join(t + "\n" for _, t in rows), encoding="utf-8")
    return root


def write_jsonl(root: Path, splits: dict[str, list[dict]]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root
