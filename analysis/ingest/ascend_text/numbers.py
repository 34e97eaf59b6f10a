"""Small exact converters: nullable int64 columns, decimal text -> scaled integers, floats checked exact."""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

import numpy as np

from .common import INT32_MAX
from .trace_events import FLOAT_OR_NONE, INT_OR_NONE, STR_ONLY

I64_MIN, I64_MAX = -(2 ** 63), 2 ** 63 - 1


_F53 = float(2 ** 53)  # below it every integer is exact as a float64


def _float64(values: list[float | None]) -> Any:
    """pd.array(values, dtype="Float64") of floats and None as a float64 array (None -> NaN: `RankTables`
    stores NaN as NULL, as pandas does); other values through pandas (imported only then)."""
    if FLOAT_OR_NONE.issuperset(map(type, values)):
        return np.array(values, dtype=np.float64)
    import pandas as pd

    a = pd.array(values, dtype="Float64")
    return np.ma.MaskedArray(np.array(a._data, dtype=np.float64), mask=np.array(a._mask, dtype=bool))


# --------------------------------------------------------------------------------------------------------
# small converters


def ma(data: np.ndarray, mask: np.ndarray) -> np.ma.MaskedArray:
    """A nullable int64 column: its data and its full NULL mask (both kept, not copied), which `RankTables`
    reads directly; `._data` / `._mask` give them back."""
    return np.ma.MaskedArray(data, mask=mask)


def i64(values: Any) -> np.ma.MaskedArray:
    """pd.array(values, dtype="Int64") as a masked int64 array (a copy); lists of ints and None and integer
    arrays are converted here, anything else by pandas (imported only then: odd values, ints beyond int64,
    which raise pandas' own error)."""
    if isinstance(values, (list, tuple)):
        if INT_OR_NONE.issuperset(map(type, values)):
            a = int_array(values)
            if a is not None:
                return a
    elif isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype.kind == "i":
        data = np.array(np.ma.getdata(values), dtype=np.int64)
        mask = np.array(np.ma.getmaskarray(values), dtype=bool) if isinstance(values, np.ma.MaskedArray) \
            else np.zeros(len(data), dtype=bool)
        return ma(data, mask)
    import pandas as pd

    a = pd.array(values, dtype="Int64")
    return ma(np.array(a._data, dtype=np.int64), np.array(a._mask, dtype=bool))


def int_array(values: Sequence[int | None]) -> np.ma.MaskedArray | None:
    """Ints and None as a masked int64 array (with the data pandas puts under the mask, 1); None when a
    value is beyond int64."""
    try:
        if None in values:
            if type(values) is list:
                n_null = values.count(None)
                if n_null == len(values):
                    return ma(np.ones(n_null, dtype=np.int64), np.ones(n_null, dtype=bool))
                if 2 * n_null > len(values):  # mostly NULL: two comprehensions cost half the object array
                    mask = np.array([v is None for v in values], dtype=bool)
                    return ma(np.array([1 if v is None else v for v in values], dtype=np.int64), mask)
                # through float64 (None -> NaN), exact while every value is below 2**53: faster than the
                # object array below, which takes the other columns
                f = np.array(values, dtype=np.float64)
                mask = np.isnan(f)
                f[mask] = 1
                if np.abs(f).max() < _F53:
                    return ma(f.astype(np.int64), mask)
            obj = np.array(values, dtype=object)
            mask = np.equal(obj, None)
            obj[mask] = 1
            data = obj.astype(np.int64)
        else:
            data = np.array(values, dtype=np.int64)
            mask = np.zeros(len(values), dtype=bool)
    except OverflowError:
        return None
    return ma(data, mask)


def i64_rows(values: Any, keep: np.ndarray) -> np.ma.MaskedArray:
    """`i64(values)` of the rows where `keep` (a bool array) of a nullable int column: a masked int64 array
    (`nullable_int_parts`), or a list of ints and None (as `_ints` makes) of which only those rows are
    converted. The other rows are converted too when one is not None: a value beyond int64 anywhere makes
    `i64` of the whole column raise, and it still does."""
    if isinstance(values, np.ma.MaskedArray):
        return ma(values._data[keep], values._mask[keep])
    a = int_array(list(itertools.compress(values, keep.tolist())))
    if a is not None:
        others = list(itertools.compress(values, (~keep).tolist()))
        if others.count(None) == len(others) or int_array(others) is not None:
            return a
    return i64(values)[np.flatnonzero(keep)]


