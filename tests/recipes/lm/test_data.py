"""PG-19 data: the layout, the token cache, blocks, and books that are not text (refused, or left out by name with
data.skip_bad_files)."""
import logging
import os

import numpy as np
import pytest

from lavo_zoo.errors import DataError
from lavo_zoo.nn.tokenizers import get_tokenizer
from lavo_zoo.recipes.lm.data import TokenBlocks, load_tokens, split_files


def make_pg19(root, books=None):
    books = books or {"train": {"10": "first book", "11": "second book"}, "validation": {"20": "valid"},
                      "test": {"30": "test text"}}
    for split, files in books.items():
        (root / split).mkdir(parents=True, exist_ok=True)
        for book_id, text in files.items():
            (root / split / f"{book_id}.txt").write_text(text)
    (root / "metadata.csv").write_text("10,First,1900,http://x/10.txt\n")
    return root


def test_reads_layout_in_book_order_with_separators(tmp_path):
    root = make_pg19(tmp_path / "pg19")
    tokens = load_tokens(root, "train", get_tokenizer("bytes"), tmp_path / "cache")
    assert bytes(tokens.tolist()) == b"first book\0second book\0"


def test_missing_or_empty_split_is_refused(tmp_path):
    root = make_pg19(tmp_path / "pg19", {"train": {"1": "x"}})
    with pytest.raises(DataError, match="split 'validation' is missing: expected a folder .*validation"):
        split_files(root, "validation")
    (root / "test").mkdir()
    with pytest.raises(DataError, match="split 'test' is empty"):
        split_files(root, "test")
    with pytest.raises(DataError, match="does not exist"):
        split_files(tmp_path / "nowhere", "train")


def test_cache_is_rebuilt_when_sources_change(tmp_path):
    root = make_pg19(tmp_path / "pg19")
    cache = tmp_path / "cache"
    tok = get_tokenizer("bytes")
    assert bytes(load_tokens(root, "train", tok, cache).tolist()) == b"first book\0second book\0"
    files = sorted(cache.rglob("train-*.bin"))
    assert len(files) == 1
    mtime = files[0].stat().st_mtime_ns
    load_tokens(root, "train", tok, cache)  # unchanged sources: the cache is reused
    assert files[0].stat().st_mtime_ns == mtime

    (root / "train" / "11.txt").write_text("changed")
    assert bytes(load_tokens(root, "train", tok, cache).tolist()) == b"first book\0changed\0"
    (root / "train" / "12.txt").write_text("added")
    assert bytes(load_tokens(root, "train", tok, cache).tolist()) == b"first book\0changed\0added\0"
    assert len(list(cache.rglob("train-*.bin"))) == 1  # stale caches are removed


def test_blocks_cover_every_target_once():
    tokens = np.arange(23, dtype=np.uint16)
    blocks = TokenBlocks(tokens, block_size=5)
    assert len(blocks) == 4
    items = [blocks[i] for i in range(len(blocks))]
    assert all(item.shape == (6,) for item in items)
    targets = np.concatenate([item[1:].numpy() for item in items])
    assert targets.tolist() == list(range(1, 21))
    with pytest.raises(DataError, match="no block"):
        TokenBlocks(tokens, block_size=30)


def test_pg19_mini(shared_data, tmp_path):
    root = shared_data / "pg19-mini"
    if not root.is_dir():
        pytest.skip(f"{root} is absent")
    tok = get_tokenizer("gpt2")
    tokens = load_tokens(root, "validation", tok, tmp_path / "cache")
    first = min((root / "validation").glob("*.txt")).read_text(encoding="utf-8")
    assert tok.decode(tokens[:50].tolist()) == tok.decode(tok.encode(first)[:50])
    assert (tokens == tok.eod).sum() == len(split_files(root, "validation"))


# -------------------------------------------------------------------------------------------- books that are not text
def make_split(root, books: dict[str, bytes]):
    (root / "train").mkdir(parents=True)
    for name, data in books.items():
        (root / "train" / name).write_bytes(data)
    return root


def test_random_bytes_are_refused_with_file_and_offset(tmp_path):
    noise = b"plain start " + os.urandom(2000)
    offset = next(i for i in range(len(noise)) if _invalid_at(noise, i))
    root = make_split(tmp_path / "pg19", {"1.txt": b"good book", "2.txt": noise})
    with pytest.raises(DataError) as e:
        load_tokens(root, "train", get_tokenizer("bytes"), tmp_path / "cache")
    assert f"2.txt is not valid UTF-8 text: byte offset {offset}" in str(e.value)
    assert "data.skip_bad_files=true" in str(e.value)
    assert not list((tmp_path / "cache").rglob("*.tmp")) and not list((tmp_path / "cache").rglob("*.bin"))


def _invalid_at(data: bytes, i: int) -> bool:
    """Slow reference: the first offset at which the prefix stops being decodable UTF-8."""
    try:
        data[:i + 4].decode("utf-8")
        return False
    except UnicodeDecodeError as e:
        return e.start == i


def test_nul_bytes_are_refused(tmp_path):
    root = make_split(tmp_path / "pg19", {"1.txt": b"some text\0more text"})
    with pytest.raises(DataError, match=r"1.txt holds a NUL byte at byte offset 9"):
        load_tokens(root, "train", get_tokenizer("bytes"), tmp_path / "cache")


def test_skip_bad_files_leaves_them_out_and_names_them_on_every_load(tmp_path, caplog):
    root = make_split(tmp_path / "pg19", {"1.txt": b"first", "2.txt": b"\xff\xfe binary", "3.txt": b"x\0y",
                                          "4.txt": "caf\u00e9".encode()})
    tok = get_tokenizer("bytes")
    for _ in range(2):  # the second load is a cache hit and must warn again
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            tokens = load_tokens(root, "train", tok, tmp_path / "cache", skip_bad_files=True)
        assert bytes(tokens.tolist()) == b"first\0" + "caf\u00e9".encode() + b"\0"
        assert "skipped 2 of 4 books" in caplog.text and "2.txt" in caplog.text and "3.txt" in caplog.text
    with pytest.raises(DataError, match="2.txt is not valid UTF-8"):  # the strict cache is a different one
        load_tokens(root, "train", tok, tmp_path / "cache")


def test_a_split_of_only_bad_files_is_refused_even_when_skipping(tmp_path):
    root = make_split(tmp_path / "pg19", {"1.txt": b"\xff"})
    with pytest.raises(DataError, match="every book of .* is not text"):
        load_tokens(root, "train", get_tokenizer("bytes"), tmp_path / "cache", skip_bad_files=True)
