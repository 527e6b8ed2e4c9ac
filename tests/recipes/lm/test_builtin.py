"""The built-in corpus (builtin.py): every split in the PG-19 layout, and what `lavo-zoo data lm` writes."""
from lavo_zoo.cli import main
from lavo_zoo.engine.recipe import SPLITS, get_recipe
from lavo_zoo.recipes.lm.data import DataConfig, split_files


def test_builtin_corpus_has_every_split():
    root = get_recipe("lm").data_path(DataConfig())
    for split in SPLITS:
        assert len(split_files(root, split)) >= 3
    assert (root / "metadata.csv").read_text().count("\n") == sum(len(split_files(root, s)) for s in SPLITS)


def test_data_lm_writes_the_pg19_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("LAVO_ZOO_CACHE", str(tmp_path / "cache"))
    assert main(["data", "lm", "--out", str(tmp_path / "pg19"), "--size", "40"]) == 0
    written = sorted(p.relative_to(tmp_path / "pg19") for p in (tmp_path / "pg19").rglob("*.txt"))
    full = get_recipe("lm").data_path(DataConfig())
    expected = sorted(p.relative_to(full) for p in full.rglob("*.txt"))
    assert len(written) == 40 and set(written) <= set(expected)
    book = split_files(tmp_path / "pg19", "train")[0]
    assert book.read_text() == (full / "train" / book.name).read_text()
    assert main(["data", "lm/nope", "--out", str(tmp_path / "x")]) == 2
