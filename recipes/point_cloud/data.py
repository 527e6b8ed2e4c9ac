"""Point-cloud completion data: PCN as PoinTr reads it and the ShapeNet-55/34 cropping protocol.

PCN layout (``data.path``)::

    PCN.json                                    [{"taxonomy_id": "02691156", "taxonomy_name": "airplane",
                                                  "train": [model ids], "val": [...], "test": [...]}, ...]
    <split>/partial/<taxonomy_id>/<model_id>/NN.pcd   8 views (00..07) in train, 00.pcd in val and test
    <split>/complete/<taxonomy_id>/<model_id>.pcd     16,384 points

Splits: ``train``, ``validation`` (the ``val`` folder and key) and ``test``. Transforms as PoinTr's PCNDataset:
RandomSamplePoints (``input_points`` partial points, zero padded) and, in train, RandomMirrorPoints on partial and
ground truth. A sample is a dict: ``partial`` [P, 3], ``partial_mask`` [P] (False = zero padding), ``gt`` [G, 3],
``category`` (taxonomy name), ``model_id``.

``data.partial: crop`` switches to the ShapeNet-55/34 protocol: the partial input is what is left of the complete
cloud after removing the points nearest to a viewpoint (a random share between 1/4 and 3/4 and a random viewpoint in
train; in evaluation one of PoinTr's five fixed viewpoints and ``crop`` = easy / median / hard = 1/4, 1/2, 3/4),
then farthest-point sampled to ``input_points``.

Built-in data (``data.path`` unset): procedural shapes generated once into the cache in the PCN layout
(:mod:`.builtin`) and read back by the same loader.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from lavo_zoo.config import NonNegativeInt, PositiveInt, Range
from lavo_zoo.errors import ConfigError, DataError
from lavo_zoo.formats.pcd import read_pcd
from lavo_zoo.nn.points import fps

SPLIT_FOLDERS = {"train": "train", "validation": "val", "test": "test"}
TRAIN_VIEWS = 8
CROP_SHARES = {"easy": 0.25, "median": 0.5, "hard": 0.75}
# PoinTr's fixed ShapeNet-55/34 test viewpoints
CROP_VIEWPOINTS = ((1.0, 0.0, 0.0), (0.0, 0.0, 1.0), (1.0, 0.0, 1.0), (-1.0, 0.0, 0.0), (-1.0, 1.0, 0.0))
PCN_CATEGORIES = {"02691156": "airplane", "02933112": "cabinet", "02958343": "car", "03001627": "chair",
                  "03636649": "lamp", "04256520": "sofa", "04379243": "table", "04530566": "watercraft"}


@dataclass
class DataConfig:
    """Where the clouds come from and how samples are drawn."""

    path: str | None = None  # PCN root (PCN.json + train/val/test); None = the built-in procedural shapes
    categories: list[str] = field(default_factory=list)  # taxonomy ids or names to keep (empty = all)
    partial: Literal["pcn", "crop"] = "pcn"  # pcn: the partial scans on disk; crop: ShapeNet-55/34 cropping
    crop: Literal["easy", "median", "hard"] = "hard"  # evaluation crop with partial=crop
    input_points: PositiveInt = 2048  # RandomSamplePoints: partial points per sample (zero padded)
    gt_points: PositiveInt = 16384  # points in every complete cloud (checked on read)
    train_gt_sample: NonNegativeInt = 0  # train against a random subset of this many ground-truth points (0 = all)
    mirror: bool = True  # RandomMirrorPoints in train
    # built-in models per category: train (val and test get a quarter and a half); at most PCN's largest category's
    builtin_size: Annotated[int, Range(ge=1, le=10_000)] = 24
    builtin_seed: NonNegativeInt = 0


# -------------------------------------------------------------------------------------------------------- PCN
@dataclass(frozen=True)
class Model:
    taxonomy_id: str
    category: str
    model_id: str
    partials: tuple[Path, ...]
    complete: Path


def read_index(root: Path) -> list[dict[str, Any]]:
    """The validated entries of ``root/PCN.json``."""
    path = root / "PCN.json"
    if not root.is_dir():
        raise DataError(f"{root}: no such directory (data.path must be a PCN root holding PCN.json)")
    try:
        entries = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; a PCN root holds PCN.json and train/, val/, test/") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(entries, list) or not entries:
        raise DataError(f"{path}: must be a non-empty list of categories, got {type(entries).__name__}")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise DataError(f"{path}: entry {i} must be an object, got {type(entry).__name__}")
        for key in ("taxonomy_id", "taxonomy_name", "train", "val", "test"):
            if key not in entry:
                raise DataError(f"{path}: entry {i} ({entry.get('taxonomy_name', '?')}) has no '{key}'")
        for key in ("train", "val", "test"):
            if not isinstance(entry[key], list) or not all(isinstance(m, str) for m in entry[key]):
                raise DataError(f"{path}: entry {i} ({entry['taxonomy_name']}): '{key}' must be a list of model ids")
    return entries


def pcn_models(root: Path, split: str, categories: list[str] = (), partial: str = "pcn") -> list[Model]:
    """Every model of ``split`` in the PCN root (files checked to exist), in PCN.json order.

    Args:
        root: the PCN root (its PCN.json).
        split: ``train``, ``val`` or ``test``.
        categories: taxonomy ids or names to keep (empty: all).
        partial: ``pcn`` (the partial scans on disk are needed too) or ``crop`` (the complete clouds only).

    Raises:
        DataError: an unknown split, or files PCN.json lists that are missing.
        ConfigError: a category PCN.json does not have.
    """
    if split not in SPLIT_FOLDERS:
        raise DataError(f"unknown split '{split}'; choose one of {', '.join(SPLIT_FOLDERS)}")
    entries = read_index(root)
    known = {e["taxonomy_id"] for e in entries} | {e["taxonomy_name"] for e in entries}
    unknown = [c for c in categories if c not in known]
    if unknown:
        raise ConfigError(f"data.categories: {', '.join(unknown)} not in {root / 'PCN.json'}; it has "
                          f"{', '.join(e['taxonomy_name'] for e in entries)}")
    folder = SPLIT_FOLDERS[split]
    views = TRAIN_VIEWS if split == "train" else 1
    models, missing = [], []
    for e in entries:
        if categories and e["taxonomy_id"] not in categories and e["taxonomy_name"] not in categories:
            continue
        tax = e["taxonomy_id"]
        for model_id in e[folder]:
            partials = tuple(root / folder / "partial" / tax / model_id / f"{v:02d}.pcd" for v in range(views))
            complete = root / folder / "complete" / tax / f"{model_id}.pcd"
            need = (complete,) + (partials if partial == "pcn" else ())
            missing += [p for p in need if not p.is_file()]
            models.append(Model(tax, e["taxonomy_name"], model_id, partials, complete))
    if missing:
        raise DataError(f"{root}: {len(missing)} file(s) listed by PCN.json for split '{split}' are missing, "
                        f"e.g. {missing[0]}")
    if not models:
        raise DataError(f"{root / 'PCN.json'}: split '{split}' lists no models"
                        + (f" of {', '.join(categories)}" if categories else ""))
    return models


# -------------------------------------------------------------------------------------------------- transforms
def random_sample_points(points: np.ndarray, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """PoinTr's RandomSamplePoints: a random subset of n points, zero padded to n -> (points [n, 3], real [n])."""
    chosen = points[rng.permutation(len(points))[:n]]
    mask = np.zeros(n, dtype=bool)
    mask[:len(chosen)] = True
    return np.concatenate([chosen, np.zeros((n - len(chosen), 3), np.float32)]).astype(np.float32), mask


