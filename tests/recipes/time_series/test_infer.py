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


def test_a_checkpoint_without_the_training_scaler_is_refused(forecaster, table) -> None:
    model_cfg = dataclasses.replace(forecaster.cfg.model, columns=[], scaler_mean=[], scaler_std=[])
    old = type(forecaster)(forecaster.recipe, dataclasses.replace(forecaster.cfg, model=model_cfg),
                           forecaster.model, checkpoint="old")
    with pytest.raises(UsageError, match="retrain"):
        old.forecast(table)
