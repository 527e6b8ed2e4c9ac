"""Forecasts of new data (``lavo_zoo.load`` -> Forecaster, ``lavo-zoo forecast``): the same numbers as the recipe's
own prediction of a window, in the data's units, from the checkpoint alone; and what is refused."""
import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import lavo_zoo
from lavo_zoo.errors import DataError, InputError, UsageError
from lavo_zoo.recipes.time_series.cli import forecast
from lavo_zoo.recipes.time_series.data import read_table
from tests.helpers import run_command


@pytest.fixture(scope="module")
def forecaster(trained: Path):
    return lavo_zoo.load(trained, device="cpu")


@pytest.fixture(scope="module")
def table(forecaster) -> pd.DataFrame:
    """The series the model was trained on, as a user would read it from the CSV."""
    return read_table(forecaster.recipe.data_path(forecaster.cfg.data))


def test_forecast_is_the_recipes_prediction_in_the_datas_units(forecaster, table: pd.DataFrame) -> None:
    recipe, cfg = forecaster.recipe, forecaster.cfg
    dataset = recipe.build_dataset(cfg, "test")
    start = recipe.series(cfg.data).borders["test"][0]
    indices = [0, 7, len(dataset) - 1]
    expected, _ = recipe.predict(forecaster.model, recipe.collate([dataset[i] for i in indices]))  # standardised
    origins = [table["date"].iloc[start + i + cfg.data.seq_len - 1] for i in indices]  # last row each window reads
    frames = forecaster.forecast(table, at=origins)
    mean, std = np.asarray(cfg.model.scaler_mean), np.asarray(cfg.model.scaler_std)
    for frame, want, origin in zip(frames, expected.detach().numpy(), origins):
        assert list(frame.columns) == ["date", *cfg.model.columns]
        np.testing.assert_allclose(frame[cfg.model.columns].to_numpy(), want * std + mean, rtol=1e-5, atol=1e-5)
        assert list(frame["date"]) == list(pd.date_range(origin, periods=cfg.data.pred_len + 1, freq="h")[1:])
    # one origin at a time gives the same forecast as the batch
    pd.testing.assert_frame_equal(forecaster.forecast(table, at=origins[1]), frames[1], atol=1e-5, rtol=1e-5)


def test_forecast_after_the_last_row_from_a_csv_or_an_indexed_frame(forecaster, table, tmp_path: Path) -> None:
    csv = tmp_path / "series.csv"
    table.tail(100).assign(date=table["date"].dt.strftime("%Y-%m-%d %H:%M")).to_csv(csv, index=False)
    from_csv = forecaster.forecast(csv)
    assert from_csv["date"].iloc[0] == table["date"].iloc[-1] + pd.Timedelta(hours=1)
    from_index = forecaster.forecast(table.set_index("date"))
    pd.testing.assert_frame_equal(from_csv, from_index, atol=1e-4, rtol=1e-4)


def test_forecast_needs_no_training_data(trained: Path, table: pd.DataFrame, tmp_path: Path) -> None:
    """Scaler and columns live in the checkpoint: the forecast of a CSV elsewhere is unchanged when the training
    table is gone and the checkpoint's data settings point nowhere."""
    expected = lavo_zoo.load(trained, device="cpu").forecast(table)
    alone = lavo_zoo.load(trained, device="cpu", overrides=["data.path=" + str(tmp_path / "gone.csv")])
    pd.testing.assert_frame_equal(alone.forecast(table), expected)


def test_cli_forecast_writes_a_csv_in_the_datas_layout(trained: Path, forecaster, table, tmp_path: Path) -> None:
    csv, out = tmp_path / "series.csv", tmp_path / "forecast.csv"
    table.tail(60).to_csv(csv, index=False)
    at = str(table["date"].iloc[-5])
    code, output = run_command(forecast, [str(trained), "--csv", str(csv), "--at", at, "--out", str(out)])
    assert code == 0 and "wrote" in output, output
    written = pd.read_csv(out, parse_dates=["date"])
    pd.testing.assert_frame_equal(written, forecaster.forecast(table, at=at), atol=1e-5, rtol=1e-5,
                                  check_dtype=False)
    code, output = run_command(forecast, [str(trained), "--csv", str(csv), "--out", str(out)])
    assert code != 0 and "already exists" in output  # nothing replaced without --overwrite
    code, output = run_command(forecast, [str(trained), "--csv", str(tmp_path / "none.csv")])
    assert code == 2 and "none.csv" in output


