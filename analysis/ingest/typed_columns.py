"""Typing of one reader column for the store: a column as a reader gave it (list, numpy or masked array,
pandas array or Series, or `Coded` text) -> a typed numpy column (int64 / float64 / bool with a mask where
there are NULLs, object arrays of str for text), which DuckDB scans directly and which pickles compactly.

Kept apart from `base` (the buffer and the reader contract) because it is a self-contained conversion;
pandas is imported only for values the numpy fast paths do not take.
"""

from __future__ import annotations

from typing import Any

import numpy as np

PANDAS_DTYPES = {"INTEGER": "Int64", "BIGINT": "Int64", "DOUBLE": "Float64", "VARCHAR": "string",
                  "BOOLEAN": "boolean"}
_NP_DTYPES = {"INTEGER": np.int64, "BIGINT": np.int64, "DOUBLE": np.float64, "BOOLEAN": np.bool_}
# numpy kinds taken as they are for a column type (anything else goes through pandas' own conversion)
_NP_KINDS = {"INTEGER": "iub", "BIGINT": "iub", "DOUBLE": "fiub", "BOOLEAN": "b"}
_INT64_MAX = 2**63 - 1


class Coded:
    """A text column as codes into labels: row i is `labels[codes[i]]`, NULL where `codes[i]` is -1.

    A reader that interns its strings (names repeat: a few thousand distinct in millions of rows) gives
    this to `extend()` instead of one str per row, so nothing per row is checked or pickled; the store
    turns it into text at the insert.
    """

    __slots__ = ("codes", "labels")

    def __init__(self, codes: Any, labels: Any) -> None:
        self.codes = np.asarray(codes)
        self.labels = labels

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, key: Any) -> Coded:
        return Coded(self.codes[key], self.labels)

    def __getstate__(self) -> tuple[Any, Any]:
        return self.codes, self.labels

    def __setstate__(self, state: tuple[Any, Any]) -> None:
        self.codes, self.labels = state

    def decode(self) -> np.ndarray:
        """Object array of str / None."""
        table = np.empty(len(self.labels) + 1, dtype=object)
        table[:-1] = self.labels
        return table[self.codes]  # -1 -> the None at the end

    def compact(self) -> Coded:
        """The same rows with only the labels they use (before sending a slice of a long column)."""
        used, codes = np.unique(self.codes, return_inverse=True)
        labels = [self.labels[i] for i in used.tolist() if i >= 0]
        if used.size and used[0] < 0:
            codes = codes - 1  # the -1 code sorted first: it stays -1, the others shift down
        return Coded(codes.astype(np.int32), labels)


def has_null(a: Any) -> bool:
    if isinstance(a, Coded):
        return bool(a.codes.size) and bool((a.codes < 0).any())
    if isinstance(a, np.ma.MaskedArray):
        return True  # parts() keeps a mask only where there are NULLs
    return a.dtype == object and bool(np.equal(a, None).any())


def _masked(data: np.ndarray, mask: Any) -> np.ndarray:
    """`data` as is when nothing is masked, else a MaskedArray (what DuckDB reads as NULLs)."""
    if mask is np.ma.nomask or not mask.any():
        return data
    return np.ma.MaskedArray(data, mask=mask)


def typed_column(values: Any, duck_type: str) -> np.ndarray:
    """One column as a reader gave it (list, numpy or masked array, pandas array or Series) -> the typed
    numpy column `RankTables.parts()` describes, with the values frames() gets from pandas' nullable
    dtypes. The common cases (numpy columns, lists of ints / floats / bools / str and None) are converted
    here; anything else goes through pandas (imported only then)."""
    if duck_type == "VARCHAR":
        return _text_column(values)
    dtype, kinds = _NP_DTYPES[duck_type], _NP_KINDS[duck_type]
    data: Any = None
    mask: Any = np.ma.nomask
    if isinstance(values, np.ndarray):
        data, mask = np.ma.getdata(values), np.ma.getmask(values)
        nan_is_null = True
    elif type(values).__module__.startswith("pandas"):
        if hasattr(values, "_data") and hasattr(values, "_mask"):  # IntegerArray & co.: zero copy
            data, mask = np.asarray(values._data), np.asarray(values._mask)
            nan_is_null = False
        elif isinstance(getattr(values, "dtype", None), np.dtype):  # a Series or Index of a numpy dtype
            data, nan_is_null = np.asarray(values), True
    elif isinstance(values, (list, tuple)):
        if not values:
            return np.empty(0, dtype=dtype)
        nulls = [v is None for v in values]
        if any(nulls):
            fill = False if duck_type == "BOOLEAN" else 0
            values = [fill if v is None else v for v in values]
            mask = np.array(nulls, dtype=bool)
        try:
            data = np.array(values)
        except (TypeError, ValueError, OverflowError):
            data = None
        nan_is_null = True
    if data is None or data.ndim != 1 or data.dtype.kind not in kinds or \
            (data.dtype.kind == "u" and data.size and data.max() > _INT64_MAX):
        return _via_pandas(values, duck_type)
    out = data.astype(dtype, copy=False)
    if duck_type == "DOUBLE" and nan_is_null:
        nan = np.isnan(out)
        if nan.any():
            mask = nan if mask is np.ma.nomask else (nan | mask)
    return _masked(out, mask)


