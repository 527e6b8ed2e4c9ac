"""The cache of what is computed from a dataset (zoo/data/cache.py): made once per fingerprint, made again when a
source file or a setting changes, the file it replaces removed."""
import os

from lavo_zoo.data.cache import cached_file, file_stats, fingerprint


def test_a_cache_file_is_made_once_and_again_when_its_sources_change(tmp_path):
    root = tmp_path / "dataset"
    root.mkdir()
    source = root / "a.txt"
    source.write_text("one")
    made = []

    def make(path):
        made.append(path)
        path.write_text(source.read_text())
        path.with_suffix(".skipped.json").write_text("[]")  # a file beside it goes with it

    def get(setting="x"):
        return cached_file(tmp_path / "cache", root.resolve(), "train-", {"s": setting, "f": file_stats(source)},
                           ".bin", make)

    first = get()
    assert get() == first and len(made) == 1 and first.read_text() == "one"
    source.write_text("two!")
    os.utime(source, ns=(1, 1))
    second = get()
    assert second != first and second.read_text() == "two!" and len(made) == 2
    assert sorted(p.name for p in second.parent.iterdir()) == sorted([second.name, second.stem + ".skipped.json"])
    assert get("y") not in (first, second) and len(made) == 3
    assert fingerprint({"a": 1, "b": 2}) != fingerprint({"b": 2, "a": 1})  # the payload's order is part of it
