"""The built-in table (builtin.py): the ETT column layout, deterministic, split and standardised as a real file; what
`lavo-zoo data time_series/etth1` writes."""
import numpy as np
import pandas as pd

from lavo_zoo.cli import main
from lavo_zoo.engine.recipe import get_recipe
from lavo_zoo.recipes.time_series.builtin import generate_ett
from lavo_zoo.recipes.time_series.data import ETT_COLUMNS, DataConfig, ForecastWindows


def prepare(cfg: DataConfig):
    """The recipe's series: the CSV at data.path, or its built-in table."""
    return get_recipe("time_series").series(cfg)


def _windows(cfg: DataConfig, split: str) -> ForecastWindows:
    return ForecastWindows(prepare(cfg), split, cfg.seq_len, cfg.label_len, cfg.pred_len)


def test_builtin_data_layout_and_ratio_split() -> None:
    table = generate_ett(2000, seed=0)
    assert list(table.columns) == ["date", *ETT_COLUMNS]
    pd.testing.assert_frame_equal(table, generate_ett(2000, seed=0))
    cfg = DataConfig(builtin_size=2000, seq_len=48, label_len=24, pred_len=12)
    series = prepare(cfg)
    assert series.borders == {"train": (0, 1400), "validation": (1352, 1600), "test": (1552, 2000)}
    np.testing.assert_allclose(series.values[:1400].mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(series.values[:1400].std(0), 1, atol=1e-5)
    np.testing.assert_allclose(series.mean, table[list(ETT_COLUMNS)].to_numpy()[:1400].mean(0))
    assert len(_windows(cfg, "validation")) == 248 - 60 + 1


def test_data_time_series_writes_the_builtin_table_as_an_ett_csv(tmp_path):
    from lavo_zoo.recipes.time_series.data import DataConfig, prepare

    recipe = get_recipe("time_series")

    assert main(["data", "time_series/etth1", "--out", str(tmp_path), "--size", "600"]) == 0
    csv = tmp_path / "ETTh1.csv"
    assert csv.read_text().splitlines()[0] == "date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT"
    kw = {"split": "ratio", "seq_len": 24, "label_len": 12, "pred_len": 12}
    from_csv, builtin = prepare(DataConfig(path=str(csv), **kw), csv), recipe.series(DataConfig(builtin_size=600, **kw))
    np.testing.assert_allclose(from_csv.values, builtin.values, atol=1e-4)  # %.6g in the CSV
    np.testing.assert_array_equal(from_csv.stamps, builtin.stamps)
