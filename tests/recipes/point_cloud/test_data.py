"""The PCN layout loader on a hand-written fixture, PoinTr's transforms and the crop protocol."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lavo_zoo.errors import ConfigError, DataError
from lavo_zoo.formats.pcd import read_pcd, write_pcd
from lavo_zoo.recipes.point_cloud.data import (
    CompletionDataset,
    DataConfig,
    crop_view,
    mirror,
)

GT = 64


@pytest.fixture
def pcn_root(tmp_path: Path) -> Path:
    """Two categories, train (8 views) / val / test, views of distinct sizes and offsets to tell them apart."""
    rng = np.random.default_rng(0)
    index = []
    for tax, name in (("02691156", "airplane"), ("03001627", "chair")):
        entry = {"taxonomy_id": tax, "taxonomy_name": name}
        for folder, count in (("train", 2), ("val", 1), ("test", 1)):
            ids = [f"{name}{folder}{i}" for i in range(count)]
            for m in ids:
                write_pcd(tmp_path / folder / "complete" / tax / f"{m}.pcd", rng.uniform(-0.5, 0.5, (GT, 3)), "binary")
                for v in range(8 if folder == "train" else 1):
                    write_pcd(tmp_path / folder / "partial" / tax / m / f"{v:02d}.pcd",
                              rng.uniform(-0.1, 0.1, (10 + v, 3)) + v + 1,
                              ("ascii", "binary", "binary_compressed")[v % 3])
            entry[folder] = ids
        index.append(entry)
    (tmp_path / "PCN.json").write_text(json.dumps(index))
    return tmp_path


def _cfg(**kw) -> DataConfig:
    return DataConfig(gt_points=GT, input_points=32, **kw)


def test_pcn_loader_reads_the_layout(pcn_root: Path) -> None:
    test = CompletionDataset(pcn_root, "test", _cfg())
    assert [(m.category, m.model_id) for m in test.models] == [("airplane", "airplanetest0"), ("chair", "chairtest0")]
    sample = test[1]
    gt = read_pcd(pcn_root / "test" / "complete" / "03001627" / "chairtest0.pcd")
    view = read_pcd(pcn_root / "test" / "partial" / "03001627" / "chairtest0" / "00.pcd")
    assert torch.equal(sample["gt"], torch.from_numpy(gt))  # no mirroring or subsampling outside train
    assert sample["partial"].shape == (32, 3) and int(sample["partial_mask"].sum()) == 10
    real = sample["partial"][sample["partial_mask"]].numpy()
    assert sorted(map(tuple, real)) == sorted(map(tuple, view))  # RandomSamplePoints: a permutation ...
    assert (sample["partial"][~sample["partial_mask"]] == 0).all()  # ... zero padded
    assert torch.equal(test[1]["partial"], sample["partial"])  # evaluation samples are repeatable
    assert sample["category"] == "chair" and sample["model_id"] == "chairtest0"
    assert len(CompletionDataset(pcn_root, "validation", _cfg())) == 2  # the val folder


def test_train_draws_each_of_the_8_views_and_mirrors(pcn_root: Path) -> None:
    train = CompletionDataset(pcn_root, "train", _cfg(mirror=False))
    assert len(train) == 4
    torch.manual_seed(0)
    sizes = {int(train[0]["partial_mask"].sum()) for _ in range(80)}
    assert sizes == set(range(10, 18))  # view v has 10 + v points: all 8 views are used
    gt = torch.from_numpy(read_pcd(pcn_root / "train" / "complete" / "02691156" / "airplanetrain0.pcd"))
    mirrored = CompletionDataset(pcn_root, "train", _cfg(mirror=True))
    signs = set()
    for _ in range(40):
        s = mirrored[0]
        sign = tuple(torch.sign(s["gt"][0] / gt[0]).tolist())
        signs.add(sign)
        assert torch.allclose(s["gt"], gt * torch.tensor(sign))
        real = s["partial"][s["partial_mask"]]
        assert ((real * torch.tensor(sign)).mean(0) > 0).all()  # view v sits around v + 1: the partial got the sign too
    assert signs == {(-1.0, 1.0, -1.0), (-1.0, 1.0, 1.0), (1.0, 1.0, -1.0), (1.0, 1.0, 1.0)}


def test_mirror_matches_pointr_quarters() -> None:
    p = np.ones((1, 3), np.float32)
    assert [mirror(p, u).tolist()[0] for u in (0.1, 0.4, 0.6, 0.9)] == [[-1, 1, -1], [-1, 1, 1], [1, 1, -1], [1, 1, 1]]


def test_categories_filter_and_refusals(pcn_root: Path) -> None:
    assert {m.category for m in CompletionDataset(pcn_root, "train", _cfg(categories=["03001627"])).models} == {"chair"}
    assert len(CompletionDataset(pcn_root, "train", _cfg(categories=["airplane"]))) == 2
    with pytest.raises(ConfigError, match="data.categories: sofa not in"):
        CompletionDataset(pcn_root, "train", _cfg(categories=["sofa"]))
    (pcn_root / "train" / "partial" / "03001627" / "chairtrain1" / "05.pcd").unlink()
    with pytest.raises(DataError, match=r"1 file\(s\) listed by PCN.json for split 'train' are missing, e.g. .*05.pcd"):
        CompletionDataset(pcn_root, "train", _cfg())
    assert len(CompletionDataset(pcn_root, "train", _cfg(partial="crop"))) == 4  # crop needs no partial files
    write_pcd(pcn_root / "test" / "complete" / "02691156" / "airplanetest0.pcd", np.zeros((GT - 1, 3)), "binary")
    with pytest.raises(DataError, match=f"airplanetest0.pcd: {GT - 1} points, expected {GT}"):
        CompletionDataset(pcn_root, "test", _cfg())[0]
    (pcn_root / "PCN.json").write_text('[{"taxonomy_id": "1", "taxonomy_name": "a", "train": []}]')
    with pytest.raises(DataError, match="PCN.json: entry 0 \\(a\\) has no 'val'"):
        CompletionDataset(pcn_root, "train", _cfg())
    (pcn_root / "PCN.json").write_text('[{"taxonomy_id": "1",\n "taxonomy_name": ')
    with pytest.raises(DataError, match="PCN.json:2: not valid JSON"):
        CompletionDataset(pcn_root, "train", _cfg())
    with pytest.raises(DataError, match="no such directory"):
        CompletionDataset(pcn_root / "absent", "train", _cfg())


def test_crop_protocol(pcn_root: Path) -> None:
    points = np.random.default_rng(1).uniform(-0.5, 0.5, (400, 3)).astype(np.float32)
    kept = crop_view(points, 0.25, np.array([2.0, 0.0, 0.0]))
    assert len(kept) == 300
    dist = np.linalg.norm(points - [1.0, 0.0, 0.0], axis=1)
    assert np.isclose(np.sort(dist)[100:], np.sort(np.linalg.norm(kept - [1.0, 0.0, 0.0], axis=1))).all()
    for crop, share in (("easy", 0.25), ("median", 0.5), ("hard", 0.75)):
        s = CompletionDataset(pcn_root, "test", DataConfig(gt_points=GT, input_points=64, partial="crop", crop=crop))[0]
        assert int(s["partial_mask"].sum()) == GT - int(GT * share)
    assert int(CompletionDataset(pcn_root, "test", _cfg(partial="crop", crop="easy"))[0]["partial_mask"].sum()) == 32
