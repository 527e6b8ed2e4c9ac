"""Forecasting with a trained Informer: :class:`Forecaster`, what ``lavo_zoo.load`` returns for a ``time_series``
checkpoint. ``forecast`` continues a new series (a CSV or a DataFrame) in its own units, with the training scaler,
columns and time step stored in the checkpoint (``lavo-zoo forecast``); ``split_windows`` forecasts windows of a
split of the configured data (``lavo-zoo forecast-plot``)."""
from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from lavo_zoo import limits
from lavo_zoo.engine.predictor import Predictor, as_batch
from lavo_zoo.errors import DataError, InputError, UsageError
from lavo_zoo.formats.numeric import numeric_columns
from lavo_zoo.recipes.time_series.data import check_dates, infer_step, read_table, time_features

Date = str | pd.Timestamp | datetime.datetime | datetime.date | np.datetime64
DATE = "a date (a str, pandas Timestamp, datetime or numpy datetime64)"


def is_date(value: object) -> bool:
    """Whether ``value`` is one date as ``Forecaster.forecast(at=...)`` takes it."""
    return isinstance(value, (str, datetime.date, np.datetime64))


def _step_words(offset: pd.DateOffset) -> str:
    """A time step in words: a duration ("0 days 01:00:00") or a calendar step ("MS (MonthBegin)")."""
    if isinstance(offset, pd.offsets.Tick):
        return str(pd.Timedelta(offset))
    return f"{offset.freqstr} ({type(offset).__name__})"