# One text value of a profile (a kernel name, a call stack) is at most this long in the store: a longer one is
# damage or an attack (a 40 MB name), and the store's writer holds a value in one buffer block.
MAX_TEXT_CHARS = 1 << 20


def cut_long_text(col: Any) -> tuple[Any, int]:
    """A typed VARCHAR column (object array or Coded) with every value over MAX_TEXT_CHARS cut, and how many
    were cut."""
    values = col.labels if isinstance(col, Coded) else col
    if max(map(len, filter(None, values)), default=0) <= MAX_TEXT_CHARS:   # every block of text passes here
        return col, 0
    long = [i for i, v in enumerate(values) if v is not None and len(v) > MAX_TEXT_CHARS]
    if not long:
        return col, 0
    fixed = list(values) if isinstance(col, Coded) else col.copy()
    for i in long:
        fixed[i] = fixed[i][:MAX_TEXT_CHARS] + "…"
    return (Coded(col.codes, fixed) if isinstance(col, Coded) else fixed), len(long)


def _text_column(values: Any) -> Any:
    if isinstance(values, Coded):
        codes = values.codes
        if codes.ndim != 1 or (codes.size and codes.dtype.kind not in "iu"):
            raise ValueError("codes of a coded text column must be integers")
        if codes.size and (codes.min() < -1 or codes.max() >= len(values.labels)):
            raise ValueError("a code of a coded text column is out of its labels' range")
        if not set(map(type, values.labels)) <= {str}:
            raise ValueError("labels of a coded text column must be str")
        return values
    plain = isinstance(values, (list, tuple)) or (
        isinstance(values, np.ndarray) and values.dtype == object and values.ndim == 1
        and not isinstance(values, np.ma.MaskedArray))
    if plain and _all_text(values):
        if isinstance(values, np.ndarray):
            return values
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    return _via_pandas(values, "VARCHAR")


def _all_text(values: Any) -> bool:
    """Every value a str or None (exactly str: a subclass goes through pandas)."""
    return set(map(type, values)) <= {str, type(None)}


def _via_pandas(values: Any, duck_type: str) -> np.ndarray:
    """pandas' own conversion to the column's nullable dtype (what frames() does), then numpy."""
    import pandas as pd

    s = values if isinstance(values, pd.Series) else pd.Series(pandas_values(values), dtype=None)
    s = s.astype(PANDAS_DTYPES[duck_type])
    if duck_type == "VARCHAR":
        return s.to_numpy(dtype=object, na_value=None)
    mask = s.isna().to_numpy(dtype=bool)
    fill = False if duck_type == "BOOLEAN" else 0
    return _masked(s.to_numpy(dtype=_NP_DTYPES[duck_type], na_value=fill), mask)


def pandas_values(v: Any) -> Any:
    """numpy masked arrays -> pandas' nullable arrays (pandas would turn masked ints into floats); coded
    text -> its text."""
    if isinstance(v, Coded):
        return v.decode()
    if not isinstance(v, np.ma.MaskedArray):
        return v
    import pandas as pd

    data, mask = np.ma.getdata(v), np.ma.getmaskarray(v)
    if data.dtype.kind in "iu":
        return pd.arrays.IntegerArray(data.astype(np.int64, copy=False), mask)
    if data.dtype.kind == "f":
        return pd.arrays.FloatingArray(data.astype(np.float64, copy=False), mask)
    if data.dtype.kind == "b":
        return pd.arrays.BooleanArray(data, mask)
    return v.astype(object).filled(None)
