"""The CIFAR-10 image release-format loader (recipes/lra/data/image.py) on hand-made
fixtures: tokens as LRA, and every refusal names file and reason."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lavo_zoo.errors import DataError
from tests.recipes.lra.helpers import load as _load


# ---------------------------------------------------------------------------------------------------- CIFAR-10
def _cifar(root: Path, labels: list[int], rgb: np.ndarray | None = None, files=None) -> Path:
    folder = root / "cifar-10-batches-bin"
    folder.mkdir(parents=True, exist_ok=True)
    n = len(labels)
    rgb = np.zeros((n, 3, 1024), np.uint8) if rgb is None else rgb
    records = np.concatenate([np.array(labels, np.uint8)[:, None], rgb.reshape(n, -1)], 1).astype(np.uint8)
    for name in files or [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        (folder / name).write_bytes(records.tobytes())
    return root


def test_cifar_binary_grayscale_as_tensorflow(tmp_path: Path) -> None:
    rgb = np.zeros((2, 3, 1024), np.uint8)
    rgb[0, 0, 0] = 255  # pure red pixel: floor(0.2989 * 255.5) = 76
    rgb[0, :, 1] = 255  # white: floor(0.9999 * 255.5) = 255
    rgb[1, :, 5] = (10, 200, 30)  # floor((0.2989*10 + 0.5870*200 + 0.1140*30) / 255 * 255.5) = 124
    root = _cifar(tmp_path, [3, 9], rgb)
    test = _load("image", root, "test")
    assert test[0]["tokens"][:2].tolist() == [76, 255] and test[0]["label"] == 3
    assert test[1]["tokens"][5].item() == int((0.2989 * 10 + 0.5870 * 200 + 0.1140 * 30) / 255 * 255.5) == 124
    assert len(_load("image", root, "train")) == 9 and len(_load("image", root, "validation")) == 1  # 10 records


def test_cifar_refusals(tmp_path: Path) -> None:
    root = _cifar(tmp_path / "a", [1, 10])
    with pytest.raises(DataError, match=r"data_batch_1.bin: record 1 has label 10, out of range 0..9"):
        _load("image", root)
    root = _cifar(tmp_path / "b", [1])
    (root / "cifar-10-batches-bin" / "test_batch.bin").write_bytes(b"\x01" * 3000)
    with pytest.raises(DataError, match=r"test_batch.bin: malformed file of 3000 bytes"):
        _load("image", root, "test")
    (root / "cifar-10-batches-bin" / "test_batch.bin").write_bytes(b"")
    with pytest.raises(DataError, match=r"test_batch.bin: the file is empty"):
        _load("image", root, "test")
    (root / "cifar-10-batches-bin" / "data_batch_3.bin").unlink()
    with pytest.raises(DataError, match=r"data_batch_3.bin does not exist"):
        _load("image", root)
