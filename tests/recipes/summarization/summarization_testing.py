"""Helpers for the summarization tests: run a recipe command as the CLI would, and write small data folders."""
from __future__ import annotations

import json
from pathlib import Path

import click
from click.testing import CliRunner

from lavo_zoo.errors import ZooError

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def run_command(command: click.Command, args: list[str], input: str | None = None) -> tuple[int, str]:
    """(exit code, stdout + stderr) of ``command`` with the CLI's error mapping (ZooError -> its exit code)."""
    runner = CliRunner()
    result = runner.invoke(command, args, input=input, catch_exceptions=True)
    if isinstance(result.exception, ZooError):
        return result.exception.exit_code, result.output + f"error: {result.exception}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


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
