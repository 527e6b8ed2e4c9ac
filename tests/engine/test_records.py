"""One run's record (zoo/engine/records.py): a cell.json read back by its one reader with its one error policy, its
overrides read as compare writes them, and the one summary of a metric over seeds."""
import json
import math
import random

import pytest

from lavo_zoo.compare.study import Cell, cell_overrides
from lavo_zoo.engine.records import CellRecord, MetricSummary, is_seed, short_override
from lavo_zoo.errors import UsageError


def test_a_cells_options_are_its_overrides_without_seed_and_attention_name():
    overrides = cell_overrides("model.attention.decoder_self", Cell("lavo", 3), {"lavo": {"num_bases": 16}})
    record = CellRecord(attention="lavo", metrics={}, seed=3, overrides=[*overrides, "data.seq_len=64"])
    assert record.options() == ["num_bases=16", "seq_len=64"]
    assert [o for o in overrides if is_seed(o)] == ["train.seed=3"]
    assert short_override("model.attention.cross.window_size=32") == "window_size=32"
    assert CellRecord(attention="sdpa", metrics={}, overrides=cell_overrides(None, Cell("sdpa", 1), {})).options() == []


def test_a_record_round_trips_through_its_json_and_refuses_another_file():
    record = CellRecord(attention="lavo", metrics={"accuracy": {"value": 0.5, "higher_is_better": True}}, seed=1,
                        overrides=["train.seed=1"], label="not saved")
    again = CellRecord.from_json({**record.to_json(), "unknown_key": 1}, "cell.json")
    assert again.to_json() == record.to_json() and again.label is None and again.source == "cell.json"
    with pytest.raises(UsageError, match="x.json is not a compare cell record"):
        CellRecord.from_json({"metrics": {}}, "x.json")


# what a damaged record holds, where its text breaks as the message must say it (by hand), and what is wrong
DAMAGED = [
    (b'{"attention": "lavo",\n "metrics": {', ", line 2, column 14", "not JSON"),
    (b'{"attention":\n "\xff", "metrics": {}}', ", line 2, column 3", "not UTF-8 text: byte 0xff"),
    (b"[1, 2]", "", "a JSON list, not a mapping"),
    (b'{"attention": "lavo"}', "", "not a compare cell record: it needs 'attention' and 'metrics'"),
]


@pytest.mark.parametrize("content, where, problem", DAMAGED)
def test_a_damaged_record_is_named_one_way_and_stops_or_is_left_out(tmp_path, capsys, content, where, problem):
    """One reader, one message (the file, the line and column where its text breaks, what is wrong, what to do), for
    every caller: a study stops on it, a gathering of results notes it and goes on (the one argument)."""
    file = tmp_path / "cell.json"
    file.write_bytes(content)
    with pytest.raises(UsageError) as stopped:
        CellRecord.read(file)
    message = str(stopped.value)
    assert message.startswith(f"{file}{where}: the record of a finished cell cannot be read ({problem}")
    assert message.endswith("remove it (or the cell's folder) and run the study's command to train the cell again")
    capsys.readouterr()
    assert CellRecord.read(file, skip_damaged=True) is None
    said = capsys.readouterr().err
    before, _, repair = message.partition("); ")  # the same message, saying what the reader did
    assert said == f"note: {before}), so it is left out; {repair}\n"


def test_a_record_that_cannot_be_opened_says_so(tmp_path):
    folder = tmp_path / "cell.json"
    folder.mkdir()  # a folder where the record belongs
    with pytest.raises(UsageError, match=rf"{folder}: the record of a finished cell cannot be read \(.*\); let this "
                                         "user read it, or remove it"):
        CellRecord.read(folder)


def test_a_finished_cells_record_reads_back_with_its_source(tmp_path):
    record = CellRecord(attention="lavo", metrics={"accuracy": {"value": 0.5, "higher_is_better": True}}, seed=2)
    file = tmp_path / "cell.json"
    file.write_text(json.dumps(record.to_json()))
    again = CellRecord.read(file)
    assert again.to_json() == record.to_json() and again.source == str(file)


def test_the_summary_over_seeds_is_the_sample_mean_and_standard_deviation():
    values = [random.uniform(-5, 5) for _ in range(random.randint(2, 9))]
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))  # the sample's, n - 1
    summary = MetricSummary.of(iter(values))
    assert summary.mean == pytest.approx(mean, rel=1e-12) and summary.std == pytest.approx(std, rel=1e-12)
    assert summary.n == len(values)
    assert MetricSummary.of([0.25]) == (0.25, 0.0, 1)  # one seed: no spread
    nothing = MetricSummary.of([])
    assert math.isnan(nothing.mean) and (nothing.std, nothing.n) == (0.0, 0)