def test_refusals_name_what_differs(forecaster, table: pd.DataFrame) -> None:
    recent = table.tail(100).reset_index(drop=True)
    with pytest.raises(DataError, match="missing OT"):
        forecaster.forecast(recent.drop(columns="OT"))
    with pytest.raises(DataError, match="not in the training data: extra"):
        forecaster.forecast(recent.assign(extra=1.0))
    seq_len = forecaster.cfg.data.seq_len
    with pytest.raises(DataError, match=f"the {seq_len} rows .* only {seq_len - 1} rows"):
        forecaster.forecast(recent.tail(seq_len - 1))
    gap = recent.drop(index=80)
    with pytest.raises(DataError, match="evenly spaced.*2 days|evenly spaced.*0 days 02:00:00 instead of 0 days 01"):
        forecaster.forecast(gap)
    assert len(forecaster.forecast(gap, at=recent["date"].iloc[79])) == forecaster.horizon  # before the gap: fine
    coarse = recent.iloc[::2]
    with pytest.raises(DataError, match="2 hours apart|0 days 02:00:00 apart"):
        forecaster.forecast(coarse)
    with pytest.raises(InputError, match="no row dated 1999-01-01"):
        forecaster.forecast(recent, at="1999-01-01")
    with pytest.raises(DataError, match="line 52"):  # row 50 of the table is line 52 of its CSV
        forecaster.forecast(recent.assign(OT=recent["OT"].where(recent.index != 50, np.nan)))


def test_at_finds_the_rows_of_a_time_zone_aware_table(forecaster, table, tmp_path) -> None:
    """Dates written with an offset (+02:00): --at given in that offset, or the same instant in another, finds its
    row, and the forecast is that of the same table without the offset."""
    recent = table.tail(120).reset_index(drop=True)
    aware = recent.assign(date=recent["date"].dt.tz_localize("+02:00"))
    csv = tmp_path / "aware.csv"
    aware.to_csv(csv, index=False)
    origin = recent["date"].iloc[100]
    naive = forecaster.forecast(recent, at=origin)
    for at in (f"{origin}+02:00", (pd.Timestamp(origin) - pd.Timedelta(hours=2)).isoformat() + "+00:00"):
        got = forecaster.forecast(csv, at=at)
        np.testing.assert_allclose(got.drop(columns="date").to_numpy(), naive.drop(columns="date").to_numpy(),
                                   rtol=1e-5, atol=1e-5)
        assert (got["date"].dt.tz_localize(None) == naive["date"]).all()


def test_a_series_far_outside_the_training_range_is_warned_about_with_that_range(forecaster, table, caplog) -> None:
    """A 1e6-scaled series is forecast with a warning naming the column and its training range (mean +- std, as the
    refusal of a non-finite forecast names it); the series as trained gets none."""
    recent = table.tail(100)
    with caplog.at_level("WARNING"):
        forecaster.forecast(recent)
    assert not caplog.records
    columns, mean, std = forecaster._stats()
    scaled = recent.assign(**{c: recent[c] * 1e6 for c in columns})
    with caplog.at_level("WARNING"):
        forecaster.forecast(scaled)
    (record,) = caplog.records
    assert "far outside the range the model was trained on (about " in record.getMessage()
    column = record.args[0].split("'")[1]
    assert f"about {mean[columns.index(column)]:.4g} +- {std[columns.index(column)]:.4g}" in record.getMessage()


def test_a_checkpoint_without_the_training_scaler_is_refused(forecaster, table) -> None:
    model_cfg = dataclasses.replace(forecaster.cfg.model, columns=[], scaler_mean=[], scaler_std=[])
    old = type(forecaster)(forecaster.recipe, dataclasses.replace(forecaster.cfg, model=model_cfg),
                           forecaster.model, checkpoint="old")
    with pytest.raises(UsageError, match="retrain"):
        old.forecast(table)


@pytest.mark.parametrize("freq", ["MS", "ME", "B", "W", "D", "2h"])
def test_an_hourly_model_refuses_a_series_at_another_step_calendar_steps_included(forecaster, table, freq) -> None:
    """Month starts, month ends and business days are not fixed durations: they are compared as pandas offsets,
    so an hourly model never forecasts months."""
    recent = table.tail(100).reset_index(drop=True)
    other = recent.assign(date=pd.date_range("2020-01-01", periods=len(recent), freq=freq))
    with pytest.raises(DataError, match="apart; the model was trained on steps of 0 days 01:00:00"):
        forecaster.forecast(other)


def _calendar_forecaster(tmp_path: Path, freq: str):
    """A Forecaster (random weights) of the tiny config whose training CSV is at the calendar step ``freq``."""
    from lavo_zoo.engine.configs import resolve_config
    from lavo_zoo.recipes.time_series.infer import Forecaster

    rng = np.random.default_rng(0)
    dates = pd.date_range("1990-01-01", periods=400, freq=freq)
    series = pd.DataFrame({"date": dates, "load": rng.normal(10, 2, len(dates)), "OT": rng.normal(5, 1, len(dates))})
    series.to_csv(tmp_path / "calendar.csv", index=False)
    recipe, cfg = resolve_config("time_series/tiny-lavo", [f"data.path={tmp_path / 'calendar.csv'}"])
    cfg = recipe.resolve(cfg)
    return Forecaster(recipe, cfg, recipe.build_model(cfg).eval(), "cpu", checkpoint="calendar"), series


