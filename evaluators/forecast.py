"""Forecast metrics as Informer's ``utils/metrics.py``: MSE, MAE, RMSE, MAPE, MSPE over every window x horizon step x
channel (on standardised values when the recipe feeds them standardised)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from lavo_zoo.errors import DataError, UsageError
from lavo_zoo.evaluators import register_evaluator
from lavo_zoo.evaluators.base import Evaluator, check_finite, input_path
from lavo_zoo.formats.numeric import NPY_MAGIC, is_real, numeric_columns, read_npy
from lavo_zoo.formats.text import read_bytes


@dataclass
class ForecastFile:
    """One ``--pred`` or ``--ref`` file of ``score forecast``: its values [N, ...] (float64), and for a CSV the
    names of its value columns and its dates (None for a .npy or a CSV without a 'date' column)."""

    path: Path
    values: Any
    columns: list[str] | None = None
    dates: Any = None  # pandas DatetimeIndex [N]


def _default_names(header: list[str]) -> bool:
    """Whether a header is pandas' default column names (0, 1, ...), as ``DataFrame(array).to_csv`` writes."""
    return header == [str(i) for i in range(len(header))]


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def read_forecast_file(path: Path, option: str = "--pred") -> ForecastFile:
    """A .npy array (numbers, at least one value) or a CSV with a header line of column names, numeric value
    columns and an optional 'date' column; anything else is refused naming the file (and the line): another file
    type, a CSV without a header (``numpy.savetxt``'s layout), an unnamed column (an index written by pandas), a
    repeated column name, a missing, non-numeric or non-finite value, an unreadable date."""
    path = input_path(path, option)
    raw = read_bytes(path)  # once: a path may be a pipe; the format is told by content, not by the name
    if raw.startswith(NPY_MAGIC):
        return _read_npy(path, option, raw)
    return _read_csv(path, option, raw)


def _read_npy(path: Path, option: str, raw: bytes) -> ForecastFile:
    """A forecast .npy array (``raw``, the file's bytes): real numbers [N, ...], at least one."""
    import numpy as np

    array = read_npy(path, option, raw)
    if not is_real(array):
        raise DataError(f"{option} {path} holds {array.dtype} values; forecasts and truths are real numbers")
    if array.ndim == 0 or array.size == 0:
        held = "a single number (a 0-d array)" if array.ndim == 0 else f"no values (shape {list(array.shape)})"
        raise DataError(f"{option} {path} holds {held}; give an array [N, ...] with one row per sample")
    array = array.astype(np.float64)
    check_finite(array.reshape(len(array), -1), path, "sample")
    return ForecastFile(path, array)


def _read_csv(path: Path, option: str, raw: bytes) -> ForecastFile:
    """A forecast CSV (``raw``, the file's bytes): a header line of names, numeric value columns, an optional 'date'
    column."""
    import io

    import pandas as pd

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{option} {path} is neither a .npy array nor a UTF-8 CSV table (score forecast reads those: "
                        "a CSV needs a header line of column names and commas between values)") from None
    header = _header(text, path, option)
    try:
        table = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except pd.errors.ParserError as e:
        raise DataError(f"{option} {path} is not a readable CSV file: {e}") from None
    table.columns = header
    if len(table) == 0:
        raise DataError(f"{option} {path} has a header but no rows")
    date_columns = [c for c in header if c.lower() == "date"]
    dates = _dates(table.pop(date_columns[0]), path, option) if date_columns else None
    if table.shape[1] == 0:
        raise DataError(f"{option} {path} has no value columns besides its dates")
    columns = list(table.columns)
    return ForecastFile(path, numeric_columns(table, columns, f"{option} {path}"), columns, dates)


