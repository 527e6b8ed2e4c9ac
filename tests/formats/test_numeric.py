"""Numbers in files (zoo/formats/numeric.py): the one .npy reader and the one check of a CSV's numeric columns that
the time-series recipe and the forecast evaluator share."""
import numpy as np
import pandas as pd
import pytest

from lavo_zoo.errors import DataError
from lavo_zoo.formats.numeric import is_real, numeric_columns, read_npy


def test_an_npy_array_is_read_and_anything_else_refused(tmp_path):
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "a.npy", array)
    assert np.array_equal(read_npy(tmp_path / "a.npy"), array)
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "text.npy").write_text("1,2,3\n")
    for name in ("objects.npy", "text.npy"):
        with pytest.raises(DataError, match=f"--ref .*{name} is not a readable .npy array"):
            read_npy(tmp_path / name, "--ref")


def test_real_numbers_are_integers_and_floats_only():
    assert is_real(np.zeros(2, np.int64)) and is_real(np.zeros(2, np.float16))
    assert not any(is_real(np.zeros(2, t)) for t in (bool, np.complex64)) and not is_real(np.array(["1"]))


def test_numeric_columns_read_numbers_and_name_the_line_of_a_bad_one():
    table = pd.DataFrame({"a": [" 1.5", "2", "3"], "b": [4, 5, 6], "c": ["x", "y", "z"]})
    assert numeric_columns(table, ["a", "b"], "f.csv").tolist() == [[1.5, 4], [2, 5], [3, 6]]
    with pytest.raises(DataError, match=r"f.csv: column 'c' has a missing or non-numeric value 'x' on line 2"):
        numeric_columns(table, ["a", "c"], "f.csv")
    table.loc[2, "a"] = "inf"
    with pytest.raises(DataError, match=r"f.csv: column 'a' has the non-finite value 'inf' on line 4"):
        numeric_columns(table, ["a", "b"], "f.csv")
    with pytest.raises(DataError, match=r"column 'b' has a missing or non-numeric value .*nan.* on line 3"):
        numeric_columns(pd.DataFrame({"b": [1.0, None]}), ["b"], "f.csv")
