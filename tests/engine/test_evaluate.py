"""Where an evaluation's files go (``eval --out X.json`` -> ``X/``); what it records there and replaces is the output
policy's (tests/outputs/)."""
from __future__ import annotations

from pathlib import Path

from lavo_zoo.engine.evaluate import files_folder


def test_files_folder_beside_the_results() -> None:
    assert files_folder(Path("runs/results.json")) == Path("runs/results")
    assert files_folder(Path("runs/results")) == Path("runs/results.files")
