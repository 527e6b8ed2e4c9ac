"""Point-cloud completion data: PCN as PoinTr reads it, the ShapeNet-55/34 cropping protocol, and a built-in dataset
of procedural shapes written in the PCN layout.

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

Built-in data (``data.path`` unset): eight categories (PCN's taxonomy ids and names) of shapes assembled from boxes,
cylinders and cones with random proportions (:mod:`trimesh`), 16,384 surface points each, partial views from a
z-buffer rendering from random viewpoints; generated once into the cache in the PCN layout and read back by the
same loader.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from lavo_zoo.config import NonNegativeInt, PositiveInt
from lavo_zoo.errors import ConfigError, DataError
from lavo_zoo.formats.pcd import read_pcd, write_pcd
from lavo_zoo.nn.points import fps

SPLIT_FOLDERS = {"train": "train", "validation": "val", "test": "test"}
TRAIN_VIEWS = 8
CROP_SHARES = {"easy": 0.25, "median": 0.5, "hard": 0.75}
# PoinTr's fixed ShapeNet-55/34 test viewpoints
CROP_VIEWPOINTS = ((1.0, 0.0, 0.0), (0.0, 0.0, 1.0), (1.0, 0.0, 1.0), (-1.0, 0.0, 0.0), (-1.0, 1.0, 0.0))
PCN_CATEGORIES = {"02691156": "airplane", "02933112": "cabinet", "02958343": "car", "03001627": "chair",
                  "03636649": "lamp", "04256520": "sofa", "04379243": "table", "04530566": "watercraft"}
GENERATOR_VERSION = 2


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
    builtin_size: PositiveInt = 24  # built-in models per category: train (val and test get a quarter and a half)
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
    """Every model of ``split`` in the PCN root (files checked to exist), in PCN.json order."""
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


# --------------------------------------------------------------------------------------------- built-in shapes
def _parts(category: str, rng: np.random.Generator) -> list[Any]:
    """Primitive meshes (y up) making one object of ``category`` with random proportions."""
    import trimesh
    from trimesh.creation import box, cone, cylinder

    def u(lo: float, hi: float) -> float:
        return float(rng.uniform(lo, hi))

    def at(mesh: Any, x: float, y: float, z: float) -> Any:
        mesh.apply_translation((x, y, z))
        return mesh

    def turn(mesh: Any, axis: tuple[float, float, float], angle: float = math.pi / 2) -> Any:
        mesh.apply_transform(trimesh.transformations.rotation_matrix(angle, axis))
        return mesh

    def legs(w: float, d: float, h: float, t: float, round_legs: bool) -> list[Any]:
        out = []
        for sx in (-1, 1):
            for sz in (-1, 1):
                leg = turn(cylinder(t / 2, h, sections=12), (1, 0, 0)) if round_legs else box((t, h, t))
                out.append(at(leg, sx * (w / 2 - t), h / 2, sz * (d / 2 - t)))
        return out

    if category == "table":
        w, d, h, t = u(0.8, 1.6), u(0.5, 1.0), u(0.5, 0.8), u(0.04, 0.09)
        top = (at(turn(cylinder(w / 2, 0.04, sections=32), (1, 0, 0)), 0, h, 0) if rng.uniform() < 0.3
               else at(box((w, 0.05, d)), 0, h, 0))
        return [top, *legs(w * 0.9, d * 0.9, h, t, rng.uniform() < 0.5)]
    if category == "chair":
        w, d, h, back = u(0.4, 0.6), u(0.4, 0.6), u(0.35, 0.5), u(0.35, 0.7)
        seat = at(box((w, 0.06, d)), 0, h, 0)
        rest = at(turn(box((w, back, 0.05)), (1, 0, 0), u(-0.25, 0.0)), 0, h + back / 2, -d / 2)
        return [seat, rest, *legs(w, d, h, u(0.03, 0.06), rng.uniform() < 0.4)]
    if category == "lamp":
        pole, r = u(0.6, 1.2), u(0.15, 0.3)
        parts = [at(turn(cylinder(u(0.12, 0.25), 0.04, sections=24), (1, 0, 0)), 0, 0.02, 0),
                 at(turn(cylinder(0.02, pole, sections=12), (1, 0, 0)), 0, pole / 2, 0)]
        shade = turn(cone(r, u(0.2, 0.35), sections=24), (1, 0, 0), -math.pi / 2)  # apex up
        return parts + [at(shade, 0, pole - 0.05, 0)]
    if category == "airplane":
        length, radius, span = u(1.4, 2.0), u(0.07, 0.12), u(1.2, 2.0)
        body = turn(cylinder(radius, length, sections=24), (0, 1, 0))  # along x
        nose = at(turn(cone(radius, u(0.15, 0.3), sections=24), (0, 1, 0)), length / 2, 0, 0)
        wing = at(box((u(0.25, 0.4), 0.03, span)), u(-0.1, 0.15), 0, 0)
        tail = at(box((u(0.12, 0.2), 0.025, span * u(0.3, 0.45))), -length / 2 + 0.1, 0, 0)
        fin = at(box((u(0.15, 0.25), u(0.2, 0.35), 0.025)), -length / 2 + 0.1, 0.15, 0)
        return [body, nose, wing, tail, fin]
    if category == "car":
        length, width, height = u(1.6, 2.2), u(0.7, 0.9), u(0.25, 0.4)
        wheel = u(0.12, 0.18)
        body = at(box((length, height, width)), 0, wheel + height / 2, 0)
        cabin = at(box((length * u(0.4, 0.6), u(0.2, 0.3), width * 0.85)), u(-0.2, 0.1), wheel + height + 0.1, 0)
        wheels = [at(cylinder(wheel, 0.1, sections=20), sx * length * 0.33, wheel, sz * width / 2)
                  for sx in (-1, 1) for sz in (-1, 1)]  # cylinder axis z: across the car
        return [body, cabin, *wheels]
    if category == "sofa":
        w, d, h = u(1.4, 2.2), u(0.7, 0.9), u(0.35, 0.45)
        arm = u(0.1, 0.2)
        base = at(box((w, h, d)), 0, h / 2, 0)
        back = at(box((w, u(0.3, 0.5), 0.18)), 0, h + 0.2, -d / 2 + 0.09)
        arms = [at(box((arm, h + u(0.1, 0.25), d)), sx * (w / 2 - arm / 2), (h + 0.2) / 2, 0) for sx in (-1, 1)]
        return [base, back, *arms]
    if category == "cabinet":
        w, h, d = u(0.6, 1.2), u(0.8, 1.6), u(0.4, 0.6)
        doors = int(rng.integers(1, 4))
        parts = [at(box((w, h, d)), 0, h / 2, 0)]
        for k in range(doors):  # door handles on the front
            parts.append(at(box((0.03, 0.12, 0.04)), -w / 2 + w * (k + 0.5) / doors, h * 0.55, d / 2 + 0.02))
        return parts
    if category == "watercraft":
        length, width, depth = u(1.5, 2.2), u(0.35, 0.6), u(0.2, 0.3)
        hull = at(box((length, depth, width)), 0, 0, 0)
        bow = at(turn(cone(width / 2, u(0.3, 0.5), sections=4), (0, 1, 0)), length / 2, 0, 0)
        cabin = at(box((length * u(0.2, 0.4), u(0.15, 0.3), width * 0.7)), u(-0.3, 0.1), depth / 2 + 0.1, 0)
        parts = [hull, bow, cabin]
        if rng.uniform() < 0.6:
            mast = u(0.6, 1.0)
            parts.append(at(turn(cylinder(0.02, mast, sections=12), (1, 0, 0)), u(-0.1, 0.3), mast / 2, 0))
        return parts
    raise ValueError(f"no generator for category '{category}'")


def make_shape(category: str, num_points: int, seed: int) -> np.ndarray:
    """A complete cloud [num_points, 3] (float32) of a random ``category`` object: surface samples, centred, scaled
    so that its longest side spans 0.8 to 1 (inside PCN's unit cube)."""
    import trimesh

    rng = np.random.default_rng(seed)
    mesh = trimesh.util.concatenate(_parts(category, rng))
    points, _ = trimesh.sample.sample_surface(mesh, num_points, seed=int(rng.integers(2**31)))
    points = np.asarray(points, dtype=np.float64)
    lo, hi = points.min(0), points.max(0)
    points = (points - (lo + hi) / 2) / (hi - lo).max() * rng.uniform(0.8, 1.0)
    return points.astype(np.float32)


def render_partial(points: np.ndarray, direction: np.ndarray, resolution: int = 56) -> np.ndarray:
    """The points a depth camera looking along ``direction`` sees: an orthographic z-buffer of ``resolution``^2
    pixels over the cloud keeps the nearest point of each pixel unless a neighbouring pixel shows a surface more
    than two pixels nearer (so that sparse samples of the front do not let the back show through)."""
    view = direction / np.linalg.norm(direction)
    helper = np.array([0.0, 1.0, 0.0]) if abs(view[1]) < 0.9 else np.array([1.0, 0.0, 0.0])
    right = np.cross(helper, view)
    right /= np.linalg.norm(right)
    up = np.cross(view, right)
    depth = points @ view  # [N] along the viewing direction (smaller = nearer the camera)
    uv = np.stack([points @ right, points @ up], 1)  # [N, 2]
    pixel = max(float(np.ptp(uv, 0).max()), 1e-9) / (resolution - 1e-6)
    pix = np.floor((uv - uv.min(0)) / pixel).astype(np.int64)  # [N, 2]
    key = pix[:, 0] * resolution + pix[:, 1]
    order = np.lexsort((depth, key))
    _, first = np.unique(key[order], return_index=True)
    front = order[first]  # the nearest point of every covered pixel
    zbuf = np.full((resolution + 2, resolution + 2), np.inf)
    zbuf[pix[front, 0] + 1, pix[front, 1] + 1] = depth[front]
    near = np.min([zbuf[1 + i:resolution + 1 + i, 1 + j:resolution + 1 + j]
                   for i in (-1, 0, 1) for j in (-1, 0, 1)], axis=0)  # [res, res] nearest depth around each pixel
    visible = depth[front] <= near[pix[front, 0], pix[front, 1]] + 2 * pixel
    return points[front[visible]]


def builtin_splits(train: int) -> dict[str, int]:
    return {"train": train, "val": max(1, train // 4), "test": max(2, train // 2)}


def write_shapes(out: Path, train: int = 24, seed: int = 0, num_points: int = 16384) -> Path:
    """Write the built-in dataset in the PCN layout under ``out`` (``train`` models per category in train, a
    quarter in val, half in test); returns ``out``."""
    out = Path(out)
    index = []
    for c, (tax, name) in enumerate(PCN_CATEGORIES.items()):
        entry: dict[str, Any] = {"taxonomy_id": tax, "taxonomy_name": name}
        for s, (folder, count) in enumerate(builtin_splits(train).items()):
            ids = []
            for i in range(count):
                model_id = f"{name}-{folder}-{i:04d}"
                model_seed = int.from_bytes(hashlib.sha256(f"{seed}/{model_id}".encode()).digest()[:4], "little")
                cloud = make_shape(name, num_points, model_seed)
                write_pcd(out / folder / "complete" / tax / f"{model_id}.pcd", cloud, "binary")
                rng = np.random.default_rng(model_seed + 1)
                for v in range(TRAIN_VIEWS if folder == "train" else 1):
                    direction = rng.normal(size=3)
                    direction[1] = -abs(direction[1]) * 0.5  # cameras above the object, looking down a little
                    # every encoding in use on the first view; the other train views binary (pure-Python LZF and
                    # ascii are slow to write and read, and the points are the same: float32 round-trips exactly)
                    encoding = ("binary_compressed", "ascii", "binary")[(c + s) % 3] if v == 0 else "binary"
                    write_pcd(out / folder / "partial" / tax / model_id / f"{v:02d}.pcd",
                              render_partial(cloud, direction), encoding)
                ids.append(model_id)
            entry[folder] = ids
        index.append(entry)
    (out / "PCN.json").write_text(json.dumps(index, indent=1) + "\n")
    return out
