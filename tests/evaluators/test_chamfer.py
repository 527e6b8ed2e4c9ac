"""Chamfer / F-score (evaluators/chamfer.py) against slow, obviously-correct references."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from lavo_zoo.evaluators import build_evaluator
from lavo_zoo.evaluators.chamfer import PointClouds, chamfer_l1, score_clouds
from lavo_zoo.nn.points import nearest_sq_distances
from tests.nn.helpers import clouds


def _brute_force(pred: np.ndarray, gt: np.ndarray) -> dict[str, float]:
    d = ((pred[:, None, :].astype(np.float64) - gt[None, :, :]) ** 2).sum(-1)  # [N, M]
    d1, d2 = d.min(1), d.min(0)
    p, r = (np.sqrt(d1) < 0.01).mean(), (np.sqrt(d2) < 0.01).mean()
    return {"cd_l1": (np.sqrt(d1).mean() + np.sqrt(d2).mean()) / 2 * 1000, "cd_l2": (d1.mean() + d2.mean()) * 1000,
            "fscore": 2 * p * r / (p + r) if p + r else 0.0}


@pytest.mark.parametrize("kind", ["uniform", "near"])
def test_scores_match_brute_force(kind: str) -> None:
    pred, gt = clouds(kind, 700, 900, seed=4)
    got, want = score_clouds(pred, gt), _brute_force(pred.numpy(), gt.numpy())
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-5, abs=1e-9)
    assert score_clouds(gt, gt) == {"cd_l1": 0.0, "cd_l2": 0.0, "fscore": 1.0}
    far = score_clouds(gt, gt + 1.0)
    assert far["fscore"] == 0.0 and far["cd_l2"] == pytest.approx(_brute_force(gt.numpy(), gt.numpy() + 1)["cd_l2"])


def test_chamfer_l1_is_differentiable_in_batches() -> None:
    a, b = clouds("near", 200, 200, seed=5)
    pred = torch.stack([a, b])[None].reshape(2, 200, 3).requires_grad_()
    d1, d2 = nearest_sq_distances(pred, torch.stack([b, a]))
    loss = chamfer_l1(d1, d2)
    assert loss.shape == (2,) and loss.sum().item() == pytest.approx(2 * score_clouds(a, b)["cd_l1"] / 1000, rel=1e-5)
    loss.sum().backward()
    assert torch.isfinite(pred.grad).all() and pred.grad.abs().sum() > 0


def test_evaluator_overall_is_the_mean_of_category_means_and_ignores_padding() -> None:
    ev = build_evaluator("chamfer")
    rng = torch.Generator().manual_seed(6)
    per_cat: dict[str, list[dict[str, float]]] = {}
    for cats in (["chair", "chair", "lamp"], ["chair", "plane", "plane"]):
        gt = torch.rand(3, 80, 3, generator=rng)
        pred = gt + 0.01 * torch.randn(3, 80, 3, generator=rng)
        mask = torch.ones(3, 80, dtype=torch.bool)
        mask[:, 70:] = False
        padded = pred.clone()
        padded[:, 70:] = 0.0  # padding that must not count
        ev.update(PointClouds(padded, mask), PointClouds(gt, categories=cats))
        for i, c in enumerate(cats):
            per_cat.setdefault(c, []).append(_brute_force(pred[i, :70].numpy(), gt[i].numpy()))
    out = ev.compute()
    assert ev.num_samples == 6
    for metric in ("cd_l1", "cd_l2", "fscore"):
        means = {c: np.mean([s[metric] for s in rows]) for c, rows in per_cat.items()}
        for c, v in means.items():
            assert out[f"{metric}@{c}"] == pytest.approx(v, rel=1e-5)
        assert out[metric] == pytest.approx(np.mean(list(means.values())), rel=1e-5)
        assert out[metric] != pytest.approx(np.mean([s[metric] for rows in per_cat.values() for s in rows]),
                                            rel=1e-9)  # not the mean over clouds
    results = ev.results()
    assert results["fscore@lamp"]["higher_is_better"] and not results["cd_l1"]["higher_is_better"]
