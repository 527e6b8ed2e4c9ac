"""The ListOps release-format loader (recipes/lra/data/listops.py) on hand-made
fixtures: tokens as LRA, and every refusal names file and reason."""
from __future__ import annotations

from pathlib import Path

import pytest

from lavo_zoo.errors import DataError
from lavo_zoo.recipes.lra.data.listops import TOKEN_IDS
from tests.recipes.lra.helpers import load as _load


# ------------------------------------------------------------------------------------------------------ ListOps
def _listops(root: Path, rows: str, header: str = "Source\tTarget\n", split: str = "train") -> Path:
    root.mkdir(exist_ok=True)
    (root / {"train": "basic_train.tsv", "validation": "basic_val.tsv", "test": "basic_test.tsv"}[split]).write_text(
        header + rows)
    return root


def test_listops_tokens_drop_parentheses_and_keep_the_closing_bracket(tmp_path: Path) -> None:
    root = _listops(tmp_path / "l", "( ( ( [MAX 2 ) 9 ) ] )\t9\n( ( [SM 3 ) 4 ] )\t7\n")
    ds = _load("listops", root)
    assert len(ds) == 2
    first = ds[0]
    assert first["tokens"].tolist() == [TOKEN_IDS[t] for t in ("[MAX", "2", "9", "]")] and first["label"] == 9
    assert ds[1]["label"] == 7
    assert _load("listops", root, max_length=2)[0]["tokens"].tolist() == [TOKEN_IDS["[MAX"], TOKEN_IDS["2"]]


@pytest.mark.parametrize("header,rows,match", [
    ("Input\tOutput\n", "( [MAX 1 ] )\t1\n", r"basic_train.tsv: line 1 must be the header"),
    ("Source\tTarget\n", "( [MAX 1 ] )\t1\textra\n", r"basic_train.tsv, line 2: malformed row with 3 field"),
    ("Source\tTarget\n", "( [MAX 1 ] )\t1\n( [MIN 1 ] )\t10\n", r"basic_train.tsv, line 3: label '10' is out of range"),
    ("Source\tTarget\n", "( [MAX 1 ] )\tnine\n", r"line 2: label 'nine' is not a number"),
    ("Source\tTarget\n", "( [AVG 1 ] )\t1\n", r"line 2: unknown ListOps token '\[AVG'"),
    ("Source\tTarget\n", "", r"basic_train.tsv: the split is empty"),
])
def test_listops_refusals(tmp_path: Path, header: str, rows: str, match: str) -> None:
    with pytest.raises(DataError, match=match):
        _load("listops", _listops(tmp_path / "l", rows, header))


def test_listops_missing_split_file(tmp_path: Path) -> None:
    root = _listops(tmp_path / "l", "( [MAX 1 ] )\t1\n")
    with pytest.raises(DataError, match=r"basic_test.tsv does not exist \(the ListOps test split\)"):
        _load("listops", root, "test")
