"""The built-in data (builtin.py and each task's generator in data/): ListOps values against an independent
evaluator, Pathfinder labels from the geometry, and every task's built-in data written in the release layout that the
real loader reads back, also by `lavo-zoo data lra/<task>`."""
from pathlib import Path

import numpy as np
import pytest

from lavo_zoo.recipes.lra.builtin import write_task
from lavo_zoo.recipes.lra.data import DataConfig, load_examples
from lavo_zoo.recipes.lra.data import listops as lo
from lavo_zoo.recipes.lra.data import pathfinder as pf
from lavo_zoo.recipes.lra.data.image import MAX_PAPER_GRAY


def evaluate_listops(source: str) -> int:
    """Independent ListOps evaluator: a stack machine over the tokens (parentheses dropped)."""
    stack: list[list] = []
    result = None
    for tok in source.replace("(", " ").replace(")", " ").split():
        if tok.startswith("["):
            stack.append([tok])
        elif tok == "]":
            op, *args = stack.pop()
            value = {"[MIN": lambda a: min(a), "[MAX": lambda a: max(a), "[SM": lambda a: sum(a) % 10,
                     "[MED": lambda a: (sorted(a)[len(a) // 2] if len(a) % 2 else
                                        int((sorted(a)[len(a) // 2 - 1] + sorted(a)[len(a) // 2]) / 2))}[op](args)
            if stack:
                stack[-1].append(value)
            else:
                result = value
        else:
            stack[-1].append(int(tok)) if stack else None
            result = int(tok) if not stack else result
    assert not stack
    return result


def test_listops_values_lengths_and_uniqueness() -> None:
    settings = lo.ListOpsGenerator(max_depth=6, min_length=20, max_length=120)
    rows = lo.generate(150, settings, seed=3)
    assert len({s for s, _ in rows}) == 150  # deduplicated
    lengths = [len(s.replace("(", " ").replace(")", " ").split()) for s, _ in rows]
    assert min(lengths) > 20 and max(lengths) < 120
    assert all(evaluate_listops(s) == v for s, v in rows)
    assert {t for s, _ in rows for t in s.split()} == {"(", ")", "]", *lo.OPERATORS, *map(str, range(10))}
    assert len({v for _, v in rows}) == 10  # every class occurs
    assert rows == lo.generate(150, settings, seed=3) and rows != lo.generate(150, settings, seed=4)


def test_listops_median_truncates_like_lra() -> None:
    tree = ((((lo.MED, 1), 2), lo.END))  # median of [1, 2] = 1.5 -> 1
    assert lo.to_value(tree) == 1 == evaluate_listops(lo.to_string(tree))


def _dist_to_paddles(points: np.ndarray, segs: np.ndarray) -> np.ndarray:
    """Brute force: distance of each point [P, 2] to the nearest of the segments [K, 2, 2], by dense sampling."""
    t = np.linspace(0, 1, 50)
    samples = (segs[:, :1] + (segs[:, 1:] - segs[:, :1]) * t[None, :, None]).reshape(-1, 2)
    return np.linalg.norm(points[:, None] - samples[None], axis=-1).min(1)


@pytest.mark.parametrize("difficulty", ["curv_baseline", "curv_contour_length_9"])
def test_pathfinder_label_follows_from_geometry(difficulty: str) -> None:
    s = pf.PathfinderSettings(contour_length=pf.DIFFICULTIES[difficulty])
    rng = np.random.default_rng(0)
    for i in range(8):
        sample = pf.generate_sample(rng, i % 2, s)
        a, b = sample.contours
        assert len(a) == len(b) == s.contour_length + 1
        ends = {("a", 0): a[0], ("a", 1): a[-1], ("b", 0): b[0], ("b", 1): b[-1]}
        on = [key for m in sample.markers for key, end in ends.items() if np.allclose(m, end)]
        assert len(on) == 2  # each marker sits on an end of one of the two contours
        connected = on[0][0] == on[1][0] and on[0][1] != on[1][1]
        assert connected == (sample.label == 1)
        # the other contour and every distractor keep clear of the marked contour: no shortcut joins them
        own = pf.paddles(a, s) if on[0][0] == "a" else pf.paddles(b, s)
        others = np.array([seg for seg in sample.segments if not any(np.allclose(seg, o) for o in own)])
        t = np.linspace(0, 1, 20)
        own_pts = (own[:, :1] + (own[:, 1:] - own[:, :1]) * t[None, :, None]).reshape(-1, 2)
        assert _dist_to_paddles(own_pts, others).min() > s.min_separation
        # the image shows both markers (bright discs) and is dark away from every drawn shape
        for m in sample.markers:
            assert sample.image[int(m[1]), int(m[0])] >= 150
        ys, xs = np.nonzero(sample.image)
        far = _dist_to_paddles(np.stack([xs + 0.5, ys + 0.5], 1), sample.segments)
        near_marker = np.linalg.norm(np.stack([xs + 0.5, ys + 0.5], 1)[:, None] - sample.markers[None], axis=-1).min(1)
        assert np.all((far <= 1.5) | (near_marker <= s.marker_radius + 1))


@pytest.mark.parametrize("task,size,lengths,split_sizes", [
    ("listops", 40, (10, 80), (40, 16, 16)),
    ("text", 40, (200, 600), (40, 16, 16)),
    ("retrieval", 40, (200, 600), (40, 16, 16)),
    ("image", 40, None, (45, 5, 16)),
    ("pathfinder", 20, None, (42, 5, 5)),
])
def test_builtin_data_is_written_in_the_release_layout(tmp_path: Path, task: str, size: int, lengths, split_sizes
                                                       ) -> None:
    root = write_task(tmp_path / task, task, size, seed=1, length_range=lengths, difficulty="curv_baseline")
    expected = {"listops": "basic_train.tsv", "text": "aclImdb/train/pos", "retrieval": "new_aan_pairs.eval.tsv",
                "image": "cifar-10-batches-bin/data_batch_5.bin", "pathfinder": "curv_baseline/metadata/0.npy"}
    assert (root / expected[task]).exists()
    cfg = DataConfig(task=task, path=str(root), difficulty="curv_baseline")
    splits = [load_examples(cfg, s) for s in ("train", "validation", "test")]
    if task != "text":  # Text's validation split is its test split, as LRA
        assert tuple(len(s) for s in splits) == split_sizes
    labels = [s["label"] for s in splits[0]]
    assert len(set(labels)) >= 2
    if task in ("text", "retrieval", "pathfinder"):
        assert abs(sum(labels) - len(labels) / 2) <= 1  # balanced
    if task == "retrieval":  # label 1 exactly when both windows come from the same module
        for line in (root / "new_aan_pairs.train.tsv").read_text().splitlines():
            label, id1, id2 = line.split("\t")[:3]
            assert (id1.split("@")[0] == id2.split("@")[0]) == (label == "1")


def test_text_and_retrieval_splits_use_disjoint_modules(tmp_path: Path) -> None:
    root = write_task(tmp_path / "r", "retrieval", 60, seed=0, length_range=(200, 400))
    modules = {split: {f.split("@")[0] for line in (root / f"new_aan_pairs.{split}.tsv").read_text().splitlines()
                       for f in line.split("\t")[1:3]} for split in ("train", "eval", "test")}
    assert not (modules["train"] & modules["test"]) and not (modules["train"] & modules["eval"])


def test_builtin_image_digit_is_visible_in_the_grayscale_the_model_reads(tmp_path: Path) -> None:
    """Every built-in image shows its digit as ink clearly brighter than the dark paper after LRA's grayscale: the
    brightest 3% of the pixels (the strokes) stand well above the lower quartile (the paper) and its noise. Colours
    chosen only to differ in RGB can share a grey level, which made some digits invisible (label noise)."""
    root = write_task(tmp_path / "image", "image", 60, seed=3)
    cfg = DataConfig(task="image", path=str(root))
    for split in ("train", "test"):
        for ex in load_examples(cfg, split).examples:
            gray = np.sort(ex.tokens[0].astype(np.float64))  # [1024] pixel values as the model reads them
            strokes, paper = gray[-len(gray) * 3 // 100:].mean(), gray[len(gray) // 4]  # paper: >= half the pixels
            assert strokes - paper >= 100 and paper <= MAX_PAPER_GRAY + 6, (split, strokes, paper)


def test_write_data_hook_writes_a_release_folder_the_loader_reads(tmp_path: Path) -> None:
    from lavo_zoo.engine.recipe import get_recipe
    from lavo_zoo.errors import UsageError
    from lavo_zoo.recipes.lra.data import DataConfig, load_examples

    recipe = get_recipe("lra")
    root = recipe.write_data(tmp_path / "lo", "listops", size=20)
    assert (root / "basic_val.tsv").read_text().startswith("Source\tTarget\n")
    assert len(load_examples(DataConfig(task="listops", path=str(root)), "train")) == 20
    with pytest.raises(UsageError, match="no built-in dataset 'cifar'"):
        recipe.write_data(tmp_path / "x", "cifar")
