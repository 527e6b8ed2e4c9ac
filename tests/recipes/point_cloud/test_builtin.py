"""The built-in shapes (builtin.py): partial views keep the visible side, and the generator writes the PCN layout that
the reader reads back."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lavo_zoo.formats.pcd import read_pcd
from lavo_zoo.recipes.point_cloud.builtin import make_shape, render_partial, write_shapes
from lavo_zoo.recipes.point_cloud.data import PCN_CATEGORIES, CompletionDataset, DataConfig


def test_render_partial_keeps_the_visible_side() -> None:
    g = np.random.default_rng(2).normal(size=(4000, 3))
    sphere = (g / np.linalg.norm(g, axis=1, keepdims=True)).astype(np.float32)
    seen = render_partial(sphere, np.array([0.0, 0.0, 1.0]), resolution=20)
    # the camera looks along +z: it sees the z < 0 half (up to pixel-sized slack at the silhouette)
    assert 100 < len(seen) <= 400 and (seen[:, 2] < 0.35).all() and seen[:, 2].mean() < -0.5


def test_builtin_generator_writes_the_pcn_layout(tmp_path: Path) -> None:
    root = write_shapes(tmp_path / "pcn", train=1, seed=3, num_points=512)
    index = json.loads((root / "PCN.json").read_text())
    assert len(index) == 8 and {e["taxonomy_name"] for e in index} == set(PCN_CATEGORIES.values())
    ds = CompletionDataset(root, "train", DataConfig(gt_points=512, input_points=256))
    assert len(ds) == 8 and all(len(m.partials) == 8 for m in ds.models)
    test = CompletionDataset(root, "test", DataConfig(gt_points=512, input_points=256))
    assert len(test) == 16
    for m in test.models:
        gt = read_pcd(m.complete, expected_points=512)
        partial = read_pcd(m.partials[0])
        assert np.abs(gt).max() <= 0.5 + 1e-6 and 0.4 <= np.ptp(gt, 0).max() <= 1.0
        assert 0 < len(partial) < 512 and np.isin(partial.view("V12"), gt.view("V12")).all()  # a subset of gt
    assert np.array_equal(make_shape("lamp", 300, seed=5), make_shape("lamp", 300, seed=5))  # deterministic
    assert not np.array_equal(make_shape("lamp", 300, seed=5), make_shape("lamp", 300, seed=6))