def _header(text: str, path: Path, option: str) -> list[str]:
    """The column names of a CSV's first line; refused: none, numbers (no header), an unnamed or repeated one, and a
    file named other than .csv whose first line is no table's."""
    import csv
    import io

    first = next(csv.reader(io.StringIO(text)), None)
    if path.suffix not in (".csv", "") and path.is_file() and (not first or len(first) < 2):  # not a table
        raise UsageError(f"{option} {path}: score forecast reads .npy arrays and .csv tables, not {path.suffix} "
                         "files (a CSV needs a header line of column names and commas between values)")
    if not first:
        raise DataError(f"{option} {path} is empty; a CSV needs a header line of column names and one row per step")
    header = [name.strip() for name in first]
    if all(_is_number(name) for name in header) and not _default_names(header):
        raise DataError(f"{option} {path}: the first line holds numbers ({','.join(first)[:40]}), not column names; "
                        "write a header line (numpy.savetxt(..., header='a,b', comments=''), or pandas' to_csv), "
                        "or save a .npy array")
    unnamed = [i for i, name in enumerate(header) if not name]
    if unnamed:
        raise DataError(f"{option} {path}: column {unnamed[0] + 1} has no name (an index written by pandas' "
                        "to_csv? write it with index=False); name every column")
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise DataError(f"{option} {path}: the column name '{repeated[0]}' appears more than once; name each column "
                        "once")
    return header


def _dates(raw: Any, path: Path, option: str) -> Any:
    """A CSV's 'date' column as a pandas DatetimeIndex; an unreadable date is refused naming its line."""
    import numpy as np
    import pandas as pd

    try:
        dates = pd.DatetimeIndex(pd.to_datetime(raw, errors="coerce"))
    except ValueError:
        raise DataError(f"{option} {path}: its dates are in several time zones; write every date in one time "
                        "zone, or all in UTC") from None
    if dates.isna().any():
        row = int(np.flatnonzero(dates.isna())[0])
        raise DataError(f"{option} {path}: the date {raw.iloc[row]!r} on line {row + 2} is not a date")
    return dates


def align(pred: ForecastFile, ref: ForecastFile) -> tuple[Any, Any, dict[str, Any]]:
    """(forecast, truth, how they were paired): two CSVs are paired by column name (the truth's columns that the
    forecast names, in its order) and, where both have dates, by date (the truth's row of each forecast date); any
    other pair of files row by row, the same shape. Refuses a forecast column or date the truth does not have."""
    import numpy as np

    how: dict[str, Any] = {}
    forecast, truth = pred.values, ref.values
    if pred.columns is not None and ref.columns is not None:
        missing = [c for c in pred.columns if c not in ref.columns]
        if missing:
            raise DataError(f"--pred {pred.path} has the column(s) {', '.join(missing)} that --ref {ref.path} has not "
                            f"(its columns: {', '.join(ref.columns)}); columns are paired by name")
        truth = truth[:, [ref.columns.index(c) for c in pred.columns]]
        how["columns"] = list(pred.columns)
        if pred.dates is not None and ref.dates is not None:
            truth = truth[_rows_by_date(pred, ref)]
            how["paired_by"] = "date"
    if "paired_by" not in how:
        how["paired_by"] = "row"
        if forecast.shape != truth.shape:
            raise DataError(f"--pred {pred.path} has shape {list(forecast.shape)} but --ref {ref.path} has "
                            f"{list(truth.shape)}; they must match (rows are paired in order)")
    return np.asarray(forecast), np.asarray(truth), how


def _rows_by_date(pred: ForecastFile, ref: ForecastFile) -> Any:
    """The truth's row of each forecast date."""
    import numpy as np

    if (pred.dates.tz is None) != (ref.dates.tz is None):
        raise DataError(f"the dates of --pred {pred.path} and --ref {ref.path} differ in having a time zone; write "
                        "both with or both without")
    if len(pred.dates) == len(ref.dates) and (pred.dates == ref.dates).all():
        return np.arange(len(ref.dates))
    if ref.dates.has_duplicates:
        repeated = ref.dates[ref.dates.duplicated()][0]
        raise DataError(f"--ref {ref.path} has the date {repeated} more than once, and its dates are not those of "
                        f"--pred {pred.path} row by row; give a truth with one row per date")
    rows = ref.dates.get_indexer(pred.dates)
    if (rows < 0).any():
        first = int(np.flatnonzero(rows < 0)[0])
        raise DataError(f"--pred {pred.path}: the date {pred.dates[first]} on line {first + 2} is not in --ref "
                        f"{ref.path} (it runs from {ref.dates.min()} to {ref.dates.max()}); forecasts are paired "
                        "with the truth by date")
    return rows