@pytest.mark.parametrize("freq,offset", [("MS", pd.offsets.MonthBegin()), ("B", pd.offsets.BusinessDay())])
def test_a_model_trained_on_a_calendar_step_forecasts_at_that_step_and_refuses_others(tmp_path, freq,
                                                                                      offset) -> None:
    forecaster, series = _calendar_forecaster(tmp_path, freq)
    assert pd.tseries.frequencies.to_offset(forecaster.cfg.model.step) == offset
    frame = forecaster.forecast(series)
    want = pd.date_range(series["date"].iloc[-1], periods=forecaster.horizon + 1, freq=offset)[1:]
    assert list(frame["date"]) == list(want) and np.isfinite(frame[["load", "OT"]].to_numpy()).all()
    hourly = series.assign(date=pd.date_range("2020-01-01", periods=len(series), freq="h"))
    with pytest.raises(DataError, match=f"0 days 01:00:00 apart; the model was trained on steps of {freq} "):
        forecaster.forecast(hourly)
    gap = series.drop(index=len(series) - 5).reset_index(drop=True)  # one step missing near the end
    with pytest.raises(DataError, match="evenly spaced"):
        forecaster.forecast(gap)


def test_a_value_too_large_for_the_model_and_a_forecast_that_is_not_finite_are_refused(trained, forecaster, table,
                                                                                         tmp_path) -> None:
    recent = table.tail(100).reset_index(drop=True)
    with pytest.raises(DataError, match="column 'OT' has the value 1e\\+39 on line 101, too large for the model"):
        forecaster.forecast(recent.assign(OT=recent["OT"].where(recent.index != 99, 1e39)))
    huge = recent.assign(OT=recent["OT"] * 1e30)  # finite in float32 after scaling, but the model overflows
    with pytest.raises(InputError, match="output for the table after .* is not finite"):
        forecaster.forecast(huge)
    huge.to_csv(tmp_path / "huge.csv", index=False)
    code, output = run_command(forecast, [str(trained), "--csv", str(tmp_path / "huge.csv"), "--out",
                                          str(tmp_path / "out.csv")])
    assert code == 2 and "huge.csv after" in output and not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize("at,message", [
    ((pd.Timestamp("2020-01-01"),), "got tuple of 1; give a list"),
    (5, "got int"),
    ("not a date", "'not a date' is not a date"),
    (pd.Timestamp("2016-09-22 07:00", tz="UTC"), "has a time zone but the dates of the table have none"),
])
def test_at_takes_a_date_or_a_list_of_dates(forecaster, table, at, message) -> None:
    with pytest.raises(InputError, match=message):
        forecaster.forecast(table.tail(100), at=at)
    assert forecaster.forecast(table.tail(100), at=[]) == []
    with pytest.raises(InputError, match="batch_size must be an integer from 1 to 4096"):
        forecaster.forecast(table.tail(100), batch_size=0)


def test_windows_are_forecast_in_batches_as_each_alone(forecaster, table) -> None:
    recent = table.tail(100).reset_index(drop=True)
    origins = list(recent["date"].iloc[[50, 60, 99]])
    batched = forecaster.forecast(recent, at=origins, batch_size=2)
    for origin, frame in zip(origins, batched):
        pd.testing.assert_frame_equal(frame, forecaster.forecast(recent, at=origin), atol=1e-5, rtol=1e-5)


def test_dates_in_several_time_zones_are_refused_naming_the_line(forecaster, table, tmp_path) -> None:
    recent = table.tail(60).reset_index(drop=True)
    text = recent.assign(date=recent["date"].dt.strftime("%Y-%m-%d %H:%M:%S+01:00"))
    text.loc[40, "date"] = text.loc[40, "date"].replace("+01:00", "+02:00")
    text.to_csv(tmp_path / "zones.csv", index=False)
    with pytest.raises(DataError, match="several time zones .* line 42"):
        forecaster.forecast(tmp_path / "zones.csv")


def test_the_forecast_csv_keeps_the_time_zone_of_the_dates(forecaster, table) -> None:
    """A forecast of a series in a time zone is written with the zone's offset, so that it reads back (and is scored
    against the truth by date) as the same instants."""
    import io

    from lavo_zoo.recipes.time_series.infer import forecast_csv

    recent = table.tail(60).reset_index(drop=True)
    for zone in (None, "Asia/Tokyo"):
        series = recent if zone is None else recent.assign(date=recent["date"].dt.tz_localize(zone))
        frame = forecaster.forecast(series)
        written = pd.read_csv(io.StringIO(forecast_csv(frame)), parse_dates=["date"])
        assert list(written["date"]) == list(frame["date"]), zone
