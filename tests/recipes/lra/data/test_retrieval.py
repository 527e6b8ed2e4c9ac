"""The AAN retrieval release-format loader (recipes/lra/data/retrieval.py) on hand-made
fixtures: tokens as LRA, and every refusal names file and reason."""
from __future__ import annotations

from pathlib import Path

import pytest

from lavo_zoo.errors import DataError
from tests.recipes.lra.helpers import load as _load


# -------------------------------------------------------------------------------------------------------- AAN
def _aan(root: Path, rows: str, split: str = "train") -> Path:
    root.mkdir(exist_ok=True)
    (root / f"new_aan_pairs.{ {'train': 'train', 'validation': 'eval', 'test': 'test'}[split]}.tsv").write_text(rows)
    return root


def test_retrieval_reads_two_documents(tmp_path: Path) -> None:
    ds = _load("retrieval", _aan(tmp_path / "r", "1.0\tA1\tB2\tab c\txyz\n0\tA1\tC3\tq\tr s\n"))
    assert ds[0]["tokens"].tolist() == [98, 99, 33, 100] and ds[0]["tokens2"].tolist() == [121, 122, 123]
    assert [ds[0]["label"], ds[1]["label"]] == [1, 0]


@pytest.mark.parametrize("rows,match", [
    ("1\tA\tB\tonly one text\n", r"new_aan_pairs.train.tsv, line 1: malformed row with 4 tab-separated"),
    ("0\tA\tB\tx\ty\n2\tA\tB\tx\ty\n", r"new_aan_pairs.train.tsv, line 2: label '2' is out of range"),
    ("1\tA\tB\tx\ty\n1\tA\tB\t\ty\n", r"new_aan_pairs.train.tsv, line 2: text1 is empty"),
    ("1\tA\tB\t\t\n", r"new_aan_pairs.train.tsv, line 1: text1 and text2 are empty"),
    ("", r"new_aan_pairs.train.tsv: the split is empty"),
])
def test_retrieval_refusals(tmp_path: Path, rows: str, match: str) -> None:
    with pytest.raises(DataError, match=match):
        _load("retrieval", _aan(tmp_path / "r", rows))
