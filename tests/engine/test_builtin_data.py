"""Built-in data (zoo/engine/builtin_data.py): generated once per cache key into the recipe's cache, read by a config
without data.path, and written by `lavo-zoo data` without ever replacing a user's file or leaving a partial one."""
import pytest

from lavo_zoo.cli import main
from lavo_zoo.engine.recipe import get_recipe
from lavo_zoo.errors import ZooError


def test_builtin_data_is_generated_once_into_the_cache_and_written_by_data(tmp_path, monkeypatch):
    """One protocol, one cache: a config without data.path reads what the recipe's BuiltinData.write generated
    once (keyed by BuiltinData.key), and `lavo-zoo data` writes the same files."""
    from lavo_zoo.recipes.lra.data import DataConfig

    monkeypatch.setenv("LAVO_ZOO_CACHE", str(tmp_path / "cache"))
    recipe = get_recipe("lra")
    small = DataConfig(task="listops", builtin_size=16, builtin_min_length=10, builtin_max_length=30)
    first = recipe.data_path(small)
    stamp = (first / "basic_train.tsv").stat().st_mtime_ns
    assert recipe.data_path(small) == first and (first / "basic_train.tsv").stat().st_mtime_ns == stamp
    other = recipe.data_path(DataConfig(task="listops", builtin_size=17, builtin_min_length=10,
                                        builtin_max_length=30))
    assert other != first and first.parent == other.parent == tmp_path / "cache" / "lra" / "builtin"
    assert not [p for p in first.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_generated_dataset_is_written_once_per_key(tmp_path):
    from lavo_zoo.engine.builtin_data import generated_dataset

    calls = []

    def write(out):
        calls.append(out)
        (out / "data.txt").write_text(str(len(calls)))
        return out / "data.txt"

    first = generated_dataset(tmp_path, "set", {"rows": 3}, write)
    again = generated_dataset(tmp_path, "set", {"rows": 3}, write)
    other = generated_dataset(tmp_path, "set", {"rows": 4}, write)
    assert first == again != other and len(calls) == 2 and first.name == "data.txt"
    assert first.read_text() == "1" and other.read_text() == "2"
    folders = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock"))
    assert folders == sorted([first.parent.name, other.parent.name])  # no temporary folder left


def test_a_generated_dataset_asked_for_at_once_is_written_once(tmp_path):
    """Two processes (threads here: the lock is a file lock) asking for the same dataset at once: one writes it, the
    other waits and reads it; nobody replaces a dataset that another one is reading."""
    import threading
    import time

    from lavo_zoo.engine.builtin_data import generated_dataset

    calls, paths = [], []

    def write(out):
        calls.append(out)
        time.sleep(0.3)  # long enough for the other one to ask meanwhile
        (out / "data.txt").write_text("complete")
        return out / "data.txt"

    threads = [threading.Thread(target=lambda: paths.append(generated_dataset(tmp_path, "set", {"rows": 3}, write)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(paths) == 2 and paths[0] == paths[1] and paths[0].read_text() == "complete"


def test_data_never_replaces_a_users_file_and_leaves_nothing_partial(tmp_path, capsys, monkeypatch):
    """`lavo-zoo data` refuses, before anything moves, to replace any existing file (naming it) unless --overwrite,
    and even with it a file no earlier `lavo-zoo data` wrote there (its data-manifest.json lists what it wrote); a
    failure while generating (a full disk) leaves the folder as it was."""
    out = tmp_path / "ETT-small"
    out.mkdir()
    (out / "ETTh1.csv").write_text("my own data\n")
    for extra in ([], ["--overwrite"]):
        assert main(["data", "time_series/etth1", "--out", str(out), "--size", "300", *extra]) == 2
        assert "ETTh1.csv" in capsys.readouterr().err and (out / "ETTh1.csv").read_text() == "my own data\n"
    (out / "ETTh1.csv").unlink()
    assert main(["data", "time_series/etth1", "--out", str(out), "--size", "300"]) == 0
    first = (out / "ETTh1.csv").read_text()
    assert main(["data", "time_series/etth1", "--out", str(out), "--size", "200"]) == 2  # its own: asked first
    assert main(["data", "time_series/etth1", "--out", str(out), "--size", "200", "--overwrite"]) == 0
    assert (out / "ETTh1.csv").read_text().startswith("date,") and (out / "ETTh1.csv").read_text() != first
    recipe = get_recipe("time_series")

    def full_disk(out_dir, data):
        (out_dir / "ETTm1.csv").write_text("half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(type(recipe.builtin), "write", lambda self, o, d: full_disk(o, d))
    with pytest.raises(ZooError, match=f"could not write the built-in data into {out}: the disk is full"):
        recipe.write_data(out, "ettm1", 300)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ETT-small"]  # no temporary folder left beside it
    assert sorted(p.name for p in out.iterdir()) == ["ETTh1.csv", "data-manifest.json"]  # no partial ETTm1.csv
