"""Point-cloud geometry (zoo/nn/points.py): FPS, k-NN and nearest neighbours against slow, obviously-correct
references, exact under bf16 autocast and for half-precision clouds."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial import cKDTree

from lavo_zoo.evaluators.chamfer import score_clouds
from lavo_zoo.nn.points import (
    farthest_point_sample,
    knn,
    nearest_indices,
    nearest_sq_distances,
    square_distances,
)
from tests.nn.helpers import brute_sq_distances, clouds


def _naive_fps(points: np.ndarray, num: int) -> list[int]:
    chosen = [0]
    for _ in range(1, num):
        best, best_i = -1.0, -1
        for i, p in enumerate(points):
            d = min(float(((p - points[j]) ** 2).sum()) for j in chosen)
            if d > best:
                best, best_i = d, i
        chosen.append(best_i)
    return chosen


def test_farthest_point_sampling_matches_a_naive_loop() -> None:
    g = torch.Generator().manual_seed(0)
    points = torch.rand(2, 60, 3, generator=g, dtype=torch.float64)
    idx = farthest_point_sample(points, 12)
    for b in range(2):
        assert idx[b].tolist() == _naive_fps(points[b].numpy(), 12)
    with pytest.raises(ValueError, match="need 0 < num <= 60"):
        farthest_point_sample(points, 61)


def test_knn_matches_sorting_all_distances() -> None:
    g = torch.Generator().manual_seed(1)
    query, points = torch.rand(2, 30, 3, generator=g), torch.rand(2, 50, 3, generator=g)
    idx = knn(query, points, 5, max_block=64)  # several blocks of rows
    for b in range(2):
        for i in range(30):
            dists = [float(((query[b, i] - points[b, j]) ** 2).sum()) for j in range(50)]
            assert idx[b, i].tolist() == sorted(range(50), key=dists.__getitem__)[:5]


@pytest.mark.parametrize("kind", ["uniform", "near", "far", "duplicates"])
@pytest.mark.parametrize("max_block", [1 << 24, 4096])  # one dense matrix / the grid search with small blocks
def test_nearest_neighbours_match_a_kd_tree(kind: str, max_block: int) -> None:
    a, b = clouds(kind, 600, 500, seed=2) if kind == "far" else clouds(kind, 1500, 1200, seed=2)
    ab, ba = nearest_indices(a[None], b[None], max_block=max_block)
    d1 = (a - b[ab[0]]).norm(dim=-1).numpy()
    d2 = (b - a[ba[0]]).norm(dim=-1).numpy()
    np.testing.assert_allclose(d1, cKDTree(b.numpy()).query(a.numpy())[0], atol=1e-6)
    np.testing.assert_allclose(d2, cKDTree(a.numpy()).query(b.numpy())[0], atol=1e-6)


def test_nearest_sq_distances_gradient_matches_dense_cdist() -> None:
    a, b = clouds("near", 300, 200, seed=3)
    a, b = a.double()[None].requires_grad_(), b.double()[None].requires_grad_()
    d1, d2 = nearest_sq_distances(a, b, max_block=1000)
    (d1.sqrt().mean() + d2.mean()).backward()
    grads = a.grad.clone(), b.grad.clone()
    a.grad, b.grad = None, None
    dense = torch.cdist(a, b) ** 2  # [1, N, M]
    (dense.min(-1).values.sqrt().mean() + dense.min(1).values.mean()).backward()
    torch.testing.assert_close(grads[0], a.grad)
    torch.testing.assert_close(grads[1], b.grad)


def test_distances_and_neighbours_stay_exact_under_bf16_autocast() -> None:
    """Training's bf16 autocast (CPU autocast applies the same policy as CUDA's to bmm / baddbmm) must not reach the
    distance products: every neighbour, the k-NN graph, the distances and the scores as without autocast and as a
    brute-force fp64 search, on dense clouds (bf16 products change most neighbours there)."""
    g = torch.Generator().manual_seed(5)
    a, b = torch.rand(2, 400, 3, generator=g), torch.rand(2, 380, 3, generator=g)
    ref = brute_sq_distances(a, b)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        dist = square_distances(a, b)
        ab, ba = nearest_indices(a, b)
        grid_ab, grid_ba = nearest_indices(a, b, max_block=4096)  # the grid search and its dense fallback
        neighbours = knn(a, b, 8)
        d1, d2 = nearest_sq_distances(a, b)
        scores = score_clouds(a[0], b[0])
    assert dist.dtype == torch.float32 and d1.dtype == torch.float32
    torch.testing.assert_close(dist.double(), ref, rtol=0, atol=1e-5)
    assert torch.equal(ab, ref.argmin(-1)) and torch.equal(ba, ref.argmin(1))
    assert torch.equal(grid_ab, ab) and torch.equal(grid_ba, ba)
    assert torch.equal(neighbours, ref.topk(8, -1, largest=False).indices)
    torch.testing.assert_close(d1.double(), ref.min(-1).values, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(d2.double(), ref.min(1).values, rtol=1e-5, atol=1e-7)
    assert scores == score_clouds(a[0], b[0])


def test_half_precision_clouds_are_measured_in_fp32() -> None:
    """bf16 points (a model's output under autocast): the distances of the rounded points, in fp32, with gradients."""
    g = torch.Generator().manual_seed(6)
    a = torch.rand(1, 300, 3, generator=g).bfloat16().requires_grad_()
    b = torch.rand(1, 310, 3, generator=g)
    d1, d2 = nearest_sq_distances(a, b)
    ref = brute_sq_distances(a.detach(), b)
    assert d1.dtype == torch.float32
    torch.testing.assert_close(d1.double(), ref.min(-1).values, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(d2.double(), ref.min(1).values, rtol=1e-5, atol=1e-7)
    (d1.sum() + d2.sum()).backward()
    assert a.grad is not None and a.grad.dtype == torch.bfloat16 and a.grad.abs().sum() > 0
