"""A PG-19 split holding a file that is not text is refused, or left out by name with data.skip_bad_files."""
import logging
import os

import pytest

from lavo_zoo.errors import DataError
from lavo_zoo.nn.tokenizers import get_tokenizer
from lavo_zoo.recipes.lm.data import load_tokens


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