def nullable_int_parts(parts: list[Any]) -> Any:
    """Parts of a nullable int column (masked int64 arrays, lists of ints and None) as one masked int64
    array; the list of all the values when one is beyond int64 (`i64_rows` then raises as it did)."""
    arrays = [p if isinstance(p, np.ma.MaskedArray) else int_array(p) for p in parts]
    if any(a is None for a in arrays):
        return list(itertools.chain.from_iterable(p.tolist() if isinstance(p, np.ndarray) else p for p in parts))
    if not arrays:
        return ma(np.empty(0, dtype=np.int64), np.empty(0, dtype=bool))
    if len(arrays) == 1:
        return arrays[0]
    return ma(np.concatenate([a._data for a in arrays]), np.concatenate([a._mask for a in arrays]))


def float64_part(part: Any) -> np.ndarray:
    """A part of a float column (a float64 array, or a list of floats and None) as float64, NaN for none."""
    if isinstance(part, np.ndarray):
        return np.ma.filled(part, np.nan) if isinstance(part, np.ma.MaskedArray) else part
    return np.ma.filled(_float64(part), np.nan)


def int32(values: Any) -> np.ma.MaskedArray:
    """Nullable ints for an INTEGER column; out-of-range values (msprof's 4294967295 = "none") become NULL."""
    a = i64(values)
    data, mask = a._data, a._mask
    out_of_range = ((data < -INT32_MAX) | (data > INT32_MAX)) & ~mask
    if out_of_range.any():
        mask[out_of_range] = True
    return a


