"""Forecasting data as Informer's ``data/data_loader.py``: ETT (hourly / 15-minute), Weather and custom CSVs with a
``date`` column, feature modes M / S / MS, Informer's split borders, a standard scaler fit on the training rows only,
and ``timeF`` time features. Without ``data.path`` a built-in table in the ETT column layout is generated
(:mod:`.builtin`).

Splits (``border1s`` / ``border2s`` exactly as the reference; validation and test start ``seq_len`` rows early so
that their first window's input reaches back into the previous split):
- ``ett_hour``: 12 / 4 / 4 months of 30 days (8640 / 2880 / 2880 rows); ``ett_minute``: the same x4.
- ``ratio``: 70% / 10% / 20% of the rows (Informer's ``Dataset_Custom``: Weather and any other CSV).
- ``auto``: ``ett_hour`` for files named ETTh*, ``ett_minute`` for ETTm*, ``ratio`` otherwise (built-in data too).
"""
from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pandas as pd
import torch
from torch.utils.data import Dataset

from lavo_zoo.config import NonNegativeInt, PositiveInt, Range
from lavo_zoo.engine.recipe import SPLITS
from lavo_zoo.errors import ConfigError, DataError, did_you_mean
from lavo_zoo.formats.numeric import numeric_columns

log = logging.getLogger(__name__)
ETT_COLUMNS = ("HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT")


@dataclass
class DataConfig:
    """Where the series comes from and how windows are cut (Informer's data arguments)."""

    path: str | None = None  # CSV with a 'date' column; None = the built-in generated ETT-like table
    split: Literal["auto", "ett_hour", "ett_minute", "ratio"] = "auto"
    features: Literal["M", "S", "MS"] = "M"  # M: all -> all, S: target -> target, MS: all -> target
    target: str = "OT"
    freq: str = "h"  # timeF granularity: s, t (minutes), h, d, b, w, m, optionally with a multiple (15min, 3h)
    seq_len: PositiveInt = 96  # encoder input length
    label_len: PositiveInt = 48  # decoder start-token length (the last label_len input steps)
    pred_len: PositiveInt = 24  # forecast horizon
    builtin_size: Annotated[int, Range(ge=1, le=2_000_000)] = 17420  # built-in table: rows (ETTh1 has 17420)
    builtin_seed: NonNegativeInt = 0


# ------------------------------------------------------------------------------------------------ time features
def _features_for(freq: str) -> tuple[str, ...]:
    """Informer's timeF features (``time_features_from_frequency_str``) for a frequency string."""
    match = re.fullmatch(r"\s*\d*\s*(s|t|min|h|d|b|w|m)\s*", freq.lower())
    if not match:
        raise ConfigError(f"data.freq '{freq}' is not a supported frequency; use s, t (minutely), h, d, b, w or m, "
                          "optionally with a multiple such as 15min or 3h")
    unit = "t" if match.group(1) == "min" else match.group(1)
    return {"s": ("second", "minute", "hour", "dayofweek", "day", "dayofyear"),
            "t": ("minute", "hour", "dayofweek", "day", "dayofyear"),
            "h": ("hour", "dayofweek", "day", "dayofyear"),
            "d": ("dayofweek", "day", "dayofyear"), "b": ("dayofweek", "day", "dayofyear"),
            "w": ("day", "week"), "m": ("month",)}[unit]


def num_time_features(freq: str) -> int:
    """How many time features a date of frequency ``freq`` gives (:func:`time_features`)."""
    return len(_features_for(freq))


def time_features(dates: pd.DatetimeIndex, freq: str) -> np.ndarray:
    """[N, F] float32 calendar features, each scaled to [-0.5, 0.5] as Informer's ``timeenc=1``."""
    scaled = {"second": lambda d: d.second / 59.0, "minute": lambda d: d.minute / 59.0,
              "hour": lambda d: d.hour / 23.0, "dayofweek": lambda d: d.day_of_week / 6.0,
              "day": lambda d: (d.day - 1) / 30.0, "dayofyear": lambda d: (d.day_of_year - 1) / 365.0,
              "month": lambda d: (d.month - 1) / 11.0,
              "week": lambda d: (d.isocalendar().week.to_numpy() - 1) / 52.0}
    return np.stack([np.asarray(scaled[f](dates), dtype=np.float64) - 0.5
                     for f in _features_for(freq)], axis=1).astype(np.float32)


# --------------------------------------------------------------------------------------------------- reading
def read_table(path: Path, option: str = "data.path") -> pd.DataFrame:
    """The CSV at ``path`` with its 'date' column parsed and checked (:func:`check_dates`); ``option`` names where
    the path came from in messages (``data.path``, or ``--csv`` for a series to forecast)."""
    fix = ("set data.path=FILE to a CSV file with a 'date' column, or data.path=null for the built-in data"
           if option == "data.path" else "give a CSV file with a 'date' column")
    if path.is_dir():
        raise DataError(f"{option} {path} is a directory; {fix}")
    if not path.exists():
        raise DataError(f"{option} {path} does not exist (relative paths start at the working directory); {fix}")
    try:
        table = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise DataError(f"{path} is not a readable CSV file: {e}") from None
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror or e}") from None
    return check_dates(table, str(path))


