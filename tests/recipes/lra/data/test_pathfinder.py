"""The Pathfinder release-format loader (recipes/lra/data/pathfinder.py) on hand-made
fixtures: tokens as LRA, and every refusal names file and reason."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lavo_zoo.errors import DataError
from tests.recipes.lra.helpers import load as _load


# -------------------------------------------------------------------------------------------------- Pathfinder
def _pathfinder(root: Path, n: int = 10, label: str = "1", size: int = 32) -> Path:
    base = root / "curv_baseline"
    (base / "imgs" / "0").mkdir(parents=True, exist_ok=True)
    (base / "metadata").mkdir(exist_ok=True)
    lines = []
    for i in range(n):
        Image.fromarray(np.full((size, size), i, np.uint8), mode="L").save(base / "imgs" / "0" / f"sample_{i}.png")
        lines.append(f"imgs/0 sample_{i}.png {i} {label if i == n - 1 else i % 2} 6 2 10\n")
    (base / "metadata" / "0.npy").write_text("".join(lines))
    return root


def test_pathfinder_reads_pixels_and_splits_80_10_10(tmp_path: Path) -> None:
    root = _pathfinder(tmp_path)
    kw = {"difficulty": "curv_baseline"}
    train, val, test = (_load("pathfinder", root, s, **kw) for s in ("train", "validation", "test"))
    assert (len(train), len(val), len(test)) == (8, 1, 1)
    assert train[3]["tokens"].shape == (1024,) and set(train[3]["tokens"].tolist()) == {3} and train[3]["label"] == 1
    assert test[0]["tokens"][0].item() == 9


def test_pathfinder_refusals(tmp_path: Path) -> None:
    kw = {"difficulty": "curv_baseline"}
    with pytest.raises(DataError, match=r"metadata/0.npy, line 10: label '2' is out of range"):
        _load("pathfinder", _pathfinder(tmp_path / "a", label="2"), **kw)
    root = _pathfinder(tmp_path / "b")
    (root / "curv_baseline" / "imgs" / "0" / "sample_4.png").unlink()
    with pytest.raises(DataError, match=r"sample_4.png: missing image \(listed in .*0.npy, line 5\)"):
        _load("pathfinder", root, **kw)
    with pytest.raises(DataError, match=r"sample_0.png: image is 28x28, expected 32x32"):
        _load("pathfinder", _pathfinder(tmp_path / "c", size=28), **kw)
    root = _pathfinder(tmp_path / "d")
    (root / "curv_baseline" / "metadata" / "0.npy").write_text("imgs/0 sample_0.png\n")
    with pytest.raises(DataError, match=r"0.npy, line 1: malformed metadata row"):
        _load("pathfinder", root, **kw)
    (root / "curv_baseline" / "metadata" / "0.npy").unlink()
    with pytest.raises(DataError, match=r"no Pathfinder data of difficulty 'curv_baseline'"):
        _load("pathfinder", root, **kw)
    found = _pathfinder(tmp_path / "f")  # data of another difficulty than asked: the message names what is there
    with pytest.raises(DataError, match=r"holds the difficulty folder\(s\) curv_baseline: set "
                                        r"data.difficulty=curv_baseline"):
        _load("pathfinder", found, difficulty="curv_contour_length_14")
    root = _pathfinder(tmp_path / "e", n=1)
    with pytest.raises(DataError, match=r"curv_baseline: the test split is empty"):
        _load("pathfinder", root, "test", **kw)
