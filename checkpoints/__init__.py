"""Checkpoint index, downloads, cache and verification (placeholder until the checkpoint-index issue lands)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from lavo_zoo.errors import ZooError


def list_checkpoints(pattern: str | None = None) -> list[dict[str, Any]]:
    return []


def resolve_checkpoint(ref: str) -> Path:
    raise ZooError(f"'{ref}' is not a local checkpoint directory and downloads are not available yet")
