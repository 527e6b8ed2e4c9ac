"""Image (CIFAR-10, 1,024 grayscale pixels) from the BINARY release only (never the pickled one):
``cifar-10-batches-bin/data_batch_{1..5}.bin`` and ``test_batch.bin``, records of 1 label byte + 3,072 pixel bytes
(1,024 red, 1,024 green, 1,024 blue, row-major 32 x 32). Grayscale as LRA (``tf.image.rgb_to_grayscale`` and back
to uint8): ``floor((0.2989 R + 0.5870 G + 0.1140 B) / 255 * 255.5)``. The last 10% of the training records
(5,000 of 50,000, as Skyformer's 45,000 / 5,000) are the validation split.

Built-in stand-in (same files): scikit-learn's handwritten digits (8 x 8, 1,797 real scans) scaled to
``GLYPH_SIZES`` pixels, placed anywhere on a 32 x 32 colour canvas with random colours and noise, 10 classes. The
paper is dark (grey level <= ``MAX_PAPER_GRAY``) and the ink at least ``MIN_GRAY_CONTRAST`` grey levels brighter in
the grayscale the model reads, with hues free: the class is in the digit's shape, wherever it sits, not in a colour.
(Version 2 let paper and ink take any grey levels 80 apart, with smaller digits and stronger noise: the tiny
config stayed at chance on it for 500 steps, where it learns this version; see the recipe's README.) The digit's
strokes lie up to 28 rows apart, i.e. hundreds of positions apart in the pixel sequence. Train, validation and
test images come from disjoint scans.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lavo_zoo.errors import DataError
from lavo_zoo.recipes.lra.data.common import Example, require_file

NUM_CLASSES = 10
SIDE = 32
RECORD = 1 + 3 * SIDE * SIDE  # 3073 bytes
TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
TEST_FILE = "test_batch.bin"
VALIDATION_FRACTION = 0.1
MIN_GRAY_CONTRAST = 120.0  # built-in images: ink minus paper, in grey levels (0..255) of the grayscale above
MAX_PAPER_GRAY = 70.0  # built-in images: the paper's grey level at most
GLYPH_SIZES = (20, 28)  # built-in images: the digit's side in pixels, smallest and largest
NOISE_STD = 6.0  # built-in images: Gaussian pixel noise per channel, in levels
GRAY_WEIGHTS = np.array([0.2989, 0.5870, 0.1140])  # tf.image.rgb_to_grayscale's
LABEL_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def batches_root(root: Path) -> Path:
    """The folder of the CIFAR-10 binary batches: ``root/cifar-10-batches-bin`` when present, else ``root``."""
    return root / "cifar-10-batches-bin" if (root / "cifar-10-batches-bin").is_dir() else root


def grayscale(rgb: np.ndarray) -> np.ndarray:
    """[N, 3, H*W] uint8 -> [N, H*W] uint8 as tf.image.rgb_to_grayscale on uint8 images."""
    gray = np.tensordot(GRAY_WEIGHTS, rgb.astype(np.float64) / 255.0, axes=([0], [1]))
    return np.floor(gray * 255.5).astype(np.uint8)


def read_records(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(labels [N] int64, grayscale pixels [N, 1024] uint8) of one binary batch file."""
    data = np.fromfile(require_file(path, "a CIFAR-10 binary batch"), dtype=np.uint8)
    if data.size == 0:
        raise DataError(f"{path}: the file is empty")
    if data.size % RECORD:
        raise DataError(f"{path}: malformed file of {data.size} bytes, not a whole number of {RECORD}-byte records "
                        "(1 label byte + 32x32x3 pixels); is it the binary version of CIFAR-10?")
    records = data.reshape(-1, RECORD)
    labels = records[:, 0].astype(np.int64)
    bad = np.flatnonzero(labels >= NUM_CLASSES)
    if bad.size:
        raise DataError(f"{path}: record {bad[0]} has label {labels[bad[0]]}, out of range 0..{NUM_CLASSES - 1}")
    return labels, grayscale(records[:, 1:].reshape(-1, 3, SIDE * SIDE))


