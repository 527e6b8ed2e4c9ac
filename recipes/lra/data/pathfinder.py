"""Pathfinder (Linsley et al. 2018; LRA's Pathfinder-32) in its release layout and an offline generator for it.

Layout: ``<root>/<difficulty>/imgs/<batch>/sample_<i>.png`` (grayscale 32 x 32) and one metadata text file per
batch, ``<root>/<difficulty>/metadata/<batch>.npy``, a line per image: ``imgs/<batch> sample_<i>.png <i> <label>
...`` (label = field 4: 1 when the two markers are joined by one contour). Difficulties: ``curv_baseline`` (easy),
``curv_contour_length_9`` and ``curv_contour_length_14`` (hard, the one LRA reports). As LRA's input pipeline,
the metadata files are read in batch order and split 80 / 10 / 10 % into train / validation / test; a pixel value
(0..255) is a token.

The generator draws, on a 2x supersampled canvas, two curved dashed contours of ``contour_length`` paddles,
``20 // distractor_length`` short distractor snakes (``distractor_length = contour_length // 3``), and two round
markers: at both ends of the first contour (label 1) or at one end of each contour (label 0). Parameters as LRA's
Pathfinder-32 (paddle length 2, margin 1, marker radius 1.5, continuity 1.0 = at most 45 degrees of turn between
consecutive paddles). Contours never come closer than 1.5 pixels to each other, so which markers are connected is
a property of the geometry, checked in the tests.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lavo_zoo.errors import DataError
from lavo_zoo.recipes.lra.data.common import Example

NUM_CLASSES = 2
DIFFICULTIES = {"curv_baseline": 6, "curv_contour_length_9": 9, "curv_contour_length_14": 14}
SPLIT_FRACTIONS = {"train": (0.0, 0.8), "validation": (0.8, 0.9), "test": (0.9, 1.0)}
SAMPLE_NAME = re.compile(r"^sample_\d+\.png$")


@dataclass
class PathfinderSettings:
    """LRA's Pathfinder-32 generator arguments (``lra_benchmarks/data/pathfinder.py``)."""

    contour_length: int = 14  # paddles per contour
    image_size: int = 32
    paddle_length: float = 2.0
    paddle_margin: float = 1.0
    paddle_thickness: float = 1.0  # LRA: 0.5 at antialias scale 2, i.e. about one pixel wide here
    marker_radius: float = 1.5
    continuity: float = 1.0  # maximum turn between paddles, in units of 45 degrees
    antialias_scale: int = 2
    min_separation: float = 1.5  # pixels between different contours
    distractor_length: int = field(default=0)  # 0: contour_length // 3
    num_distractors: int = field(default=-1)  # -1: 20 // distractor_length

    def __post_init__(self) -> None:
        if self.distractor_length <= 0:
            self.distractor_length = max(1, self.contour_length // 3)
        if self.num_distractors < 0:
            self.num_distractors = 20 // self.distractor_length


@dataclass
class PathfinderSample:
    image: np.ndarray  # [S, S] uint8
    label: int
    contours: list[np.ndarray]  # the two main contours, each [n + 1, 2] (x, y) joints: ends at [0] and [-1]
    markers: np.ndarray  # [2, 2] marker centres (x, y)
    segments: np.ndarray = field(repr=False, default=None)  # [K, 2, 2] every drawn paddle (contours + distractors)


class _Occupancy:
    """Cells (4 per pixel) within ``radius`` of a committed snake: later snakes must keep out of them."""

    RES = 4

    def __init__(self, size: int, radius: float) -> None:
        self.size, self.radius = size, radius
        self.grid = np.zeros((size * self.RES, size * self.RES), dtype=bool)
        r = math.ceil(radius * self.RES)
        dy, dx = np.mgrid[-r:r + 1, -r:r + 1]
        keep = dy ** 2 + dx ** 2 <= (radius * self.RES) ** 2
        self.offsets = np.stack([dy[keep], dx[keep]], 1)

    def free(self, pts: np.ndarray) -> bool:
        cells = np.clip((pts * self.RES).astype(int), 0, self.size * self.RES - 1)
        return not self.grid[cells[:, 1], cells[:, 0]].any()

    def add(self, pts: np.ndarray) -> None:
        cells = (pts * self.RES).astype(int)[:, None, ::-1] + self.offsets[None]  # [P, O, (row, col)]
        cells = cells.reshape(-1, 2)
        ok = ((cells >= 0) & (cells < self.size * self.RES)).all(1)
        self.grid[cells[ok, 0], cells[ok, 1]] = True


_FRACTIONS = np.array([0.25, 0.5, 0.75, 1.0])


def _snake(rng: np.random.Generator, n: int, s: PathfinderSettings, occupied: _Occupancy, restarts: int = 60,
           candidates: int = 12) -> np.ndarray | None:
    """Joints [n + 1, 2] (x, y) of a dashed snake of n paddles inside the canvas and clear of ``occupied``; it
    turns at most ``continuity`` x 45 degrees per paddle and never comes back near its own earlier paddles."""
    size, margin = s.image_size, 2.0
    step = s.paddle_length + s.paddle_margin
    turn = s.continuity * math.pi / 4
    gap = s.min_separation + s.paddle_thickness
    cells = size * occupied.RES
    for _ in range(restarts):
        start = rng.uniform(margin, size - margin, size=2)
        if not occupied.free(start[None]):
            continue
        angle = rng.uniform(0, 2 * math.pi)
        joints, trail = [start], np.zeros((0, 2))  # trail: dense points of all paddles but the newest
        last_new = start[None]
        for _ in range(n):
            a = angle + rng.uniform(-turn, turn, size=candidates)  # [C]
            d = step * np.stack([np.cos(a), np.sin(a)], -1)  # [C, 2]
            pts = joints[-1] + d[:, None] * _FRACTIONS[None, :, None]  # [C, 4, 2]
            ok = ((pts[:, -1] >= margin) & (pts[:, -1] <= size - margin)).all(-1)
            idx = np.clip((pts * occupied.RES).astype(int), 0, cells - 1)
            ok &= ~occupied.grid[idx[..., 1], idx[..., 0]].any(-1)
            if len(trail):
                ok &= np.linalg.norm(pts[:, :, None] - trail[None, None], axis=-1).min(axis=(1, 2)) >= gap
            good = np.flatnonzero(ok)
            if not good.size:
                break
            angle = a[good[0]]
            trail = np.concatenate([trail, last_new])
            last_new = np.concatenate([joints[-1][None], pts[good[0], :-1]])
            joints.append(pts[good[0], -1])
        if len(joints) == n + 1:
            return np.array(joints)
    return None


def _dense(joints: np.ndarray) -> np.ndarray:
    """4 points per step along the polyline (gaps included): [4 n, 2]."""
    t = np.linspace(0, 1, 4, endpoint=False)
    a, b = joints[:-1], joints[1:]
    return (a[:, None] + (b - a)[:, None] * t[None, :, None]).reshape(-1, 2)


def paddles(joints: np.ndarray, s: PathfinderSettings) -> np.ndarray:
    """The drawn dashes of a snake: each step's first ``paddle_length`` pixels, [n, 2, 2] (start, end)."""
    a, b = joints[:-1], joints[1:]
    frac = s.paddle_length / (s.paddle_length + s.paddle_margin)
    return np.stack([a, a + (b - a) * frac], axis=1)


def render(segments: np.ndarray, markers: np.ndarray, s: PathfinderSettings) -> np.ndarray:
    """Anti-aliased grayscale image [S, S] uint8 of the paddles (width ``paddle_thickness``) and round markers:
    each pixel is the lit fraction of its ``antialias_scale`` x ``antialias_scale`` subpixel centres."""
    k, size = s.antialias_scale, s.image_size
    lit = np.zeros((size * k, size * k), dtype=bool)  # [row = y, column = x]
    half = s.paddle_thickness / 2
    shapes = [(seg[0], seg[1], half) for seg in segments] + [(m, m, s.marker_radius) for m in markers]
    for a, b, radius in shapes:  # a capsule: points within `radius` of segment a-b
        lo = np.floor((np.minimum(a, b) - radius) * k).astype(int).clip(0, size * k)
        hi = np.ceil((np.maximum(a, b) + radius) * k).astype(int).clip(0, size * k)
        xs = (np.arange(lo[0], hi[0]) + 0.5) / k
        ys = (np.arange(lo[1], hi[1]) + 0.5) / k
        px, py = np.meshgrid(xs, ys, indexing="xy")  # [h, w]
        ab = b - a
        t = np.clip(((px - a[0]) * ab[0] + (py - a[1]) * ab[1]) / max(float(ab @ ab), 1e-9), 0, 1)
        dist = np.hypot(px - a[0] - t * ab[0], py - a[1] - t * ab[1])
        lit[lo[1]:hi[1], lo[0]:hi[0]] |= dist <= radius
    coverage = lit.reshape(size, k, size, k).mean(axis=(1, 3))
    return np.rint(coverage * 255).astype(np.uint8)


def generate_sample(rng: np.random.Generator, label: int, s: PathfinderSettings, max_tries: int = 500
                    ) -> PathfinderSample:
    """One image: two contours, distractors, markers at the ends of one contour (label 1) or of both (label 0).

    Args:
        rng: the generator.
        label: 1 (the markers on one contour) or 0 (on two).
        s: the difficulty's settings.
        max_tries: layouts tried before giving up (contours that do not fit are redrawn).

    Raises:
        DataError: no layout fit in ``max_tries`` tries.
    """
    for _ in range(max_tries):
        occupied = _Occupancy(s.image_size, s.min_separation + s.paddle_thickness)
        snakes = []
        for n in [s.contour_length] * 2 + [s.distractor_length] * s.num_distractors:
            pts = _snake(rng, n, s, occupied)
            if pts is None:
                break
            snakes.append(pts)
            occupied.add(np.concatenate([_dense(pts), pts[-1:]]))
        if len(snakes) < 2 + s.num_distractors:
            continue
        a, b = snakes[0], snakes[1]
        if label == 1:
            markers = np.stack([a[0], a[-1]])
        else:
            markers = np.stack([a[rng.integers(2) * -1], b[rng.integers(2) * -1]])
        segments = np.concatenate([paddles(p, s) for p in snakes])
        image = render(segments, markers, s)
        return PathfinderSample(image, label, [a, b], markers, segments)
    raise DataError(f"could not place {2 + s.num_distractors} snakes on a {s.image_size}-pixel canvas in "
                    f"{max_tries} tries; lower contour_length or num_distractors")


def write_dataset(out: Path, size: int, difficulty: str, seed: int, batch_size: int = 1000) -> None:
    """``size`` balanced samples as ``out/<difficulty>/imgs/<batch>/sample_<i>.png`` + ``metadata/<batch>.npy``.

    Args:
        out: the folder to write into.
        size: the samples (half of each label).
        difficulty: the difficulty (:data:`DIFFICULTIES`).
        seed: the generator's seed.
        batch_size: samples per batch folder.
    """
    from PIL import Image

    if difficulty not in DIFFICULTIES:
        raise DataError(f"unknown Pathfinder difficulty '{difficulty}'; choose one of {', '.join(DIFFICULTIES)}")
    s = PathfinderSettings(contour_length=DIFFICULTIES[difficulty])
    rng = np.random.default_rng(seed)
    root = out / difficulty
    (root / "metadata").mkdir(parents=True)
    for batch, start in enumerate(range(0, size, batch_size)):
        folder = root / "imgs" / str(batch)
        folder.mkdir(parents=True)
        lines = []
        for i in range(start, min(start + batch_size, size)):
            sample = generate_sample(rng, i % 2, s)
            Image.fromarray(sample.image, mode="L").save(folder / f"sample_{i - start}.png")
            lines.append(f"imgs/{batch} sample_{i - start}.png {i - start} {sample.label} {s.contour_length} "
                         f"{s.paddle_length:g} {s.num_distractors}\n")
        (root / "metadata" / f"{batch}.npy").write_text("".join(lines))


def _batch_key(path: Path) -> tuple[int, str]:
    return (int(path.stem), path.stem) if path.stem.isdigit() else (1 << 60, path.stem)


def load_split(root: Path, split: str, max_length: int, difficulty: str, image_size: int = 32) -> list[Example]:
    """The ``split`` share of every metadata row of ``root/<difficulty>`` (or ``root`` itself), images checked.

    Args:
        root: the data folder.
        split: ``train``, ``val`` or ``test`` (a fixed share of the rows).
        max_length: pixels kept per image (the sequence is truncated to it).
        difficulty: the difficulty's folder.
        image_size: the images' side, in pixels (others are a DataError).
    """
    from PIL import Image, UnidentifiedImageError

    base = root / difficulty if (root / difficulty).is_dir() else root
    metadata = sorted((base / "metadata").glob("*.npy"), key=_batch_key)
    if not metadata:
        found = sorted(p.name for p in root.iterdir() if (p / "metadata").is_dir()) if root.is_dir() else []
        hint = (f"; {root} holds the difficulty folder(s) {', '.join(found)}: set data.difficulty={found[0]}"
                if found else "")
        raise DataError(f"{root / difficulty}: no Pathfinder data of difficulty '{difficulty}' (data.difficulty) "
                        f"here{hint}. The layout is <root>/<difficulty>/{{imgs/<batch>/sample_<i>.png, "
                        "metadata/<batch>.npy}}")
    rows = []
    for meta in metadata:
        for line_no, line in enumerate(meta.read_text().splitlines(), 1):
            if not line.strip():
                continue
            fields = line.split()
            where = f"{meta}, line {line_no}"
            if len(fields) < 4 or not SAMPLE_NAME.match(fields[1]):
                raise DataError(f"{where}: malformed metadata row {line!r}; expected 'imgs/<batch> sample_<i>.png "
                                "<i> <label> ...'")
            if fields[3] not in ("0", "1"):
                raise DataError(f"{where}: label '{fields[3]}' is out of range; Pathfinder labels are 0 or 1")
            rows.append((base / fields[0] / fields[1], int(fields[3]), where))
    lo, hi = SPLIT_FRACTIONS[split]
    chosen = rows[round(lo * len(rows)):round(hi * len(rows))]
    if not chosen:
        raise DataError(f"{base}: the {split} split is empty ({len(rows)} metadata rows in all; it takes rows "
                        f"{lo:.0%}-{hi:.0%})")
    examples = []
    for path, label, where in chosen:
        if not path.is_file():
            raise DataError(f"{path}: missing image (listed in {where})")
        try:
            with Image.open(path) as im:
                if im.size != (image_size, image_size):
                    raise DataError(f"{path}: image is {im.size[0]}x{im.size[1]}, expected {image_size}x{image_size} "
                                    "(set data.image_size for other Pathfinder resolutions)")
                pixels = np.asarray(im.convert("L"), dtype=np.uint8).reshape(-1)
        except (UnidentifiedImageError, OSError) as e:
            raise DataError(f"{path}: not a readable PNG image ({e})") from None
        examples.append(Example((pixels[:max_length].astype(np.int64),), label))
    return examples