def _dec(v: Any) -> Decimal | None:
    """Decimal of a JSON number (decoded with float_hook=Decimal) or numeric string; None otherwise."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, Decimal):
        return v
    if isinstance(v, int):
        return Decimal(v)
    if isinstance(v, float):
        return Decimal(repr(v))
    if isinstance(v, str):
        try:
            d = Decimal(v.strip())
        except InvalidOperation:
            return None
        return d if d.is_finite() else None
    return None


def _scaled(v: Any, scale: int) -> int | None:
    """round(v * scale) for a Decimal-able value, exact (µs*1000 -> ns, ms*10^6 -> ns, MB*10^6 -> B)."""
    d = _dec(v)
    return None if d is None else int((d * scale).to_integral_value(ROUND_HALF_UP))


# communication*.json numbers: the helpers below give exactly what `_scaled` / `_dec` (the exact Decimal
# conversion) give, from the number's JSON text (float_hook=str) or from its float (`_scaled_floats`).
_F40 = float(1 << 40)


_INT_EXACT = 10**18                     # |int| * scale (<= 10^6) stays within Decimal's 28 digits


_PLAIN_TYPES = frozenset({str, int})    # what float() reads the same way _dec does (bool is not int here)


JSON_NUMBER_RE = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


class NumbersAsText(Exception):
    """A communication*.json value that needs the numbers' text: a float that `_scaled_floats` cannot show
    exact (the file is read again with numbers as text), or a value whose meaning depends on how numbers are
    decoded, a number where text or an object is expected (read again with numbers as Decimal)."""


def _scaled_text(s: str, digits: int) -> int | None:
    """Exact s * 10**digits of a plain decimal numeral with at most `digits` decimals (the integer arithmetic
    Decimal does for it within its 28 digits), else None."""
    whole, dot, frac = s.partition(".")
    neg = whole[:1] == "-"
    if neg:
        whole = whole[1:]
    if not (whole.isascii() and whole.isdigit()) or (dot and not (frac.isascii() and frac.isdigit())) \
            or len(frac) > digits or len(whole) + digits > 28:
        return None
    n = int(whole) * 10**digits + (int(frac) * 10**(digits - len(frac)) if frac else 0)
    return -n if neg else n


def _scaled_fast(v: Any, scale: int, digits: int) -> int | None:
    """`_scaled(v, scale)` for scale = 10**digits, without Decimal for the usual values.

    float(text) is the correctly rounded double x' of the text's value x (|x' - x| <= |x|·2^-53), and
    p = fl(x'·scale) differs from x·scale by at most 2·|p|·2^-53 < 2^-12 while |p| < 2^40. So when p lies
    within 1e-3 of an integer N, x·scale lies within 1e-3 + 2^-12 of N and ROUND_HALF_UP(x·scale) = N: the
    float step is exact for every value with at most `digits` decimals below 2^40 / scale (all msprof
    writes: ms and MB with up to 6 decimals). Longer plain numerals (epoch µs) are scaled as integers; the
    rest (more decimals, exponents, text) goes through Decimal.
    """
    t = type(v)
    if t is str:
        try:
            p = float(v) * scale
        except ValueError:
            return _scaled(v, scale)
        if -_F40 < p < _F40:
            n = round(p)
            if abs(p - n) <= 1e-3:
                return n
        n = _scaled_text(v, digits)
        return n if n is not None else _scaled(v, scale)
    if t is int and -_INT_EXACT < v < _INT_EXACT:
        return v * scale
    return _scaled(v, scale)


def _plain_floats(values: list[Any]) -> np.ndarray | None:
    """float() of every value as float64 when all are str / int and parse, else None."""
    if not _PLAIN_TYPES.issuperset(map(type, values)):
        return None
    try:
        return np.fromiter(map(float, values), dtype=np.float64, count=len(values))
    except (ValueError, OverflowError):
        return None


def _scaled_ints(values: list[Any], scale: int, digits: int) -> list[int | None]:
    """[_scaled_fast(v, scale, digits) for v in values] with the float step (and its exactness test, see
    `_scaled_fast`) done for the whole column at once; None stays None (as `_scaled_fast` gives) and the
    others are converted together; plain numerals too large for the float step (epoch µs) are scaled as
    integers together (`_scaled_uniform`, `scaled_texts`); the rest is converted one by one."""
    if None in values:
        at = [i for i, v in enumerate(values) if v is not None]
        out: list[int | None] = [None] * len(values)
        for i, n in zip(at, _scaled_ints([values[i] for i in at], scale, digits), strict=True):
            out[i] = n
        return out
    a = _plain_floats(values) if values else None
    if a is None:
        return [_scaled_fast(v, scale, digits) for v in values]
    with np.errstate(over="ignore", invalid="ignore"):  # inf / nan: not ok, converted one by one
        p = a * scale
        r = np.rint(p)
        ok = (np.abs(p - r) <= 1e-3) & (np.abs(p) < _F40)
    if not ok.any():  # (epoch µs: all too large for the float step) all as text, without the row indices
        out = _scaled_uniform(values, digits)
        if out is not None:
            return out
        out = scaled_texts(values, digits)
        if None in out:
            out = [n if n is not None else _scaled_fast(v, scale, digits) for n, v in zip(out, values, strict=True)]
        return out
    out = np.where(ok, r, 0).astype(np.int64).tolist()
    if not ok.all():
        bad = np.flatnonzero(~ok).tolist()
        for i, n in zip(bad, scaled_texts([values[i] for i in bad], digits), strict=True):
            out[i] = n if n is not None else _scaled_fast(values[i], scale, digits)
    return out


def scaled_i64(values: list[Any], scale: int, digits: int) -> list[int | None]:
    """`_scaled_ints`, a result beyond int64 as None: communication*.json numbers that large (over 292
    years in ns, 9 exabytes) are not measurements, and would stop the rank's read as a column's value."""
    out = _scaled_ints(values, scale, digits)
    if any(v is not None and not I64_MIN <= v <= I64_MAX for v in out):
        out = [v if v is None or I64_MIN <= v <= I64_MAX else None for v in out]
    return out


@functools.cache
def plain_numerals(digits: int, whole: int = 0) -> re.Pattern[str]:
    """Lines of plain decimal numerals that `_scaled_text(s, digits)` converts: an optional '-', 1 to
    `whole` (default 28 - digits) ASCII digits, and 1 to `digits` decimals after a '.'."""
    one = f"-?[0-9]{{1,{whole or 28 - digits}}}" + (f"(?:\\.[0-9]{{1,{digits}}})?" if digits else "")
    return re.compile(f"{one}(?:\n{one})*")


@functools.cache
def _fixed_numerals(decimals: int, whole: int) -> re.Pattern[str]:
    """Lines of plain decimal numerals with exactly `decimals` decimals (0: no '.') and 1 to `whole` digits
    before them (one of the shapes `plain_numerals` matches)."""
    one = f"-?[0-9]{{1,{whole}}}" + (f"\\.[0-9]{{{decimals}}}" if decimals else "")
    return re.compile(f"{one}(?:\n{one})*")


def _scaled_uniform(values: list[Any], digits: int) -> list[int] | None:
    """`scaled_texts(values, digits)` when every value is a plain numeral with the decimals of the first
    (a fixed format, as the epoch µs of communication.json): the digits without the dots times one power
    of ten (~3x faster than a power per value); None for any other column."""
    if not values or not STR_ONLY.issuperset(map(type, values)):
        return None
    text = "\n".join(values)
    first = values[0]
    decimals = len(first) - first.index(".") - 1 if "." in first else 0
    if text.count("\n") != len(values) - 1 or decimals > digits \
            or not _fixed_numerals(decimals, 28 - digits).fullmatch(text):
        return None
    ints = map(int, text.replace(".", "").split("\n"))
    power = 10 ** (digits - decimals)
    return list(ints) if power == 1 else [n * power for n in ints]


def scaled_texts(values: list[Any], digits: int) -> list[int | None]:
    """[_scaled_text(v, digits) if type(v) is str else None for v in values]; when every value is such a
    numeral (one regex match of all the lines), the integer arithmetic for all at once: the digits
    without the dot, times 10 ** (digits - decimals)."""
    if STR_ONLY.issuperset(map(type, values)):
        text = "\n".join(values)
        if text.count("\n") == len(values) - 1 and plain_numerals(digits).fullmatch(text):
            return [int(v.replace(".", "", 1)) * 10 ** (digits + 1 + v.index(".") - len(v)) if "." in v
                    else int(v) * 10 ** digits for v in values]
    return [_scaled_text(v, digits) if type(v) is str else None for v in values]


def _scaled_exact(values: list[float | None], scale: int) -> tuple[np.ndarray, np.ndarray]:
    """(round(v * scale) as int64, 0 where null; null mask) of numbers decoded as floats (None: null), when
    the float step is exact for every one of them (see `_scaled_fast`); else raises `NumbersAsText`: the
    file is read again with numbers as text."""
    a = np.array(values, dtype=np.float64)  # None -> NaN (a JSON number is never NaN)
    with np.errstate(over="ignore", invalid="ignore"):
        p = a * scale
        r = np.rint(p)
        ok = (np.abs(p - r) <= 1e-3) & (np.abs(p) < _F40)
    nulls = np.isnan(a)
    if not (ok | nulls).all():
        raise NumbersAsText
    return np.where(ok, r, 0).astype(np.int64), nulls


def _scaled_floats(values: list[float | None], scale: int, digits: int) -> list[int | None]:
    """`_scaled_ints` of numbers decoded as floats (None stays None), as `_scaled_exact` converts them."""
    data, nulls = _scaled_exact(values, scale)
    out: list[int | None] = data.tolist()
    for i in np.flatnonzero(nulls).tolist():
        out[i] = None
    return out


def scaled_column(values: list[Any], scale: int, digits: int, typed: bool) -> np.ma.MaskedArray:
    """`i64` of `_scaled_floats` (`typed`: numbers decoded as floats) or of `_scaled_ints` (as text); the
    floats without a list of ints in between."""
    if typed:
        return ma(*_scaled_exact(values, scale))
    return i64(scaled_i64(values, scale, digits))


def _dec_float(v: Any) -> float | None:
    d = _dec(v)
    return float(d) if d is not None else None


def dec_floats(values: list[Any]) -> list[float | None]:
    """[float(_dec(v)) or None for v in values]: float(text) is what float(Decimal(text)) gives (both round
    the same exact value correctly) whenever it is finite; other values go through `_dec`."""
    a = _plain_floats(values) if values else None
    if a is None:
        return [_dec_float(v) for v in values]
    out: list[float | None] = a.tolist()
    fin = np.isfinite(a)
    if not fin.all():
        for i in np.flatnonzero(~fin).tolist():
            out[i] = _dec_float(values[i])
    return out