def check_dates(table: pd.DataFrame, source: str) -> pd.DataFrame:
    """``table`` with its 'date' column parsed (a copy); refuses a missing column, an unparseable date and dates
    that do not increase, naming the line (a table's row i is line i + 2 of its CSV)."""
    if "date" not in table.columns:
        raise DataError(f"{source} has no 'date' column (columns: {', '.join(map(str, table.columns))}); "
                        "a forecasting CSV needs a 'date' column followed by numeric series")
    if len(table) == 0:
        raise DataError(f"{source} has a header but no rows; a forecasting CSV needs one row per time step")
    try:
        dates = pd.to_datetime(table["date"], errors="coerce")
    except (ValueError, TypeError) as e:  # e.g. dates in several time zones (offsets) in one column
        offsets = table["date"].astype(str).str.extract(r"([+-]\d\d:?\d\d|Z)$")[0]
        changes = np.flatnonzero(offsets.ne(offsets.iloc[0]).to_numpy())
        if len(changes):
            raise DataError(f"{source}: the 'date' column mixes time zones: its dates are in several time zones (the "
                            f"one on line {int(changes[0]) + 2} differs from line 2's); write every date in one time "
                            "zone, or all in UTC") from None
        raise DataError(f"{source}: its dates cannot be read as one series ({e})") from None
    if dates.isna().any():
        row = int(np.flatnonzero(dates.isna().to_numpy())[0])
        raise DataError(f"{source}: the 'date' value {table['date'].iloc[row]!r} on line {row + 2} is not a "
                        "parseable date (expected e.g. 2016-07-01 00:00:00, the same format on every line)")
    steps = np.diff(pd.DatetimeIndex(dates).asi8)
    if (steps <= 0).any():
        row = int(np.flatnonzero(steps <= 0)[0]) + 1  # the later of the two rows
        what = "repeats" if steps[row - 1] == 0 else "comes before"
        raise DataError(f"{source}: the date {table['date'].iloc[row]!r} on line {row + 2} {what} the one on line "
                        f"{row + 1}; dates must increase from row to row (sort the file by date and drop duplicates)")
    return table.assign(date=dates).reset_index(drop=True)


def infer_step(dates: pd.Series | pd.DatetimeIndex) -> pd.DateOffset | None:
    """The frequency pandas infers for regular dates (a fixed duration or a calendar step), None for irregular dates
    or fewer than three."""
    if len(dates) < 3:
        return None
    with warnings.catch_warnings():  # pandas 3 announces that infer_freq will return an offset instead of a string
        warnings.filterwarnings("ignore", message=".*infer_freq.*")
        found = pd.infer_freq(pd.DatetimeIndex(dates))
    return None if found is None else pd.tseries.frequencies.to_offset(found)


def series_step(dates: pd.Series) -> str:
    """The time step between consecutive dates as a pandas offset string: the calendar frequency pandas infers
    for a regular series ("h", "15min", "MS" for month starts, "B" for business days), else the most common step as
    a fixed duration ("h" for hourly data with gaps); "" for fewer than two rows."""
    if len(dates) < 2:
        return ""
    inferred = infer_step(dates)
    if inferred is not None:
        return inferred.freqstr
    usual = pd.Timedelta(pd.Series(np.diff(dates.to_numpy())).mode().iloc[0])
    return pd.tseries.frequencies.to_offset(usual).freqstr


def model_columns(table: pd.DataFrame, cfg: DataConfig, source: str) -> list[str]:
    """The value columns in Informer's order (others, then the target) for the feature mode."""
    columns = [str(c) for c in table.columns if c != "date"]
    if cfg.target not in columns:  # M too: the target is the last column, as Informer's Dataset_Custom orders it
        raise DataError(f"{source} has no target column '{cfg.target}'{did_you_mean(cfg.target, columns)}"
                        f"; its columns: {', '.join(columns)} (set data.target=NAME)")
    if cfg.features == "S":
        return [cfg.target]
    return [c for c in columns if c != cfg.target] + [cfg.target]


