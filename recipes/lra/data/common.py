"""What every LRA task's data shares: examples, splits, byte/pixel tokenisation, refusals that name the file."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from lavo_zoo.errors import DataError, MissingSplit, not_a_file

SPLITS = ("train", "validation", "test")
BYTE_VOCAB = 257  # LRA's ByteTextEncoder: 0 = padding, byte b -> b + 1
PIXEL_VOCAB = 256  # pixel values 0..255 are the tokens (every image is full length: nothing is padded)


@dataclass
class Example:
    """One classification example: token ids (one sequence, or two for Retrieval) and its label."""

    tokens: tuple[np.ndarray, ...]  # each [L_i] int64
    label: int


class LRADataset(Dataset):
    """Map-style dataset of :class:`Example` -> {"tokens": [L] (, "tokens2": [L2]), "label": int}."""

    def __init__(self, examples: list[Example], source: str) -> None:
        if not examples:
            raise DataError(f"{source}: the split is empty (no examples); check the path and the file layout")
        self.examples, self.source = examples, source

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor | int]:
        ex = self.examples[index]
        item: dict[str, torch.Tensor | int] = {"tokens": torch.from_numpy(ex.tokens[0]), "label": ex.label}
        if len(ex.tokens) > 1:
            item["tokens2"] = torch.from_numpy(ex.tokens[1])
        return item


def pad_batch(seqs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad with 0: ([B, L_max] int64 ids, [B, L_max] bool mask, True = real token)."""
    length = max(1, max(len(s) for s in seqs))
    ids = torch.zeros(len(seqs), length, dtype=torch.long)
    mask = torch.zeros(len(seqs), length, dtype=torch.bool)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = s
        mask[i, :len(s)] = True
    return ids, mask


def collate(samples: list[dict]) -> dict[str, torch.Tensor]:
    """A padded batch: tokens [B, L], mask [B, L] (and tokens2, mask2 for Retrieval), label [B]."""
    batch: dict[str, torch.Tensor] = {}
    batch["tokens"], batch["mask"] = pad_batch([s["tokens"] for s in samples])
    if "tokens2" in samples[0]:
        batch["tokens2"], batch["mask2"] = pad_batch([s["tokens2"] for s in samples])
    batch["label"] = torch.tensor([s["label"] for s in samples], dtype=torch.long)
    return batch


def encode_bytes(text: str | bytes, max_length: int) -> np.ndarray:
    """LRA's byte-level tokens (UTF-8 byte + 1; 0 is padding), truncated to ``max_length``: [L] int64."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return np.frombuffer(data[:max_length], dtype=np.uint8).astype(np.int64) + 1


def check_label(value: str, num_classes: int, where: str) -> int:
    """``value`` as a class index in [0, num_classes) (``"1"`` and ``"1.0"`` both read as 1), else DataError."""
    try:
        number = float(value)
    except ValueError:
        raise DataError(f"{where}: label '{value}' is not a number") from None
    if number != int(number) or not 0 <= number < num_classes:
        raise DataError(f"{where}: label '{value}' is out of range; labels are integers 0..{num_classes - 1}")
    return int(number)


def require_file(path: Path, what: str) -> Path:
    """``path`` if it is a file, else an error naming it and ``what`` it should hold: :class:`MissingSplit` when
    nothing is there, a :class:`DataError` saying what is there instead (a folder, a broken link)."""
    if path.exists() or path.is_symlink():
        if not path.is_file():
            raise DataError(f"{path} ({what}) {not_a_file(path)}; see the LRA README for the expected layout")
    else:
        raise MissingSplit(f"{path} does not exist ({what}); see the LRA README for the expected layout")
    return path


def split_sizes(size: int) -> dict[str, int]:
    """Built-in split sizes for ``size`` training examples: validation and test a tenth each (at least 16)."""
    held_out = max(16, size // 10)
    return {"train": size, "validation": held_out, "test": held_out}
