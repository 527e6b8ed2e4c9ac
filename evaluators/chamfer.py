"""Chamfer distance and F-score as PoinTr (``extensions/chamfer_dist``, ``utils/metrics.py``), per category.

For a predicted cloud P and ground truth G, with d1 = squared distance of each P-point to its nearest G-point and
d2 = of each G-point to its nearest P-point:
- CD-L1 x 1000 = (mean sqrt(d1) + mean sqrt(d2)) / 2 * 1000
- CD-L2 x 1000 = (mean d1 + mean d2) * 1000
- F-Score@1% = 2 p r / (p + r), precision p = share of P-points within 0.01 of G, recall r = share of G-points
  within 0.01 of P (0 when both are 0).
Each cloud is scored on its own; a category's value is the mean over its clouds and the overall value is the mean
of the category means (PoinTr's "Overall" row).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from lavo_zoo.errors import DataError, UsageError
from lavo_zoo.evaluators import register_evaluator
from lavo_zoo.evaluators.base import Evaluator, input_path
from lavo_zoo.nn.points import gather_points, nearest_indices

F_SCORE_THRESHOLD = 0.01
METRICS = ("cd_l1", "cd_l2", "fscore")


@dataclass
class PointClouds:
    """A batch of clouds: ``points`` [B, N, 3]; ``mask`` [B, N] bool (True = a real point; padding is False) or
    None; ``categories``: one name per cloud (its taxonomy), or None for one unnamed group."""

    points: torch.Tensor
    mask: torch.Tensor | None = None
    categories: Sequence[str] | None = None

    def cloud(self, i: int) -> torch.Tensor:
        """The real points [n, 3] of cloud i."""
        return self.points[i] if self.mask is None else self.points[i][self.mask[i]]


def chamfer_l1(d1: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
    """PoinTr's ChamferDistanceL1 from nearest squared distances d1 [B, N], d2 [B, M] -> [B]."""
    return (d1.sqrt().mean(-1) + d2.sqrt().mean(-1)) / 2


