"""Helpers for the summarization tests: small data folders in the Multi-News and JSON-lines layouts."""
from __future__ import annotations

import json
from pathlib import Path


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
