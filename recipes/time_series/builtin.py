"""The built-in tables: synthetic transformer loads in the ETT column layout, named as the real file of their
frequency (what ``lavo-zoo data time_series/<etth1|ettm1>`` writes and a config without ``data.path`` reads)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lavo_zoo.engine.builtin_data import BuiltinData
from lavo_zoo.errors import ConfigError
from lavo_zoo.recipes.time_series.data import ETT_COLUMNS, DataConfig

# `lavo-zoo data time_series/<name>`: (freq, file name, rows of the real file)
BUILTIN_DATASETS = {"etth1": ("h", "ETTh1.csv", 17420), "ettm1": ("t", "ETTm1.csv", 69680)}


class BuiltinETT(BuiltinData):
    """``etth1`` (hourly) and ``ettm1`` (15-minute): a generated table of ``data.builtin_size`` rows."""

    datasets = tuple(BUILTIN_DATASETS)

    def config(self, data: DataConfig, dataset: str, size: int | None) -> DataConfig:
        """``size`` rows (default: the real file's length) at the dataset's frequency. ETT-named files use Informer's
        12/4/4-month split, which needs the full length: with a smaller ``size`` train with ``data.split=ratio``."""
        freq, _, rows = BUILTIN_DATASETS[dataset]
        return DataConfig(freq=freq, builtin_size=size or rows)

    def key(self, data: DataConfig) -> dict:
        check_span(data.builtin_size, data.freq)  # a frequency or a length the generator cannot produce: before
        return {"dataset": "ett", "rows": data.builtin_size, "freq": data.freq, "seed": data.builtin_seed,
                "format": 1}

    def write(self, out: Path, data: DataConfig) -> Path:
        """A generated table in the ETT column layout, named as the real file of its frequency (ETTh1.csv,
        ETTm1.csv; table.csv for other frequencies)."""
        name = next((file for freq, file, _ in BUILTIN_DATASETS.values() if freq == data.freq), "table.csv")
        return write_table(generate_ett(data.builtin_size, data.freq, data.builtin_seed), out / name)


def generate_step(freq: str) -> pd.Timedelta:
    """The fixed time step of the built-in table for ``data.freq``."""
    try:
        return pd.Timedelta(pd.tseries.frequencies.to_offset({"t": "15min"}.get(freq, freq)))
    except ValueError:
        raise ConfigError(f"the built-in data is generated at a fixed step; data.freq '{freq}' is not one "
                          "(use s, t, h, d or a multiple such as 15min), or give data.path=FILE") from None


START = pd.Timestamp("2016-07-01")  # the first date of the built-in tables (as ETTh1's)


def check_span(rows: int, freq: str) -> None:
    """Refuse a table whose dates would run past what pandas can represent (the year 2262)."""
    step = generate_step(freq)
    if rows > 1 and step * (rows - 1) > pd.Timestamp.max - START:
        most = (pd.Timestamp.max - START) // step + 1
        raise ConfigError(f"{rows} rows at a step of {step} run past the year 2262, the last date pandas can hold; "
                          f"data.builtin_size (--size) can be at most {most:,} at data.freq '{freq}'")


def generate_ett(rows: int, freq: str = "h", seed: int = 0) -> pd.DataFrame:
    """An ETT-layout table (date, HUFL, HULL, MUFL, MULL, LUFL, LULL, OT) of synthetic transformer loads: daily,
    weekly and yearly cycles, a slow trend and AR(1) noise; the oil temperature OT follows a smoothed load plus
    the season. Deterministic for a given ``seed``."""
    step = generate_step(freq)
    dates = pd.date_range(START, periods=rows, freq=step)
    rng = np.random.default_rng(seed)
    hours = np.arange(rows) * (step / pd.Timedelta(hours=1))  # [N]
    day, week, year = (np.sin(2 * np.pi * hours / p) for p in (24.0, 168.0, 8766.0))
    day2 = np.cos(4 * np.pi * hours / 24.0)
    trend = 0.3 * hours / max(hours[-1], 1.0) + np.cumsum(rng.normal(0, 0.01, rows))
    noise = np.zeros((rows, 6))
    shocks = rng.normal(0, 0.3, (rows, 6))
    for t in range(1, rows):  # AR(1) noise per load channel
        noise[t] = 0.9 * noise[t - 1] + shocks[t]
    base = np.array([8.0, 2.5, 5.0, 1.5, 3.0, 1.0])  # HUFL HULL MUFL MULL LUFL LULL
    amp = np.array([2.5, 0.6, 1.8, 0.4, 1.2, 0.3])
    loads = (base + amp * (day[:, None] + 0.3 * day2[:, None]) + 0.5 * amp * week[:, None]
             + amp * trend[:, None] + noise * amp / 2.5)  # [N, 6]
    useful = loads[:, [0, 2, 4]].sum(1)
    smooth = pd.Series(useful).ewm(halflife=12.0 / max(hours[1] - hours[0], 1e-9)).mean().to_numpy()
    oil = 15.0 + 4.0 * year + 0.8 * (smooth - smooth.mean()) + rng.normal(0, 0.5, rows)
    table = pd.DataFrame(np.column_stack([loads, oil]), columns=list(ETT_COLUMNS))
    table.insert(0, "date", dates)
    return table


def write_table(table: pd.DataFrame, path: Path) -> Path:
    """``table`` (a 'date' column and value columns) as a CSV in the ETT layout, values at full precision."""
    table = table.assign(date=table["date"].dt.strftime("%Y-%m-%d %H:%M:%S"))
    table.to_csv(path, index=False, float_format="%.17g")
    return path