def split_borders(rows: int, split: str, seq_len: int) -> dict[str, tuple[int, int]]:
    """Informer's [border1, border2) row range per split (inputs included)."""
    if split in ("ett_hour", "ett_minute"):
        month = 30 * 24 * (4 if split == "ett_minute" else 1)
        ends = [12 * month, 16 * month, 20 * month]
        if rows < ends[-1]:
            raise DataError(f"the {split} split (12/4/4 months) needs at least {ends[-1]} rows, the data has {rows}; "
                            "use data.split=ratio for a shorter series")
    else:
        num_train, num_test = int(rows * 0.7), int(rows * 0.2)
        ends = [num_train, rows - num_test, rows]
    starts = [0, ends[0] - seq_len, ends[1] - seq_len]
    return {name: (b1, b2) for name, b1, b2 in zip(SPLITS, starts, ends)}


# -------------------------------------------------------------------------------------------------- prepared
@dataclass(frozen=True)
class PreparedSeries:
    """The whole series standardised with training-split statistics, its time features and split borders."""

    values: np.ndarray  # [N, C] float32, standardised
    stamps: np.ndarray  # [N, F] float32 timeF features
    columns: tuple[str, ...]  # C names, the target last for M/MS
    mean: np.ndarray  # [C] training-split mean (float64)
    std: np.ndarray  # [C] training-split std (ddof=0; 1 for constant columns, as scikit-learn)
    borders: dict[str, tuple[int, int]]
    step: str  # the time step between rows, a pandas offset string (series_step)


def resolve_split(cfg: DataConfig) -> str:
    """The border rule of ``cfg`` (``data.split``); ``auto``: ETT's hourly or minute borders for an ETTh* / ETTm* file,
    else the 70/10/20 ratio."""
    if cfg.split != "auto":
        return cfg.split
    name = Path(cfg.path).name.lower() if cfg.path else ""
    return "ett_hour" if name.startswith("etth") else "ett_minute" if name.startswith("ettm") else "ratio"


def prepare(cfg: DataConfig, path: Path) -> PreparedSeries:
    """Read the CSV at ``path`` (``data.path`` or the recipe's built-in table), select, check and standardise the
    series."""
    for key in ("seq_len", "label_len", "pred_len"):
        if getattr(cfg, key) < 1:
            raise ConfigError(f"data.{key} must be >= 1, got {getattr(cfg, key)}")
    if cfg.label_len > cfg.seq_len:
        raise ConfigError(f"data.label_len ({cfg.label_len}) must not exceed data.seq_len ({cfg.seq_len}): the "
                          "decoder's start token is the end of the encoder input")
    _features_for(cfg.freq)
    source = str(path) if cfg.path else "the built-in data"
    table = read_table(Path(path))
    columns = model_columns(table, cfg, source)
    raw = numeric_columns(table, columns, source)  # [N, C]
    borders = split_borders(len(table), resolve_split(cfg), cfg.seq_len)
    window = cfg.seq_len + cfg.pred_len
    for name, (b1, b2) in borders.items():
        if b1 < 0 or b2 - b1 < window:
            raise DataError(f"{source} has {len(table)} rows: its {name} split (rows {max(b1, 0)}-{b2}) is too short "
                            f"for one window of seq_len + pred_len = {window} rows")
    train = raw[borders["train"][0]:borders["train"][1]]
    mean, std = train.mean(0), train.std(0)
    if (std == 0).any():
        log.warning("%s: column(s) %s are constant over the training rows: they are scaled by 1, their standardised "
                    "training values are 0, and MAPE / MSPE (which divide by the truth) are infinite where the truth "
                    "is 0", source, ", ".join(c for c, sd in zip(columns, std) if sd == 0))
    std = np.where(std == 0, 1.0, std)
    stamps = time_features(pd.DatetimeIndex(table["date"]), cfg.freq)
    return PreparedSeries(((raw - mean) / std).astype(np.float32), stamps, tuple(columns), mean, std, borders,
                          series_step(table["date"]))


class ForecastWindows(Dataset):
    """Sliding windows of one split: index i -> encoder rows [i, i+seq_len), decoder rows
    [i+seq_len-label_len, i+seq_len+pred_len) (start token + horizon), as Informer's ``__getitem__``."""

    def __init__(self, series: PreparedSeries, split: str, seq_len: int, label_len: int, pred_len: int) -> None:
        b1, b2 = series.borders[split]
        self.values = torch.from_numpy(series.values[b1:b2])  # [n, C]
        self.stamps = torch.from_numpy(series.stamps[b1:b2])  # [n, F]
        self.seq_len, self.label_len, self.pred_len = seq_len, label_len, pred_len

    def __len__(self) -> int:
        return len(self.values) - self.seq_len - self.pred_len + 1

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(f"window {index} out of range for {len(self)} windows")
        s_end = index + self.seq_len
        r_begin, r_end = s_end - self.label_len, s_end + self.pred_len
        return {"x": self.values[index:s_end], "x_mark": self.stamps[index:s_end],  # [seq_len, C], [seq_len, F]
                "y": self.values[r_begin:r_end], "y_mark": self.stamps[r_begin:r_end]}  # [label+pred, C], [.., F]
