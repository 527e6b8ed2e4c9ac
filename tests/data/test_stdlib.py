"""The standard-library corpus (zoo/data/stdlib.py): each recipe's selection of files and split of documents, through
the one shared implementation, is what the recipe's own rule says, written out plainly here (the recipes' built-in
data, and the figures measured on it, depend on that)."""
from __future__ import annotations

import hashlib
import os
import random
import string
import zlib
from pathlib import Path

from lavo_zoo.data.split import hash_split
from lavo_zoo.data.stdlib import stdlib_files, stdlib_root
from lavo_zoo.recipes.lm.builtin import write_stdlib_corpus
from lavo_zoo.recipes.lra.data import stdlib as lra
from lavo_zoo.recipes.summarization.builtin import builtin_split, stdlib_sources


def _crc_rule(name: str) -> str:
    return {0: "validation", 1: "test"}.get(zlib.crc32(name.encode()) % 20, "train")


def _sha_rule(name: str, fractions: tuple[float, float]) -> str:
    u = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) / 2**32
    return "train" if u < fractions[0] else "validation" if u < fractions[0] + fractions[1] else "test"


def test_hash_splits_follow_the_crc_and_the_sha_rules():
    rng = random.Random(0)
    names = [p.stem for p in stdlib_files(recursive=False)]
    names += ["".join(rng.choices(string.ascii_letters + "._/", k=rng.randint(1, 30))) for _ in range(5000)]
    for name in names:
        assert hash_split(name) == builtin_split(name) == _crc_rule(name), name
        for fractions in ((0.8, 0.1), (0.8, 0.0)):
            shares = (("train", fractions[0]), ("validation", fractions[1]), ("test", 1 - sum(fractions)))
            assert hash_split(name, shares, "sha256") == _sha_rule(name, fractions), name
    assert {hash_split(n) for n in names} == {"train", "validation", "test"}


def test_lm_books_are_the_top_level_modules(tmp_path):
    root = stdlib_root()
    expected = sorted(p for p in root.glob("*.py") if p.is_file())[:7]
    write_stdlib_corpus(tmp_path, max_books=7)
    for source in expected:
        split = _crc_rule(source.stem)
        assert (tmp_path / split / f"{source.stem}.txt").is_file(), source
    assert sum(1 for _ in tmp_path.rglob("*.txt")) == 7


def test_summarization_modules_leave_out_tests_and_site_packages():
    root = stdlib_root()
    skip = {"site-packages", "dist-packages", "idle_test", "lib2to3", "__pycache__"}
    expected = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if not any(p in skip or p.startswith("test") for p in parts):
            expected.append((".".join(p for p in parts if p != "__init__") or "__init__", path))
    assert stdlib_sources() == expected and len(expected) > 100


def test_lra_files_leave_out_tests_demos_and_hidden_folders():
    root = stdlib_root()
    skip = lra.SKIP_PARTS
    for names in ((), ("json", "email"), ("textwrap.py",)):
        expected = set()
        for top in [root / n for n in names] or [root]:
            walked = [top] if top.suffix == ".py" else [
                Path(folder) / f for folder, dirs, files in os.walk(top)
                if not skip.intersection(Path(folder).relative_to(root).parts)
                and not any(p.startswith(".") for p in Path(folder).relative_to(root).parts)
                for f in files if f.endswith(".py")]
            expected |= {p for p in walked if p.is_file() and not p.name.startswith("test_")}
        assert lra.stdlib_files(*names) == sorted(expected) and expected, names
    textwrap = root / "textwrap.py"
    assert lra.stdlib_split(textwrap) == _sha_rule("textwrap.py", (0.8, 0.1))
    assert lra.stdlib_split(textwrap, (0.8, 0.0)) == _sha_rule("textwrap.py", (0.8, 0.0))