def chamfer_l2(d1: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
    """PoinTr's ChamferDistanceL2 from nearest squared distances d1 [B, N], d2 [B, M] -> [B]."""
    return d1.mean(-1) + d2.mean(-1)


def f_score(d1: torch.Tensor, d2: torch.Tensor, threshold: float = F_SCORE_THRESHOLD) -> torch.Tensor:
    """F-score at ``threshold`` (Euclidean) from nearest squared distances d1 [B, N], d2 [B, M] -> [B]."""
    precision = (d1 < threshold ** 2).double().mean(-1)
    recall = (d2 < threshold ** 2).double().mean(-1)
    total = precision + recall
    return torch.where(total > 0, 2 * precision * recall / total.clamp_min(1e-300), torch.zeros_like(total))


def score_clouds(pred: torch.Tensor, gt: torch.Tensor) -> dict[str, float]:
    """CD-L1 x1000, CD-L2 x1000 and F-Score@1% of one predicted cloud [N, 3] against its ground truth [M, 3]."""
    if pred.ndim != 2 or pred.shape[-1] != 3 or gt.ndim != 2 or gt.shape[-1] != 3:
        raise ValueError(f"clouds must be [N, 3], got {list(pred.shape)} and {list(gt.shape)}")
    if len(pred) == 0 or len(gt) == 0:
        raise ValueError(f"cannot score an empty cloud ({len(pred)} predicted, {len(gt)} ground-truth points)")
    ab, ba = nearest_indices(pred[None].float(), gt[None].float())  # the neighbours, found in fp32
    p64, g64 = pred[None].double(), gt[None].double()
    d1 = (p64 - gather_points(g64, ab)).square().sum(-1)  # [1, N] the distances, in fp64
    d2 = (g64 - gather_points(p64, ba)).square().sum(-1)  # [1, M]
    return {"cd_l1": float(chamfer_l1(d1, d2)) * 1000, "cd_l2": float(chamfer_l2(d1, d2)) * 1000,
            "fscore": float(f_score(d1, d2))}


def paired_clouds(pred: Path, ref: Path) -> list[tuple[str, Path, Path]]:
    """(name, predicted file, ground-truth file): one pair for two files, or every .pcd under ``ref`` with the file
    at the same relative path under ``pred``. A ground truth without a prediction, or a prediction without a ground
    truth, is refused (a partial set of predictions would score a different test set)."""
    pred, ref = input_path(pred, "--pred", "any"), input_path(ref, "--ref", "any")
    if pred.is_file() and ref.is_file():
        return [(pred.name, pred, ref)]
    if not (pred.is_dir() and ref.is_dir()):
        raise UsageError(f"--pred {pred} and --ref {ref} must both be .pcd files or both be folders")
    truths = {f.relative_to(ref) for f in ref.rglob("*.pcd")}
    predicted = {f.relative_to(pred) for f in pred.rglob("*.pcd")}
    if not truths:
        raise DataError(f"--ref {ref}: no .pcd files in this folder")
    for missing, where, other in ((sorted(truths - predicted), pred, "ground truth"),
                                  (sorted(predicted - truths), ref, "prediction")):
        if missing:
            raise DataError(f"{len(missing)} {other} file(s) have no counterpart at the same relative path under "
                            f"{where}, e.g. {where / missing[0]}; score complete sets (the same files in both)")
    return [(str(name), pred / name, ref / name) for name in sorted(truths)]


@register_evaluator("chamfer")
class ChamferEvaluator(Evaluator):
    """``cd_l1``, ``cd_l2`` (both x1000, lower is better) and ``fscore`` (F-Score@1%, higher is better): the mean of
    the per-category means, plus ``<metric>@<category>`` for every category seen. ``num_samples`` counts clouds.

    ``update(predictions, targets)``: PointClouds (or [B, N, 3] tensors); categories come from the targets (else
    the predictions); clouds without one are grouped as ``all``.
    """

    higher_is_better: ClassVar[dict[str, bool]] = {"cd_l1": False, "cd_l2": False, "fscore": True}
    files = ("--pred: a predicted cloud (.pcd) or a folder of them; --ref: the ground-truth cloud, or a folder with "
             "the same relative paths (a file's category is its first folder: 03001627/m1.pcd is in 03001627)")

    @classmethod
    def from_files(cls, pred: Path, ref: Path | None) -> ChamferEvaluator:
        from lavo_zoo.formats.pcd import read_pcd

        if ref is None:
            raise UsageError("score chamfer needs --ref, the ground-truth clouds")
        evaluator = cls()
        for name, p, g in paired_clouds(pred, ref):
            clouds = []
            for path in (p, g):
                cloud = read_pcd(path)
                if len(cloud) == 0:
                    raise DataError(f"{path}: the cloud has no points; Chamfer distance needs at least one")
                clouds.append(torch.from_numpy(cloud))
            category = Path(name).parts[0] if len(Path(name).parts) > 1 else "all"
            evaluator.update(PointClouds(clouds[0][None]), PointClouds(clouds[1][None], categories=[category]),
                             names=[name])
        return evaluator

    def reset(self) -> None:
        self.num_samples = 0
        self.sums: dict[str, dict[str, float]] = {}
        self.counts: dict[str, int] = {}
        self.files: dict[str, dict[str, float]] = {}

    def update(self, predictions: PointClouds | torch.Tensor, targets: PointClouds | torch.Tensor,
               names: Sequence[str] | None = None) -> None:
        """``names`` (one per cloud, optional) keep each cloud's scores for :meth:`details`."""
        pred = predictions if isinstance(predictions, PointClouds) else PointClouds(predictions)
        gt = targets if isinstance(targets, PointClouds) else PointClouds(targets)
        if len(pred.points) != len(gt.points):
            raise ValueError(f"{len(pred.points)} predicted clouds but {len(gt.points)} ground-truth clouds")
        categories = gt.categories if gt.categories is not None else pred.categories
        for i in range(len(pred.points)):
            name = str(categories[i]) if categories is not None else "all"
            scores = score_clouds(pred.cloud(i).detach(), gt.cloud(i).detach())
            sums = self.sums.setdefault(name, dict.fromkeys(METRICS, 0.0))
            for k, v in scores.items():
                sums[k] += v
            self.counts[name] = self.counts.get(name, 0) + 1
            self.num_samples += 1
            if names is not None:
                self.files[names[i]] = scores

    def per_category(self) -> dict[str, dict[str, float]]:
        """{category: {metric: mean over its clouds}}, categories sorted by name."""
        return {c: {k: v / self.counts[c] for k, v in self.sums[c].items()} for c in sorted(self.sums)}

    def details(self) -> dict[str, Any]:
        """Per-category means and, for named clouds (``score chamfer``), each file's scores."""
        return {"categories": self.per_category(), **({"files": self.files} if self.files else {})}

    def compute(self) -> dict[str, float]:
        if not self.sums:
            raise ValueError("ChamferEvaluator.compute() called before any cloud was scored")
        table = self.per_category()
        out = {k: sum(row[k] for row in table.values()) / len(table) for k in METRICS}
        if len(table) > 1 or "all" not in table:
            out.update({f"{k}@{c}": row[k] for c, row in table.items() for k in METRICS})
        return out