@register_evaluator("forecast")
class ForecastEvaluator(Evaluator):
    """MSE, MAE, RMSE, MAPE, MSPE of forecasts ``[N, horizon, C]`` against truth; ``num_samples`` counts windows.

    MAPE and MSPE divide by the truth as Informer does (a truth of exactly 0 makes them inf or NaN).
    """

    higher_is_better: ClassVar[dict[str, bool]] = {"mse": False, "mae": False, "rmse": False, "mape": False,
                                                   "mspe": False}
    files = ("--pred: forecasts, a .npy array (any shape, e.g. [N, horizon, C]; the first dimension counts the "
             "samples) or a .csv with a header line (rows x named series, an optional 'date' column, as `lavo-zoo "
             "forecast` writes); --ref: the truth, a .npy of the same shape or a .csv (two CSVs are paired by "
             "column name and, where both have dates, by date; any other pair row by row)")

    @classmethod
    def from_files(cls, pred: Path, ref: Path | None) -> ForecastEvaluator:
        if ref is None:
            raise UsageError("score forecast needs --ref, the true values")
        forecast, truth, how = align(read_forecast_file(pred, "--pred"), read_forecast_file(ref, "--ref"))
        evaluator = cls()
        evaluator.update(torch.tensor(forecast), torch.tensor(truth))
        evaluator.pairing = how
        return evaluator

    def reset(self) -> None:
        self.num_samples = 0
        self.pairing: dict[str, Any] = {}  # how score forecast paired the files (columns, by row or by date)
        self.count = 0
        self.zero_truth = 0  # true values of exactly 0: MAPE / MSPE are infinite or NaN there, as Informer's
        self.sums = dict.fromkeys(("se", "ae", "ape", "spe"), 0.0)

    def update(self, predictions: torch.Tensor, targets: torch.Tensor) -> None:
        if predictions.shape != targets.shape:
            raise ValueError(f"forecast shape {list(predictions.shape)} != target shape {list(targets.shape)}")
        true = targets.detach().double()
        err = predictions.detach().double() - true
        pct = err / true  # Informer's MAPE/MSPE divide by the truth itself
        self.sums["se"] += float(err.square().sum())
        self.sums["ae"] += float(err.abs().sum())
        self.sums["ape"] += float(pct.abs().sum())
        self.sums["spe"] += float(pct.square().sum())
        self.count += err.numel()
        self.zero_truth += int((true == 0).sum())
        self.num_samples += err.shape[0]

    def details(self) -> dict[str, Any]:
        """How ``score forecast`` paired its files, and why MAPE / MSPE are not finite, when they are not."""
        if not self.zero_truth:
            return dict(self.pairing)
        return {**self.pairing, "zero_truth_values": self.zero_truth,
                "note": f"{self.zero_truth} of {self.count} true values are exactly 0 (e.g. a column that is constant "
                        "over the training rows standardises to 0); MAPE and MSPE divide by the truth, as Informer's "
                        "metrics do, so they are infinite or NaN: read MSE and MAE"}

    def compute(self) -> dict[str, float]:
        if self.count == 0:
            raise ValueError("ForecastEvaluator.compute() called before any update()")
        mse = self.sums["se"] / self.count
        return {"mse": mse, "mae": self.sums["ae"] / self.count, "rmse": math.sqrt(mse),
                "mape": self.sums["ape"] / self.count, "mspe": self.sums["spe"] / self.count}
