"""Numbers in files that recipes and evaluators read: a ``.npy`` array of real numbers, and the numeric columns of a
CSV table; each refused naming the file (and the line) when it holds something else."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from lavo_zoo.errors import DataError

NPY_MAGIC = b"\x93NUMPY"  # how every .npy file starts: a file is told to be one by its content, not by its name


def read_npy(path: Path, option: str = "--pred", raw: bytes | None = None) -> Any:
    """The array of the ``.npy`` file ``path`` (never a pickled object).

    Args:
        path: the file.
        option: how the user gave it (``--pred``), for the message.
        raw: the file's bytes, already read (a pipe is read once); None reads ``path``.

    Returns:
        The numpy array, as stored.

    Raises:
        DataError: the file is not a readable ``.npy`` array.
    """
    import io

    import numpy as np

    try:
        return np.load(path if raw is None else io.BytesIO(raw), allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise DataError(f"{option} {path} is not a readable .npy array: {e}") from None


def is_real(array: Any) -> bool:
    """Whether ``array`` holds real numbers (integers or floats; not booleans, complex numbers or text)."""
    import numpy as np

    return array.dtype != bool and (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating))


def numeric_columns(table: Any, columns: list[str], source: str) -> Any:
    """[N, C] float64 values of ``table``'s ``columns`` (a pandas DataFrame read from a CSV, whose row i is line
    i + 2), text columns read as numbers with the spaces around them ignored.

    Args:
        table: the DataFrame.
        columns: the columns to read.
        source: the file (and how it was given), for the message.

    Returns:
        The values as a float64 numpy array.

    Raises:
        DataError: a missing, non-numeric or non-finite value, naming its column and line.
    """
    import numpy as np
    import pandas as pd

    def number(column: Any) -> Any:
        text = pd.api.types.is_string_dtype(column) or column.dtype == object
        return pd.to_numeric(column.astype(str).str.strip() if text else column, errors="coerce")

    values = table[columns].apply(number)
    bad = values.isna().to_numpy()
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        raise DataError(f"{source}: column '{columns[col]}' has a missing or non-numeric value "
                        f"{table[columns[col]].iloc[row]!r} on line {row + 2}")
    array = values.to_numpy(np.float64)
    infinite = ~np.isfinite(array)
    if infinite.any():
        row, col = map(int, np.argwhere(infinite)[0])
        raise DataError(f"{source}: column '{columns[col]}' has the non-finite value "
                        f"{table[columns[col]].iloc[row]!r} on line {row + 2}; every value must be a finite number")
    return array
