"""Each LRA release-format loader on hand-made fixtures: tokens as LRA, and every refusal names file and reason."""
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lavo_zoo.errors import DataError
from lavo_zoo.recipes.lra.data import DataConfig, load_examples
from lavo_zoo.recipes.lra.data.listops import TOKEN_IDS


def _load(task: str, root: Path, split: str = "train", **kw):
    return load_examples(DataConfig(task=task, path=str(root), **kw), split)


# ------------------------------------------------------------------------------------------------------ ListOps
def _listops(root: Path, rows: str, header: str = "Source\tTarget\n", split: str = "train") -> Path:
    root.mkdir(exist_ok=True)
    (root / {"train": "basic_train.tsv", "validation": "basic_val.tsv", "test": "basic_test.tsv"}[split]).write_text(
        header + rows)
    return root


def test_listops_tokens_drop_parentheses_and_keep_the_closing_bracket(tmp_path: Path) -> None:
    root = _listops(tmp_path / "l", "( ( ( [MAX 2 ) 9 ) ] )\t9\n( ( [SM 3 ) 4 ] )\t7\n")
    ds = _load("listops", root)
    assert len(ds) == 2
    first = ds[0]
    assert first["tokens"].tolist() == [TOKEN_IDS[t] for t in ("[MAX", "2", "9", "]")] and first["label"] == 9
    assert ds[1]["label"] == 7
    assert _load("listops", root, max_length=2)[0]["tokens"].tolist() == [TOKEN_IDS["[MAX"], TOKEN_IDS["2"]]


@pytest.mark.parametrize("header,rows,match", [
    ("Input\tOutput\n", "( [MAX 1 ] )\t1\n", r"basic_train.tsv: line 1 must be the header"),
    ("Source\tTarget\n", "( [MAX 1 ] )\t1\textra\n", r"basic_train.tsv, line 2: malformed row with 3 field"),
    ("Source\tTarget\n", "( [MAX 1 ] )\t1\n( [MIN 1 ] )\t10\n", r"basic_train.tsv, line 3: label '10' is out of range"),
    ("Source\tTarget\n", "( [MAX 1 ] )\tnine\n", r"line 2: label 'nine' is not a number"),
    ("Source\tTarget\n", "( [AVG 1 ] )\t1\n", r"line 2: unknown ListOps token '\[AVG'"),
    ("Source\tTarget\n", "", r"basic_train.tsv: the split is empty"),
])
def test_listops_refusals(tmp_path: Path, header: str, rows: str, match: str) -> None:
    with pytest.raises(DataError, match=match):
        _load("listops", _listops(tmp_path / "l", rows, header))


def test_listops_missing_split_file(tmp_path: Path) -> None:
    root = _listops(tmp_path / "l", "( [MAX 1 ] )\t1\n")
    with pytest.raises(DataError, match=r"basic_test.tsv does not exist \(the ListOps test split\)"):
        _load("listops", root, "test")