class Forecaster(Predictor):
    """A trained forecaster: ``forecast`` the ``pred_len`` steps after the end of a series (or after given dates)."""

    @property
    def horizon(self) -> int:
        """Steps forecast per call (the checkpoint's ``data.pred_len``)."""
        return self.cfg.data.pred_len

    def _stats(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        m = self.cfg.model
        if not m.columns or not m.scaler_mean:
            raise UsageError(f"{self.checkpoint} was saved without its training columns and scaler (a checkpoint from "
                             "an older lavo-zoo); retrain it to forecast new data, or plot windows of its own data "
                             "with `lavo-zoo forecast-plot`")
        return list(m.columns), np.asarray(m.scaler_mean), np.asarray(m.scaler_std)

    def read(self, data: pd.DataFrame | str | Path) -> pd.DataFrame:
        """A series as the model reads it.

        Args:
            data: a CSV path, or a DataFrame with a 'date' column or a DatetimeIndex.

        Returns:
            The table with a parsed, checked 'date' column and string column names.

        Raises:
            DataError: the table has no rows, a training column is missing (or, for M / MS models, a column the
                model was not trained on is present), or the dates are not readable and increasing.
            InputError: ``data`` is neither a path nor a DataFrame.
        """
        if isinstance(data, (str, Path)):
            table, source = read_table(Path(data), "--csv / data"), str(data)
        elif isinstance(data, pd.DataFrame):
            source = "the table"
            if "date" not in data.columns and isinstance(data.index, pd.DatetimeIndex):
                data = data.rename_axis("date").reset_index()
            table = check_dates(data, source)
        else:
            raise InputError(f"forecast needs a CSV path or a pandas DataFrame, got {type(data).__name__}")
        columns, _, _ = self._stats()
        if len(table) == 0:
            raise DataError(f"{source} has no rows; give the series to continue (at least seq_len = "
                            f"{self.cfg.data.seq_len} rows)")
        present = [str(c) for c in table.columns if c != "date"]
        missing = [c for c in columns if c not in present]
        extra = [c for c in present if c not in columns] if self.cfg.data.features != "S" else []
        if missing or extra:
            differs = "; ".join(part for part in (missing and f"missing {', '.join(missing)}",
                                                  extra and f"not in the training data: {', '.join(extra)}") if part)
            raise DataError(f"{source} has other columns than the model was trained on ({differs}); it needs a "
                            f"'date' column and {', '.join(columns)}")
        return table.rename(columns=str)

    def _origin_row(self, table: pd.DataFrame, at: Date | None, source: str) -> int:
        """The row of the last observed step (the forecast starts after it)."""
        if at is None:
            return len(table) - 1
        try:
            stamp = pd.Timestamp(at)
        except (ValueError, TypeError, OverflowError):
            raise InputError(f"--at / at {at!r} is not a date; give the date of the last observed row, e.g. "
                             f"{table['date'].iloc[-1]}") from None
        if stamp is pd.NaT:
            raise InputError(f"--at / at {at!r} is not a date")
        aware = table["date"].dt.tz is not None
        if (stamp.tz is not None) != aware:
            raise InputError(f"--at / at {at!r} {'has a' if stamp.tz is not None else 'has no'} time zone but the "
                             f"dates of {source} {'have one' if aware else 'have none'}; give it as they are written "
                             f"(e.g. {table['date'].iloc[-1]})")
        rows = np.flatnonzero((table["date"] == stamp).to_numpy())  # as instants: time-zone-aware dates too
        if len(rows) == 0:
            first, last = table["date"].iloc[0], table["date"].iloc[-1]
            raise InputError(f"{source} has no row dated {stamp} (it runs from {first} to {last}); --at must be the "
                             "date of the last observed row")
        return int(rows[0])

    def trained_step(self) -> pd.DateOffset | None:
        """The time step of the training data (a pandas offset: a fixed duration, or a calendar step such as month
        starts or business days), or None where the checkpoint does not say."""
        step = self.cfg.model.step
        return pd.tseries.frequencies.to_offset(step) if step else None

    def _future_dates(self, history: pd.Series, source: str) -> pd.DatetimeIndex:
        """The ``pred_len`` dates after ``history``, at the training data's step (or, where the checkpoint does not
        say, the history's own); refuses gaps and any other step, a calendar one (months, business days) included:
        every row must follow the previous one by exactly the training step."""
        trained = self.trained_step()
        dates = pd.DatetimeIndex(history)
        if trained is not None:
            expected = pd.date_range(dates[0], periods=len(dates), freq=trained)
            if (expected == dates).all():
                return pd.date_range(dates[-1], periods=self.horizon + 1, freq=trained)[1:]
            self._refuse_step(dates, trained, source)
        steps = pd.to_timedelta(np.diff(history.to_numpy()))  # [seq_len - 1]
        if len(steps) and (steps == steps[0]).all():
            offset = pd.tseries.frequencies.to_offset(steps[0])
        else:
            offset = infer_step(dates)  # calendar steps (months, business days) vary in length
            if offset is None:
                self._refuse_step(dates, None, source)
        return pd.date_range(dates[-1], periods=self.horizon + 1, freq=offset)[1:]

    def _refuse_step(self, dates: pd.DatetimeIndex, trained: pd.DateOffset | None, source: str) -> None:
        """A :class:`DataError` saying how the history's dates differ from a regular series at the training step."""
        steps = pd.to_timedelta(np.diff(dates.to_numpy()))
        inferred = infer_step(dates)
        trained_words = _step_words(trained) if trained is not None else None
        if inferred is not None or (len(steps) and (steps == steps[0]).all()):  # regular, at another step
            offset = inferred or pd.tseries.frequencies.to_offset(steps[0])
            raise DataError(f"{source}: its rows are {_step_words(offset)} apart; the model was trained on steps of "
                            f"{trained_words} (resample the series to that step)")
        step = trained if trained is not None else pd.Series(steps).mode().iloc[0]  # the usual step
        for i in range(1, len(dates)):  # the first row that does not follow its predecessor by the usual step
            if dates[i] != dates[i - 1] + step:
                usual = trained_words or str(step)
                raise DataError(f"{source}: the {len(dates)} rows the forecast reads must be evenly spaced, but "
                                f"{dates[i]} follows {dates[i - 1]} ({steps[i - 1]} instead of {usual}); fill the "
                                "gap (e.g. interpolate) or forecast from an earlier --at")
        raise DataError(f"{source}: the rows the forecast reads are not at the training step {trained_words}")

    def memory_estimate(self, windows: int) -> int:
        """Estimated bytes of forecasting ``windows`` windows at once: per window the widest activations (the
        feed-forward layer's and the attention's projections) over the encoder's and the decoder's lengths."""
        m, d = self.cfg.model, self.cfg.data
        return windows * (d.seq_len + d.label_len + d.pred_len) * (m.ffn_dim + 4 * m.embed_dim) * 4

    @torch.no_grad()
    def forecast(self, data: pd.DataFrame | str | Path, at: Date | list[Date] | None = None, batch_size: int = 32
                 ) -> pd.DataFrame | list[pd.DataFrame]:
        """Forecast the ``pred_len`` steps after a series, in the data's own units.

        Args:
            data: the series: a CSV path, or a DataFrame with a 'date' column or a DatetimeIndex, with the columns
                the model was trained on, at the training data's time step.
            at: the date of the last observed row (default: the last row): a str, a pandas Timestamp, a datetime
                or a numpy datetime64; or a list of them (one forecast each).
            batch_size: forecasts computed at once (for a list of dates).

        Returns:
            A DataFrame per forecast (a list of them for a list of dates): 'date' (continued at the training
            data's step) and the forecast columns (every column for M / S models, the target for MS).

        Raises:
            DataError: the series has no rows, the history is too short, unevenly spaced or at another step than
                the training data's (a calendar step such as months or business days included), the columns
                differ from the training data's, or a value is too large for the model.
            InputError: ``at`` is not a date or a list of them, no row has the date ``at``, ``batch_size`` is
                outside its range, or the forecast is not finite.
            UsageError: the checkpoint was saved without its training columns and scaler.
        """
        dates, single = ([None], True) if at is None else as_batch(at, is_date, "at", DATE)
        batch_size = limits.BATCH_SIZE.check(batch_size)
        source = str(data) if isinstance(data, (str, Path)) else "the table"
        table = self.read(data)
        columns, mean, std = self._stats()
        d = self.cfg.data
        values = numeric_columns(table, columns, source)  # [N, C] in the data's units
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = ((values - mean) / std).astype(np.float32)  # [N, C]
        if not np.isfinite(scaled).all():
            row, col = map(int, np.argwhere(~np.isfinite(scaled))[0])
            raise DataError(f"{source}: column '{columns[col]}' has the value {values[row, col]:.6g} on line "
                            f"{row + 2}, too large for the model (the training data's values of that column are "
                            f"about {mean[col]:.4g} +- {std[col]:.4g})")
        ranges = [f"about {m:.4g} +- {sd:.4g}" for m, sd in zip(mean, std)]  # the training data's, per column
        self.warn_far_outside(values, mean, std, source, ranges, columns)
        origins = [self._origin_row(table, date, source) for date in dates]
        if origins:
            self.check_fits(self.memory_estimate(min(batch_size, len(origins))),
                            f"forecasting batches of {min(batch_size, len(origins))} windows", "lower batch_size")
        windows = []
        for end in origins:  # the history is rows (end - seq_len, end]
            if end + 1 < d.seq_len:
                raise DataError(f"{source}: the forecast reads the {d.seq_len} rows up to {table['date'].iloc[end]}, "
                                f"but only {end + 1} rows reach that far (give a longer history, or a later --at)")
            history = table["date"].iloc[end + 1 - d.seq_len:end + 1]
            future = self._future_dates(history, source)
            stamps = time_features(pd.DatetimeIndex(history).append(future), d.freq)  # [seq_len + pred_len, F]
            windows.append((scaled[end + 1 - d.seq_len:end + 1], stamps, future))
        c_out = self.cfg.model.out_channels or len(columns)
        names = columns[-c_out:]
        frames = []
        for start in range(0, len(windows), batch_size):
            chunk = windows[start:start + batch_size]
            x = torch.from_numpy(np.stack([w[0] for w in chunk])).to(self.device)  # [B, seq_len, C]
            x_mark = torch.from_numpy(np.stack([w[1][:d.seq_len] for w in chunk])).to(self.device)  # [B, seq_len, F]
            y_mark = torch.from_numpy(np.stack([w[1][d.seq_len - d.label_len:] for w in chunk])
                                      ).to(self.device)  # [B, label_len + pred_len, F]
            out = self.model(x, x_mark, x[:, -d.label_len:], y_mark).float().cpu().numpy()  # [B, pred_len, c_out]
            for i, (_, _, future) in enumerate(chunk):
                forecast = out[i] * std[-c_out:] + mean[-c_out:]  # [pred_len, c_out] in the data's units
                origin = table["date"].iloc[origins[start + i]]
                self.check_finite(forecast, f"{source} after {origin} (values far outside the training data's: "
                                            + "; ".join(f"{c} {r}" for c, r in zip(columns, ranges)) + ")")
                frames.append(pd.DataFrame({"date": future, **{name: forecast[:, j] for j, name in enumerate(names)}}))
        return frames[0] if single else frames

    @torch.no_grad()
    def split_windows(self, split: str, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
        """Forecasts of windows of the configured data (``lavo-zoo forecast-plot``), standardised.

        Args:
            split: a split of the checkpoint's data (which must be where its config says).
            count: how many evenly spaced windows (``limits.WINDOWS``: at most 100).

        Returns:
            (history [K, seq_len], truth [K, pred_len], forecast [K, pred_len], window indices) of the last forecast
            channel (the target for S / MS; the last column, the target when present, for M).
        """
        count = limits.WINDOWS.check(count)
        dataset = self.recipe.build_dataset(self.cfg, split)
        indices = np.linspace(0, len(dataset) - 1, num=max(1, count)).round().astype(int).tolist()
        batch = {k: v.to(self.device) for k, v in self.recipe.collate([dataset[i] for i in indices]).items()}
        forecast, truth = self.recipe.predict(self.model, batch)  # [K, pred_len, c_out]
        history = batch["x"][..., -1]  # [K, seq_len]
        return history.cpu().numpy(), truth[..., -1].cpu().numpy(), forecast[..., -1].cpu().numpy(), indices


def forecast_csv(frames: pd.DataFrame | list[pd.DataFrame]) -> str:
    """Forecast table(s) as CSV text in the input layout ('date' first, with its UTC offset where the dates have a
    time zone, then the value columns)."""
    table = pd.concat(frames) if isinstance(frames, list) else frames
    table = table.assign(date=table["date"].dt.strftime("%Y-%m-%d %H:%M:%S%z"))
    return table.to_csv(index=False, float_format="%.9g")
