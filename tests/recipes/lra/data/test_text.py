"""The IMDB text release-format loader (recipes/lra/data/text.py) on hand-made
fixtures: tokens as LRA, and every refusal names file and reason."""
from __future__ import annotations

from pathlib import Path

import pytest

from lavo_zoo.errors import DataError
from tests.recipes.lra.helpers import load as _load


# ------------------------------------------------------------------------------------------------------ IMDB text
def _imdb(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / "aclImdb" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    for rel in ("train/pos", "train/neg", "test/pos", "test/neg"):
        (root / "aclImdb" / rel).mkdir(parents=True, exist_ok=True)
    return root


def test_imdb_reads_bytes_plus_one_with_folder_labels(tmp_path: Path) -> None:
    root = _imdb(tmp_path, {"train/pos/0_9.txt": "Great!", "train/neg/1_2.txt": "é bad", "test/pos/3_10.txt": "ok"})
    ds = _load("text", root)
    assert [(ds[i]["tokens"].tolist(), ds[i]["label"]) for i in range(2)] == [
        ([b + 1 for b in b"\xc3\xa9 bad"], 0), ([b + 1 for b in b"Great!"], 1)]
    assert len(_load("text", root, "validation")) == 1  # LRA evaluates IMDB on its test split
    assert _load("text", root, max_length=3)[1]["tokens"].tolist() == [ord("G") + 1, ord("r") + 1, ord("e") + 1]


@pytest.mark.parametrize("files,match", [
    ({"train/pos/review.txt": "x"}, r"pos/review.txt: malformed file name"),
    ({"train/pos/0_5.txt": "x"}, r"pos/0_5.txt: rating 5 is out of range for 'pos'"),
    ({"train/neg/0_2.txt": b"\xff\xfe"}, r"neg/0_2.txt: not UTF-8 text"),
    ({"train/neg/0_2.txt": b""}, r"neg/0_2.txt: the review is empty"),
    ({}, r"aclImdb/train: the split is empty"),
])
def test_imdb_refusals(tmp_path: Path, files: dict, match: str) -> None:
    with pytest.raises(DataError, match=match):
        _load("text", _imdb(tmp_path, files))


def test_imdb_missing_folder(tmp_path: Path) -> None:
    (tmp_path / "aclImdb" / "train" / "pos").mkdir(parents=True)
    with pytest.raises(DataError, match=r"train/neg does not exist"):
        _load("text", tmp_path)
