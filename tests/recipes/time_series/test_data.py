"""Time-series data: Informer's split borders, train-only scaler, timeF features, and refusal of bad CSVs."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lavo_zoo.engine.recipe import get_recipe
from lavo_zoo.errors import ConfigError, DataError
from lavo_zoo.recipes.time_series.data import (
    ETT_COLUMNS,
    DataConfig,
    ForecastWindows,
    split_borders,
    time_features,
)


def prepare(cfg: DataConfig):
    """The recipe's series: the CSV at data.path, or its built-in table."""
    return get_recipe("time_series").series(cfg)


def _windows(cfg: DataConfig, split: str) -> ForecastWindows:
    return ForecastWindows(prepare(cfg), split, cfg.seq_len, cfg.label_len, cfg.pred_len)


@pytest.fixture
def etth1(shared_data: Path) -> Path:
    path = shared_data / "ETT-small" / "ETTh1.csv"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path


def test_real_etth1_borders_and_scaler(etth1: Path) -> None:
    cfg = DataConfig(path=str(etth1), seq_len=96, label_len=48, pred_len=24)
    series = prepare(cfg)
    # Informer's Dataset_ETT_hour: 12/4/4 months of 30 days, later splits start seq_len rows early
    assert series.borders == {"train": (0, 8640), "validation": (8640 - 96, 11520), "test": (11520 - 96, 14400)}
    assert series.columns == ETT_COLUMNS
    raw = pd.read_csv(etth1)[list(ETT_COLUMNS)].to_numpy(np.float64)
    np.testing.assert_allclose(series.mean, raw[:8640].mean(0), rtol=1e-12)
    np.testing.assert_allclose(series.std, raw[:8640].std(0), rtol=1e-12)
    np.testing.assert_allclose(series.values, (raw - raw[:8640].mean(0)) / raw[:8640].std(0), atol=1e-5)
    assert not np.allclose(series.values[8640:14400].mean(0), 0, atol=0.05)  # fit on train rows only
    assert [len(_windows(cfg, s)) for s in ("train", "validation", "test")] == [8640 - 119, 2880 - 23, 2880 - 23]
    first = _windows(cfg, "test")[0]
    np.testing.assert_array_equal(first["x"].numpy(), series.values[11424:11520])
    np.testing.assert_array_equal(first["y"].numpy(), series.values[11520 - 48:11520 + 24])
    # timeF for hourly data: hour/23, weekday/6, (day-1)/30, (dayofyear-1)/365, each minus 0.5; 2016-07-01 00:00 is
    # a Friday
    np.testing.assert_allclose(series.stamps[0], [-0.5, 4 / 6 - 0.5, -0.5, 182 / 365 - 0.5], atol=1e-6)


def test_real_etth1_feature_modes(etth1: Path) -> None:
    single = prepare(DataConfig(path=str(etth1), features="S"))
    assert single.columns == ("OT",)
    ms = prepare(DataConfig(path=str(etth1), features="MS", target="HUFL"))
    assert ms.columns[-1] == "HUFL" and len(ms.columns) == 7  # the target moves last, as Dataset_Custom


def test_builtin_data_with_ett_split_matches_real_borders() -> None:
    series = prepare(DataConfig(split="ett_hour", seq_len=336, pred_len=720, label_len=336))
    assert series.borders == split_borders(17420, "ett_hour", 336)
    assert series.borders["test"] == (11520 - 336, 14400)
    assert split_borders(70000, "ett_minute", 96)["validation"] == (34560 - 96, 46080)
    assert split_borders(35064, "ratio", 720) == {"train": (0, 24544), "validation": (23824, 28052),
                                                 "test": (27332, 35064)}


def test_time_features_per_frequency() -> None:
    dates = pd.date_range("2016-07-01", periods=5, freq="15min")
    assert time_features(dates, "t").shape == (5, 5)
    assert time_features(dates, "15min").shape == (5, 5)
    assert time_features(dates, "h").shape == (5, 4)
    np.testing.assert_allclose(time_features(dates, "t")[1, 0], 15 / 59 - 0.5, rtol=1e-6)
    with pytest.raises(ConfigError, match="not a supported frequency"):
        time_features(dates, "fortnightly")


def _csv(tmp_path: Path, text: str) -> str:
    path = tmp_path / "series.csv"
    path.write_text(text)
    return str(path)


def _good_rows(n: int) -> str:
    dates = pd.date_range("2020-01-01", periods=n, freq="h").strftime("%Y-%m-%d %H:%M:%S")
    return "".join(f"{d},{i % 7},{i % 5}\n" for i, d in enumerate(dates))


def test_missing_target_column_is_refused(tmp_path: Path) -> None:
    path = _csv(tmp_path, "date,a,b\n" + _good_rows(300))
    for features in ("S", "MS", "M"):  # M too: the target orders the columns (Informer's Dataset_Custom needs it)
        with pytest.raises(DataError, match=r"no target column 'OT'.*columns: a, b.*data.target"):
            prepare(DataConfig(path=path, features=features, seq_len=24, label_len=12, pred_len=12))
    with pytest.raises(DataError, match=r"no target column 'b0' \(did you mean 'b'\?\)"):
        prepare(DataConfig(path=path, target="b0", seq_len=24, label_len=12, pred_len=12))


@pytest.mark.parametrize("swap, what, line", [(lambda r: r[:5] + [r[4]] + r[6:], "repeats", 7),
                                              (lambda r: r[:5] + [r[6], r[5]] + r[7:], "comes before", 8)])