# ------------------------------------------------------------------------------------------------------ IMDB text
def _imdb(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / "aclImdb" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    for rel in ("train/pos", "train/neg", "test/pos", "test/neg"):
        (root / "aclImdb" / rel).mkdir(parents=True, exist_ok=True)
    return root


def test_imdb_reads_bytes_plus_one_with_folder_labels(tmp_path: Path) -> None:
    root = _imdb(tmp_path, {"train/pos/0_9.txt": "Great!", "train/neg/1_2.txt": "é bad", "test/pos/3_10.txt": "ok"})
    ds = _load("text", root)
    assert [(ds[i]["tokens"].tolist(), ds[i]["label"]) for i in range(2)] == [
        ([b + 1 for b in b"\xc3\xa9 bad"], 0), ([b + 1 for b in b"Great!"], 1)]
    assert len(_load("text", root, "validation")) == 1  # LRA evaluates IMDB on its test split
    assert _load("text", root, max_length=3)[1]["tokens"].tolist() == [ord("G") + 1, ord("r") + 1, ord("e") + 1]


@pytest.mark.parametrize("files,match", [
    ({"train/pos/review.txt": "x"}, r"pos/review.txt: malformed file name"),
    ({"train/pos/0_5.txt": "x"}, r"pos/0_5.txt: rating 5 is out of range for 'pos'"),
    ({"train/neg/0_2.txt": b"\xff\xfe"}, r"neg/0_2.txt: not UTF-8 text"),
    ({"train/neg/0_2.txt": b""}, r"neg/0_2.txt: the review is empty"),
    ({}, r"aclImdb/train: the split is empty"),
])
def test_imdb_refusals(tmp_path: Path, files: dict, match: str) -> None:
    with pytest.raises(DataError, match=match):
        _load("text", _imdb(tmp_path, files))


def test_imdb_missing_folder(tmp_path: Path) -> None:
    (tmp_path / "aclImdb" / "train" / "pos").mkdir(parents=True)
    with pytest.raises(DataError, match=r"train/neg does not exist"):
        _load("text", tmp_path)


# -------------------------------------------------------------------------------------------------------- AAN
def _aan(root: Path, rows: str, split: str = "train") -> Path:
    root.mkdir(exist_ok=True)
    (root / f"new_aan_pairs.{ {'train': 'train', 'validation': 'eval', 'test': 'test'}[split]}.tsv").write_text(rows)
    return root


def test_retrieval_reads_two_documents(tmp_path: Path) -> None:
    ds = _load("retrieval", _aan(tmp_path / "r", "1.0\tA1\tB2\tab c\txyz\n0\tA1\tC3\tq\tr s\n"))
    assert ds[0]["tokens"].tolist() == [98, 99, 33, 100] and ds[0]["tokens2"].tolist() == [121, 122, 123]
    assert [ds[0]["label"], ds[1]["label"]] == [1, 0]


@pytest.mark.parametrize("rows,match", [
    ("1\tA\tB\tonly one text\n", r"new_aan_pairs.train.tsv, line 1: malformed row with 4 tab-separated"),
    ("0\tA\tB\tx\ty\n2\tA\tB\tx\ty\n", r"new_aan_pairs.train.tsv, line 2: label '2' is out of range"),
    ("1\tA\tB\tx\ty\n1\tA\tB\t\ty\n", r"new_aan_pairs.train.tsv, line 2: text1 is empty"),
    ("1\tA\tB\t\t\n", r"new_aan_pairs.train.tsv, line 1: text1 and text2 are empty"),
    ("", r"new_aan_pairs.train.tsv: the split is empty"),
])
def test_retrieval_refusals(tmp_path: Path, rows: str, match: str) -> None:
    with pytest.raises(DataError, match=match):
        _load("retrieval", _aan(tmp_path / "r", rows))


# ---------------------------------------------------------------------------------------------------- CIFAR-10
def _cifar(root: Path, labels: list[int], rgb: np.ndarray | None = None, files=None) -> Path:
    folder = root / "cifar-10-batches-bin"
    folder.mkdir(parents=True, exist_ok=True)
    n = len(labels)
    rgb = np.zeros((n, 3, 1024), np.uint8) if rgb is None else rgb
    records = np.concatenate([np.array(labels, np.uint8)[:, None], rgb.reshape(n, -1)], 1).astype(np.uint8)
    for name in files or [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        (folder / name).write_bytes(records.tobytes())
    return root


def test_cifar_binary_grayscale_as_tensorflow(tmp_path: Path) -> None:
    rgb = np.zeros((2, 3, 1024), np.uint8)
    rgb[0, 0, 0] = 255  # pure red pixel: floor(0.2989 * 255.5) = 76
    rgb[0, :, 1] = 255  # white: floor(0.9999 * 255.5) = 255
    rgb[1, :, 5] = (10, 200, 30)  # floor((0.2989*10 + 0.5870*200 + 0.1140*30) / 255 * 255.5) = 124
    root = _cifar(tmp_path, [3, 9], rgb)
    test = _load("image", root, "test")
    assert test[0]["tokens"][:2].tolist() == [76, 255] and test[0]["label"] == 3
    assert test[1]["tokens"][5].item() == int((0.2989 * 10 + 0.5870 * 200 + 0.1140 * 30) / 255 * 255.5) == 124
    assert len(_load("image", root, "train")) == 9 and len(_load("image", root, "validation")) == 1  # 10 records


def test_cifar_refusals(tmp_path: Path) -> None:
    root = _cifar(tmp_path / "a", [1, 10])
    with pytest.raises(DataError, match=r"data_batch_1.bin: record 1 has label 10, out of range 0..9"):
        _load("image", root)
    root = _cifar(tmp_path / "b", [1])
    (root / "cifar-10-batches-bin" / "test_batch.bin").write_bytes(b"\x01" * 3000)
    with pytest.raises(DataError, match=r"test_batch.bin: malformed file of 3000 bytes"):
        _load("image", root, "test")
    (root / "cifar-10-batches-bin" / "test_batch.bin").write_bytes(b"")
    with pytest.raises(DataError, match=r"test_batch.bin: the file is empty"):
        _load("image", root, "test")
    (root / "cifar-10-batches-bin" / "data_batch_3.bin").unlink()
    with pytest.raises(DataError, match=r"data_batch_3.bin does not exist"):
        _load("image", root)


# -------------------------------------------------------------------------------------------------- Pathfinder
def _pathfinder(root: Path, n: int = 10, label: str = "1", size: int = 32) -> Path:
    base = root / "curv_baseline"
    (base / "imgs" / "0").mkdir(parents=True, exist_ok=True)
    (base / "metadata").mkdir(exist_ok=True)
    lines = []
    for i in range(n):
        Image.fromarray(np.full((size, size), i, np.uint8), mode="L").save(base / "imgs" / "0" / f"sample_{i}.png")
        lines.append(f"imgs/0 sample_{i}.png {i} {label if i == n - 1 else i % 2} 6 2 10\n")
    (base / "metadata" / "0.npy").write_text("".join(lines))
    return root


def test_pathfinder_reads_pixels_and_splits_80_10_10(tmp_path: Path) -> None:
    root = _pathfinder(tmp_path)
    kw = {"difficulty": "curv_baseline"}
    train, val, test = (_load("pathfinder", root, s, **kw) for s in ("train", "validation", "test"))
    assert (len(train), len(val), len(test)) == (8, 1, 1)
    assert train[3]["tokens"].shape == (1024,) and set(train[3]["tokens"].tolist()) == {3} and train[3]["label"] == 1
    assert test[0]["tokens"][0].item() == 9


def test_pathfinder_refusals(tmp_path: Path) -> None:
    kw = {"difficulty": "curv_baseline"}
    with pytest.raises(DataError, match=r"metadata/0.npy, line 10: label '2' is out of range"):
        _load("pathfinder", _pathfinder(tmp_path / "a", label="2"), **kw)
    root = _pathfinder(tmp_path / "b")
    (root / "curv_baseline" / "imgs" / "0" / "sample_4.png").unlink()
    with pytest.raises(DataError, match=r"sample_4.png: missing image \(listed in .*0.npy, line 5\)"):
        _load("pathfinder", root, **kw)
    with pytest.raises(DataError, match=r"sample_0.png: image is 28x28, expected 32x32"):
        _load("pathfinder", _pathfinder(tmp_path / "c", size=28), **kw)
    root = _pathfinder(tmp_path / "d")
    (root / "curv_baseline" / "metadata" / "0.npy").write_text("imgs/0 sample_0.png\n")
    with pytest.raises(DataError, match=r"0.npy, line 1: malformed metadata row"):
        _load("pathfinder", root, **kw)
    (root / "curv_baseline" / "metadata" / "0.npy").unlink()
    with pytest.raises(DataError, match=r"no Pathfinder data of difficulty 'curv_baseline'"):
        _load("pathfinder", root, **kw)
    found = _pathfinder(tmp_path / "f")  # data of another difficulty than asked: the message names what is there
    with pytest.raises(DataError, match=r"holds the difficulty folder\(s\) curv_baseline: set "
                                        r"data.difficulty=curv_baseline"):
        _load("pathfinder", found, difficulty="curv_contour_length_14")
    root = _pathfinder(tmp_path / "e", n=1)
    with pytest.raises(DataError, match=r"curv_baseline: the test split is empty"):
        _load("pathfinder", root, "test", **kw)
