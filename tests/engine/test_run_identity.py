"""The one walk that gathers runs from folders (zoo/engine/run_identity.py, ``collect_runs``): cell records under
studies and cells, results JSONs under run folders and given by name, each run once, a damaged cell record stopping
the walk or noted and left out. (That a run counts once however many paths reach it is tested through its users:
tests/compare/test_collect.py, tests/recipes/recall.)"""
import json

import pytest

from lavo_zoo.engine.run_identity import collect_runs
from lavo_zoo.errors import UsageError


def _metrics(value: float) -> dict:
    return {"loss": {"value": value, "higher_is_better": False}}


def _cell(folder, attention: str, seed: int, value: float) -> None:
    folder.mkdir(parents=True)
    (folder / "cell.json").write_text(json.dumps({"attention": attention, "seed": seed, "metrics": _metrics(value),
                                                  "checkpoint_sha256": f"{attention}{seed}"}))


def _results(file, attention: str, seed: int, value: float) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps({"recipe": "lm", "metrics": _metrics(value), "checkpoint_sha256": f"r{attention}{seed}",
                                "config": {"model": {"attention": {"name": attention}}, "train": {"seed": seed}}}))


@pytest.fixture
def runs(tmp_path):
    """A study of two cells, a run folder (its results, and a checkpoint's meta that is not a result) and a results
    file of its own."""
    _cell(tmp_path / "study" / "cells" / "lavo-seed1", "lavo", 1, 1.0)
    _cell(tmp_path / "study" / "cells" / "lavo-seed2", "lavo", 2, 2.0)
    _results(tmp_path / "run" / "results.json", "sdpa", 1, 3.0)
    meta = tmp_path / "run" / "checkpoints" / "step-1" / "meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"metrics": _metrics(9.0)}))
    _results(tmp_path / "lone.json", "local", 1, 4.0)
    return tmp_path


def test_cells_and_results_are_found_each_once(runs, capsys):
    found = collect_runs([runs / "study", runs / "study" / "cells" / "lavo-seed1", runs / "run", runs / "lone.json"],
                         results=True)
    assert [(r.attention, r.seed, r.metrics["loss"]["value"]) for r in found] == [
        ("lavo", 1, 1.0), ("lavo", 2, 2.0), ({"": "sdpa"}, 1, 3.0), ({"": "local"}, 1, 4.0)]
    assert [r.recipe for r in found] == [None, None, "lm", "lm"]  # what a results JSON says of its recipe
    assert "counted once" in capsys.readouterr().err  # the cell reached twice
    cells = collect_runs([runs / "study", runs / "run"])  # cell records only: the run folder holds none
    assert [r.source for r in cells] == [str(runs / "study" / "cells" / f"lavo-seed{s}" / "cell.json") for s in (1, 2)]


def test_a_damaged_cell_record_stops_the_walk_or_is_left_out(runs, capsys):
    damaged = runs / "study" / "cells" / "lavo-seed2" / "cell.json"
    damaged.write_text('{"attention": "lavo",\n')
    with pytest.raises(UsageError, match=rf"{damaged}, line 2, column 1: the record of a finished cell cannot be read"):
        collect_runs([runs / "study"])
    assert [r.seed for r in collect_runs([runs / "study"], skip_damaged=True)] == [1]
    assert f"{damaged}, line 2, column 1: " in capsys.readouterr().err


def test_a_missing_path_or_no_run_is_refused(runs):
    with pytest.raises(UsageError, match=f"{runs / 'nothing'} does not exist; give the --out folder of a"):
        collect_runs([runs / "nothing"])
    (runs / "empty").mkdir()
    with pytest.raises(UsageError, match=r"found no finished compare cell \(cell.json\) and no results JSON"):
        collect_runs([runs / "empty"], results=True)
