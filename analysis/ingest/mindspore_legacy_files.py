"""Cell helpers and the operator files of a MindSpore ≤ 2.3 `profiler/` folder (framework_raw, aicore detail /
op compute time): what `mindspore_legacy` reads per operator, kept apart as plain functions of a path.
"""

from __future__ import annotations

import csv
import json
import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from ..files import open_regular, read_text
from .base import RankTables

IO_KEY_RE = re.compile(r"^(input|output)_(\d+)$", re.I)


def normalize_dtype(v: str | None) -> str | None:
    """MindSpore/msprof data type spellings -> kernel_details' `DT_*` (`NUMBER_TYPE_FLOAT32` -> `DT_FLOAT`)."""
    if v is None or not str(v).strip():
        return None
    s = str(v).strip().upper().removeprefix("NUMBER_TYPE_").removeprefix("KNUMBERTYPE")
    if s.startswith("DT_"):
        s = s[3:]
    elif s.startswith("DT") and not s.startswith("DOUBLE"):
        s = s[2:]
    s = {"FLOAT32": "FLOAT", "FLOAT64": "DOUBLE", "BFLOAT16": "BF16"}.get(s, s)
    return "DT_" + s


def dec_ns(text: str, ns_per_unit: int) -> int | None:
    """Exact ns of a decimal string in some unit (ms, µs): Decimal arithmetic, round half up."""
    try:
        return int((Decimal(str(text).strip()) * ns_per_unit).to_integral_value(ROUND_HALF_UP))
    except (InvalidOperation, ValueError):
        return None


def int_cell(v: Any) -> int | None:
    """A cell as int (`12`, `12.0`); None for '', '-' and non-numbers."""
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        try:
            return int(float(str(v).strip()))
        except (TypeError, ValueError):
            return None


def read_csv_table(path: Path, tables: RankTables) -> tuple[list[str], list[dict[str, str]]]:
    """(stripped header, non-blank rows as dicts); ([], []) with a warning when the file is unreadable."""
    try:
        with open_regular(path, "r", newline="", encoding="utf-8-sig") as f:
            rdr = csv.reader(f)
            header = [h.strip() for h in next(rdr, [])]
            rows = [dict(zip(header, (c.strip() for c in r), strict=False)) for r in rdr if any(c.strip() for c in r)]
    except (OSError, csv.Error, UnicodeDecodeError) as e:
        tables.warn(f"{path.name}: unreadable ({e}); ignored")
        return [], []
    return header, rows


def read_framework(path: Path | None, tables: RankTables) -> dict[str, dict[str, Any]]:
    """framework_raw (None: absent): full op name -> op type, block dim, stream and `;`-joined input/output
    shapes, dtypes (`normalize_dtype`) and formats from its op_info JSON."""
    out: dict[str, dict[str, Any]] = {}
    if path is None:
        return out
    _, rows = read_csv_table(path, tables)
    for r in rows:
        name = r.get("full_op_name") or r.get("full_kernel_name")
        if not name:
            continue
        info: dict[str, Any] = {}
        with_info = r.get("op_info") or ""
        if with_info:
            try:
                info = json.loads(with_info)
            except ValueError:
                info = {}
        ins: list[tuple[int, dict[str, Any]]] = []
        outs: list[tuple[int, dict[str, Any]]] = []
        for k, v in (info.items() if isinstance(info, dict) else ()):
            if (m := IO_KEY_RE.match(k)) and isinstance(v, dict):
                (ins if m.group(1).lower() == "input" else outs).append((int(m.group(2)), v))
        ins.sort(key=lambda x: x[0])
        outs.sort(key=lambda x: x[0])

        def join(items: list[tuple[int, dict[str, Any]]], key: str, dtype: bool = False) -> str | None:
            vals = [normalize_dtype(v.get("data_type")) if dtype else str(v.get(key, "")).strip()
                    for _, v in items]
            vals = [x or "" for x in vals]
            return ";".join(vals) if any(vals) else None

        out[name] = {"op_type": r.get("op_type") or r.get("kernel_type") or None,
                     "block_dim": int_cell(r.get("block_dim")), "stream_id": int_cell(r.get("stream_id")),
                     "input_shapes": join(ins, "shape"), "input_dtypes": join(ins, "", True),
                     "input_formats": join(ins, "format"), "output_shapes": join(outs, "shape"),
                     "output_dtypes": join(outs, "", True)}
    if out:
        tables.has("framework_raw")
    return out


def read_op_totals(detail: Path | None, compute_time: Path | None,
                   tables: RankTables) -> dict[str, tuple[Decimal, int, str | None]]:
    """name -> (mean ms, count, task type) from the aicore_intermediate detail CSV (`detail`), else from
    output_op_compute_time (`compute_time`); None: that file is absent."""
    out: dict[str, tuple[Decimal, int, str | None]] = {}
    path = detail
    if path is not None:
        _, rows = read_csv_table(path, tables)
        for r in rows:
            name = r.get("full_op_name") or r.get("full_kernel_name") or r.get("op_name")
            mean = r.get("task_duration") or r.get("execution_time") or r.get("full_kernel_time")
            try:
                m = Decimal(mean) if mean else None
            except InvalidOperation:
                m = None
            if name and m is not None:
                out[name] = (m, int_cell(r.get("execution_frequency")) or 1, r.get("task_type") or None)
        return out
    path = compute_time
    if path is None:
        return out
    # 1.x text: header line(s), then `name avg_ms stream count`, a `total` line
    for line in read_text(path).splitlines():
        f = line.split()
        if len(f) < 2 or f[0] in ("op_name", "total") or f[0].startswith(("=", "-")):
            continue
        try:
            out[f[0]] = (Decimal(f[1]), int_cell(f[3]) if len(f) > 3 else 1, None)
        except InvalidOperation:
            continue
    return out