def mirror(points: np.ndarray, u: float) -> np.ndarray:
    """PoinTr's RandomMirrorPoints for a uniform draw u: u <= 1/4 mirrors x and z, <= 1/2 x, <= 3/4 z, else none."""
    sign = np.array([-1.0 if u <= 0.5 else 1.0, 1.0, -1.0 if u <= 0.25 or 0.5 < u <= 0.75 else 1.0], np.float32)
    return points * sign


def crop_view(points: np.ndarray, share: float, viewpoint: np.ndarray) -> np.ndarray:
    """ShapeNet-55/34 cropping: the points left after removing the ``share`` nearest to ``viewpoint`` (normalised)."""
    center = viewpoint / np.linalg.norm(viewpoint)
    order = np.argsort(np.linalg.norm(points - center, axis=1), kind="stable")
    return points[order[int(len(points) * share):]]


class CompletionDataset(Dataset):
    """Map-style PCN samples (see the module docstring); train draws a random view, subset and mirror each time,
    validation and test draw them from a generator seeded by the index, so evaluation is repeatable."""

    def __init__(self, root: Path, split: str, cfg: DataConfig) -> None:
        self.split, self.cfg = split, cfg
        self.train = split == "train"
        self.models = pcn_models(root, split, list(cfg.categories), cfg.partial)

    def __len__(self) -> int:
        return len(self.models)

    def _rng(self, index: int) -> np.random.Generator:
        if self.train:  # from the global torch RNG, which the trainer seeds and restores on resume
            return np.random.default_rng(int(torch.randint(0, 2**62, (1,))))
        return np.random.default_rng(1_000_003 * index + 17)

    def __getitem__(self, index: int) -> dict[str, Any]:
        m, cfg = self.models[index], self.cfg
        rng = self._rng(index)
        gt = read_pcd(m.complete, expected_points=cfg.gt_points)  # [G, 3]
        if cfg.partial == "pcn":
            view = m.partials[int(rng.integers(len(m.partials)))] if self.train else m.partials[0]
            partial = read_pcd(view)
            if len(partial) == 0:
                raise DataError(f"{view}: the partial scan has no points")
        else:
            if self.train:
                share, viewpoint = rng.uniform(0.25, 0.75), rng.normal(size=3)
            else:
                share, viewpoint = CROP_SHARES[cfg.crop], np.array(CROP_VIEWPOINTS[index % len(CROP_VIEWPOINTS)])
            partial = crop_view(gt, share, viewpoint)
            if len(partial) > cfg.input_points:
                partial = fps(torch.from_numpy(partial)[None], cfg.input_points)[0].numpy()
        partial, mask = random_sample_points(partial, cfg.input_points, rng)
        if self.train:
            if cfg.mirror:
                u = float(rng.uniform())
                partial, gt = mirror(partial, u), mirror(gt, u)
            if cfg.train_gt_sample:
                gt = gt[rng.permutation(len(gt))[:cfg.train_gt_sample]]
        return {"partial": torch.from_numpy(np.ascontiguousarray(partial)), "partial_mask": torch.from_numpy(mask),
                "gt": torch.from_numpy(np.ascontiguousarray(gt)), "category": m.category, "model_id": m.model_id}
