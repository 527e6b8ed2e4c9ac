"""One run's record (zoo/engine/records.py): a cell.json read back, and its overrides read as compare writes them."""
import pytest

from lavo_zoo.compare.study import Cell, cell_overrides
from lavo_zoo.engine.records import CellRecord, is_seed, short_override
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
