"""The built-in dataset: eight categories (PCN's taxonomy ids and names) of shapes assembled from boxes, cylinders
and cones with random proportions (:mod:`trimesh`), 16,384 surface points each, partial views from a z-buffer
rendering from random viewpoints, written in the PCN layout (what ``lavo-zoo data point_cloud`` writes and a config
without ``data.path`` reads)."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from lavo_zoo.engine.builtin_data import BuiltinData
from lavo_zoo.formats.pcd import write_pcd
from lavo_zoo.recipes.point_cloud.data import PCN_CATEGORIES, TRAIN_VIEWS, DataConfig

GENERATOR_VERSION = 2


class BuiltinShapes(BuiltinData):
    """``shapes``: ``data.builtin_size`` training models per category (a quarter in val, half in test)."""

    datasets = ("shapes",)
    size_settings = ("--size (data.builtin_size)", "data.gt_points")

    def key(self, data: DataConfig) -> dict:
        return {"dataset": "shapes", "version": GENERATOR_VERSION, "train": data.builtin_size,
                "seed": data.builtin_seed, "gt_points": data.gt_points}

    def footprint(self, data: DataConfig) -> tuple[int, int]:
        """(memory, file bytes) of :func:`write_shapes`: one model at a time (its surface samples in float64, their
        sort and z-buffer keys: about 100 bytes a point); every complete cloud and its views (12 bytes a point)."""
        models = len(PCN_CATEGORIES) * sum(builtin_splits(data.builtin_size).values())
        return 100 * data.gt_points, models * data.gt_points * 12 * 2

    def write(self, out: Path, data: DataConfig) -> Path:
        """Procedural shapes in the PCN layout."""
        return write_shapes(out, data.builtin_size, data.builtin_seed, data.gt_points)


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
    """Shapes per split of the built-in data for ``train`` training shapes."""
    return {"train": train, "val": max(1, train // 4), "test": max(2, train // 2)}


def write_shapes(out: Path, train: int = 24, seed: int = 0, num_points: int = 16384) -> Path:
    """Write the built-in dataset in the PCN layout under ``out`` (``train`` models per category in train, a
    quarter in val, half in test); returns ``out``.

    Args:
        out: the folder to write into.
        train: shapes per category in the training split.
        seed: the generator's seed.
        num_points: points per complete cloud.
    """
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