def load_split(root: Path, split: str, max_length: int) -> list[Example]:
    """The examples of ``split`` of the CIFAR-10 binary batches under ``root`` (validation: the last part of the
    training batches), images as gray-level sequences of ``max_length``."""
    folder = batches_root(root)
    if split == "test":
        labels, pixels = read_records(folder / TEST_FILE)
    else:
        parts = [read_records(folder / name) for name in TRAIN_FILES]
        labels, pixels = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        cut = len(labels) - round(len(labels) * VALIDATION_FRACTION)
        labels, pixels = (labels[:cut], pixels[:cut]) if split == "train" else (labels[cut:], pixels[cut:])
    return [Example((p[:max_length].astype(np.int64),), int(y)) for p, y in zip(pixels, labels)]


def ink_and_paper(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Random (ink, paper) RGB colours [3] each: dark paper (grey <= ``MAX_PAPER_GRAY``), the ink at least
    ``MIN_GRAY_CONTRAST`` grey levels brighter."""
    while True:
        fg, bg = rng.uniform(0, 255, size=3), rng.uniform(0, 255, size=3)
        if GRAY_WEIGHTS @ bg <= MAX_PAPER_GRAY and GRAY_WEIGHTS @ (fg - bg) >= MIN_GRAY_CONTRAST:
            return fg, bg


def render_digits(images: np.ndarray, labels: np.ndarray, count: int, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``count`` augmented renderings of the 8 x 8 scans ``images`` [M, 8, 8] (0..16): ([count] labels,
    [count, 3, 32, 32] uint8 RGB).

    Args:
        images: [M, 8, 8] the scans, values 0..16.
        labels: [M] their digits.
        count: renderings to make.
        rng: the augmentations' generator.
    """
    import torch
    import torch.nn.functional as F

    out = np.empty((count, 3, SIDE, SIDE), dtype=np.uint8)
    picks = rng.integers(0, len(images), size=count)
    for i, k in enumerate(picks):
        size = int(rng.integers(GLYPH_SIZES[0], GLYPH_SIZES[1] + 1))
        glyph = F.interpolate(torch.from_numpy(images[k] / 16.0).float()[None, None], size=(size, size),
                              mode="bilinear", align_corners=False)[0, 0].numpy()  # [s, s] in [0, 1]
        alpha = np.zeros((SIDE, SIDE))
        y, x = rng.integers(0, SIDE - size + 1, size=2)
        alpha[y:y + size, x:x + size] = glyph
        fg, bg = ink_and_paper(rng)
        noise = rng.normal(0, NOISE_STD, size=(3, SIDE, SIDE))
        img = bg[:, None, None] * (1 - alpha) + fg[:, None, None] * alpha + noise
        out[i] = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    return labels[picks].astype(np.uint8), out


def _write_records(path: Path, labels: np.ndarray, images: np.ndarray) -> None:
    records = np.concatenate([labels[:, None], images.reshape(len(labels), -1)], axis=1).astype(np.uint8)
    path.write_bytes(records.tobytes())


def write_dataset(out: Path, sizes: dict[str, int], seed: int) -> None:
    """``out/cifar-10-batches-bin/``: five training batches (validation records last) and the test batch."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(digits.target))
    pool_val, pool_test = len(order) // 10, len(order) // 5  # scans per split: 10% validation, 20% test
    pools = {"test": order[:pool_test], "validation": order[pool_test:pool_test + pool_val],
             "train": order[pool_test + pool_val:]}
    # the loader holds out the last 10% of the training records: make that exactly the validation renderings
    n_val = -(-sizes["train"] // 9)
    counts = {"train": 9 * n_val, "validation": n_val, "test": sizes["test"]}
    rendered = {s: render_digits(digits.images[idx], digits.target[idx], counts[s], rng) for s, idx in pools.items()}
    folder = out / "cifar-10-batches-bin"
    folder.mkdir(parents=True)
    labels = np.concatenate([rendered["train"][0], rendered["validation"][0]])
    images = np.concatenate([rendered["train"][1], rendered["validation"][1]])
    for i, chunk in enumerate(np.array_split(np.arange(len(labels)), len(TRAIN_FILES))):
        _write_records(folder / TRAIN_FILES[i], labels[chunk], images[chunk])
    _write_records(folder / TEST_FILE, *rendered["test"])
    (folder / "batches.meta.txt").write_text("\n".join(LABEL_NAMES) + "\n")
