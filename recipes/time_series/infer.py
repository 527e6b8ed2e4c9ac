"""Forecasting with a trained Informer: :class:`Forecaster`, what ``lavo_zoo.load`` returns for a ``time_series``
checkpoint. ``forecast`` continues a new series (a CSV or a DataFrame) in its own units, with the training scaler,
columns and time step stored in the checkpoint (``lavo-zoo forecast``); ``split_windows`` forecasts windows of a
split of the configured data (``lavo-zoo forecast-plot``)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from lavo_zoo.engine.predictor import Predictor
from lavo_zoo.errors import DataError, InputError, UsageError
from lavo_zoo.recipes.time_series.data import check_dates, numeric_values, read_table, time_features

Date = str | pd.Timestamp


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
            DataError: a training column is missing (or, for M / MS models, a column the model was not trained on
                is present), or the dates are not readable and increasing.
            InputError: ``data`` is neither a path nor a DataFrame.
        """
        if isinstance(data, (str, Path)):
            table, source = read_table(Path(data)), str(data)
        elif isinstance(data, pd.DataFrame):
            source = "the table"
            if "date" not in data.columns and isinstance(data.index, pd.DatetimeIndex):
                data = data.rename_axis("date").reset_index()
            table = check_dates(data, source)
        else:
            raise InputError(f"forecast needs a CSV path or a pandas DataFrame, got {type(data).__name__}")
        columns, _, _ = self._stats()
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
        stamp = pd.Timestamp(at)
        rows = np.flatnonzero(table["date"].to_numpy() == stamp.to_datetime64())
        if len(rows) == 0:
            first, last = table["date"].iloc[0], table["date"].iloc[-1]
            raise InputError(f"{source} has no row dated {stamp} (it runs from {first} to {last}); --at must be the "
                             "date of the last observed row")
        return int(rows[0])

    def _future_dates(self, history: pd.Series, source: str) -> pd.DatetimeIndex:
        """The ``pred_len`` dates after ``history``, at its regular frequency; refuses gaps and a step other than the
        training data's."""
        trained = pd.Timedelta(pd.tseries.frequencies.to_offset(self.cfg.model.step)) if self.cfg.model.step else None
        steps = pd.to_timedelta(np.diff(history.to_numpy()))  # [seq_len - 1]
        if len(steps) and (steps == steps[0]).all():
            offset = pd.tseries.frequencies.to_offset(steps[0])
        else:  # calendar steps (months, business days) vary in length; anything else is a gap
            inferred = pd.infer_freq(pd.DatetimeIndex(history)) if len(history) >= 3 else None
            if inferred is None:
                usual = trained if trained is not None else pd.Series(steps).mode().iloc[0]
                bad = int(np.flatnonzero(steps != usual)[0])
                raise DataError(f"{source}: the {len(history)} rows the forecast reads must be evenly spaced, but "
                                f"{history.iloc[bad + 1]} follows {history.iloc[bad]} ({steps[bad]} instead of "
                                f"{usual}); fill the gap (e.g. interpolate) or forecast from an earlier --at")
            offset = pd.tseries.frequencies.to_offset(inferred)
        if isinstance(offset, pd.offsets.Tick) and trained is not None and pd.Timedelta(offset) != trained:
            raise DataError(f"{source}: its rows are {pd.Timedelta(offset)} apart; the model was trained on steps of "
                            f"{trained} (resample the series to that step)")
        return pd.date_range(history.iloc[-1], periods=self.horizon + 1, freq=offset)[1:]

    @torch.no_grad()
    def forecast(self, data: pd.DataFrame | str | Path, at: Date | Sequence[Date] | None = None
                 ) -> pd.DataFrame | list[pd.DataFrame]:
        """Forecast the ``pred_len`` steps after a series, in the data's own units.

        Args:
            data: the series: a CSV path, or a DataFrame with a 'date' column or a DatetimeIndex, with the columns
                the model was trained on.
            at: the date of the last observed row (default: the last row), or a list of dates (one forecast each,
                computed as one batch).

        Returns:
            A DataFrame per forecast (a list of them for a list of dates): 'date' (continued at the data's
            frequency) and the forecast columns (every column for M / S models, the target for MS).

        Raises:
            DataError: the history is too short, unevenly spaced or at another step than the training data's, or
                the columns differ from the training data's.
            InputError: no row has the date ``at``.
            UsageError: the checkpoint was saved without its training columns and scaler.
        """
        source = str(data) if isinstance(data, (str, Path)) else "the table"
        table = self.read(data)
        columns, mean, std = self._stats()
        d = self.cfg.data
        values = numeric_values(table, columns, source)  # [N, C] in the data's units
        scaled = ((values - mean) / std).astype(np.float32)  # [N, C]
        origins = [self._origin_row(table, date, source) for date in (at if isinstance(at, (list, tuple)) else [at])]
        xs, x_marks, y_marks, futures = [], [], [], []
        for end in origins:  # the history is rows (end - seq_len, end]
            if end + 1 < d.seq_len:
                raise DataError(f"{source}: the forecast reads the {d.seq_len} rows up to {table['date'].iloc[end]}, "
                                f"but only {end + 1} rows reach that far (give a longer history, or a later --at)")
            history = table["date"].iloc[end + 1 - d.seq_len:end + 1]
            future = self._future_dates(history, source)
            stamps = time_features(pd.DatetimeIndex(history).append(future), d.freq)  # [seq_len + pred_len, F]
            xs.append(scaled[end + 1 - d.seq_len:end + 1])
            x_marks.append(stamps[:d.seq_len])
            y_marks.append(stamps[d.seq_len - d.label_len:])
            futures.append(future)
        x = torch.from_numpy(np.stack(xs)).to(self.device)  # [B, seq_len, C]
        x_mark = torch.from_numpy(np.stack(x_marks)).to(self.device)  # [B, seq_len, F]
        y_mark = torch.from_numpy(np.stack(y_marks)).to(self.device)  # [B, label_len + pred_len, F]
        out = self.model(x, x_mark, x[:, -d.label_len:], y_mark).float().cpu().numpy()  # [B, pred_len, c_out]
        c_out = out.shape[-1]
        names = columns[-c_out:]
        frames = [pd.DataFrame({"date": future, **{name: out[i, :, j] * std[-c_out + j] + mean[-c_out + j]
                                                   for j, name in enumerate(names)}})
                  for i, future in enumerate(futures)]
        return frames if isinstance(at, (list, tuple)) else frames[0]

    @torch.no_grad()
    def split_windows(self, split: str, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
        """Forecasts of windows of the configured data (``lavo-zoo forecast-plot``), standardised.

        Args:
            split: a split of the checkpoint's data (which must be where its config says).
            count: how many evenly spaced windows.

        Returns:
            (history [K, seq_len], truth [K, pred_len], forecast [K, pred_len], window indices) of the last forecast
            channel (the target for S / MS; the last column, the target when present, for M).
        """
        dataset = self.recipe.build_dataset(self.cfg, split)
        indices = np.linspace(0, len(dataset) - 1, num=max(1, count)).round().astype(int).tolist()
        batch = {k: v.to(self.device) for k, v in self.recipe.collate([dataset[i] for i in indices]).items()}
        forecast, truth = self.recipe.predict(self.model, batch)  # [K, pred_len, c_out]
        history = batch["x"][..., -1]  # [K, seq_len]
        return history.cpu().numpy(), truth[..., -1].cpu().numpy(), forecast[..., -1].cpu().numpy(), indices


def forecast_csv(frames: pd.DataFrame | list[pd.DataFrame]) -> str:
    """Forecast table(s) as CSV text in the input layout ('date' first, then the value columns)."""
    table = pd.concat(frames) if isinstance(frames, list) else frames
    table = table.assign(date=table["date"].dt.strftime("%Y-%m-%d %H:%M:%S"))
    return table.to_csv(index=False, float_format="%.9g")