def test_dates_must_increase(tmp_path: Path, swap, what: str, line: int) -> None:
    rows = swap(_good_rows(300).splitlines(keepends=True))
    path = _csv(tmp_path, "date,a,OT\n" + "".join(rows))
    with pytest.raises(DataError, match=rf"the date .* on line {line} {what} the one on line {line - 1}; dates"):
        prepare(DataConfig(path=path, seq_len=24, label_len=12, pred_len=12))


def test_a_constant_column_is_reported_and_its_mape_explained(tmp_path: Path, caplog) -> None:
    rows = [f"{(pd.Timestamp('2016-07-01') + pd.Timedelta(hours=h)).strftime('%Y-%m-%d %H:%M:%S')},{h},5"
            for h in range(300)]
    path = _csv(tmp_path, "date,a,OT\n" + "\n".join(rows) + "\n")
    with caplog.at_level("WARNING"):
        series = prepare(DataConfig(path=path, split="ratio", seq_len=24, label_len=12, pred_len=12))
    assert "OT" in caplog.text and "constant over the training rows" in caplog.text
    assert (series.values[:, -1] == 0).all()
    import torch

    from lavo_zoo.evaluators import build_evaluator
    ev = build_evaluator("forecast")
    ev.update(torch.ones(2, 3, 1), torch.from_numpy(series.values[:6, -1:].reshape(2, 3, 1)))
    assert ev.compute()["mape"] == float("inf") and "exactly 0" in ev.details()["note"]


def test_unparseable_dates_are_refused(tmp_path: Path) -> None:
    rows = _good_rows(300).splitlines(keepends=True)
    rows[5] = "not-a-date," + rows[5].split(",", 1)[1]
    path = _csv(tmp_path, "date,a,OT\n" + "".join(rows))
    with pytest.raises(DataError, match=r"'not-a-date' on line 7 is not a parseable date"):
        prepare(DataConfig(path=path, seq_len=24, label_len=12, pred_len=12))


def test_a_header_without_rows_and_mixed_time_zones_are_refused_naming_the_file(tmp_path: Path) -> None:
    from lavo_zoo.recipes.time_series.data import read_table

    with pytest.raises(DataError, match="series.csv has a header but no rows"):
        read_table(Path(_csv(tmp_path, "date,a,OT\n")))
    rows = _good_rows(30).splitlines(keepends=True)
    rows[0] = rows[0].replace(",", "+01:00,", 1)
    rows[1] = rows[1].replace(",", "+05:00,", 1)
    with pytest.raises(DataError, match="series.csv: the 'date' column mixes time zones"):
        read_table(Path(_csv(tmp_path, "date,a,OT\n" + "".join(rows))))


def test_dates_in_one_time_zone_are_read_as_such(tmp_path: Path, recwarn) -> None:
    from lavo_zoo.recipes.time_series.data import read_table

    rows = "".join(row.replace(",", "+02:00,", 1) for row in _good_rows(30).splitlines(keepends=True))
    table = read_table(Path(_csv(tmp_path, "date,a,OT\n" + rows)))
    assert str(table["date"].dt.tz) == "UTC+02:00" and len(table) == 30
    assert not [w for w in recwarn if "timezone" in str(w.message)]


def test_too_few_rows_for_one_window_is_refused(tmp_path: Path) -> None:
    path = _csv(tmp_path, "date,a,OT\n" + _good_rows(100))
    with pytest.raises(DataError, match=r"has 100 rows: its validation split .* too short for one window"):
        prepare(DataConfig(path=path, seq_len=24, label_len=12, pred_len=12))
    with pytest.raises(DataError, match="needs at least 14400 rows"):
        prepare(DataConfig(path=path, split="ett_hour", seq_len=24, label_len=12, pred_len=12))


def test_other_bad_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        prepare(DataConfig(path=str(tmp_path / "absent.csv")))
    with pytest.raises(DataError, match="no 'date' column"):
        prepare(DataConfig(path=_csv(tmp_path, "time,OT\n1,2\n")))
    rows = _good_rows(300).splitlines(keepends=True)
    rows[3] = rows[3].rsplit(",", 1)[0] + ",oops\n"
    with pytest.raises(DataError, match=r"column 'b' has a missing or non-numeric value 'oops' on line 5"):
        prepare(DataConfig(path=_csv(tmp_path, "date,a,b\n" + "".join(rows)), features="M", target="b"))
    with pytest.raises(ConfigError, match="label_len"):
        prepare(DataConfig(seq_len=12, label_len=24))


@pytest.mark.parametrize("cell", ["inf", "-inf", "1e999"])
def test_non_finite_values_are_refused_with_line_and_column(tmp_path: Path, cell: str) -> None:
    rows = [f"2016-07-01 {h:02d}:00:00,{h},{'X' if h == 4 else h * 2}" for h in range(24)]
    (tmp_path / "d.csv").write_text("date,a,b\n" + "\n".join(rows).replace("X", cell) + "\n")
    with pytest.raises(DataError, match=r"column 'b' has the non-finite value .* on line 6"):
        prepare(DataConfig(path=str(tmp_path / "d.csv"), target="b", seq_len=4, label_len=2, pred_len=2))


def test_a_directory_as_data_path_is_called_a_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="is a directory"):
        prepare(DataConfig(path=str(tmp_path)))
