"""Damaged copies of real profiles: copy a profile tree into a scratch folder and break one file in it.

    python -m stepdoctor.evals.generate.damage KIND SRC DEST --file REL [--column NAME]

KIND is one of DAMAGES. SRC (a profile folder, or one trace file) is copied whole to DEST (which must not exist
and must not lie under SRC's root data folder); the copy is made writable, then REL (a path inside the copy,
e.g. `rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json`) is damaged. The source is never written: every
change happens on the copy. Damage is deterministic (no randomness), so a test can state what was lost: a cut
keeps exactly the first half of the bytes; bad UTF-8 replaces 2 bytes in the middle of the file's line 2 with
0xFF 0xFE; a short row keeps half the fields of the first data row; garbage appends a fixed non-JSON tail.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys
from collections.abc import Callable
from pathlib import Path

GARBAGE = b"\n}}]] not json \x00\x01 trailing bytes"


def _truncate(f: Path, _: str | None) -> None:
    """Keep the first half of the bytes (a write interrupted mid-way)."""
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])


def _empty(f: Path, _: str | None) -> None:
    f.write_bytes(b"")


def _missing(f: Path, _: str | None) -> None:
    f.unlink()


def _bad_utf8(f: Path, _: str | None) -> None:
    """Two invalid UTF-8 bytes in the middle of the second line (a data row in a CSV), or of the whole file
    when it is one line (a compact JSON trace)."""
    data = f.read_bytes()
    start = data.find(b"\n") + 1          # 0 for a one-line file (a compact JSON trace): its middle
    end = data.find(b"\n", start)
    end = len(data) if end < 0 else end
    mid = (start + end) // 2
    f.write_bytes(data[:mid] + b"\xff\xfe" + data[mid + 2:])


def _short_row(f: Path, _: str | None) -> None:
    """Cut the first data row of a CSV after half of its fields (a row written short); the header and the
    other rows are left alone. The row must hold no quoted commas (checked)."""
    lines = f.read_bytes().split(b"\n")
    row = lines[1].rstrip(b"\r")
    fields = row.split(b",")
    assert len(fields) == lines[0].count(b",") + 1, "first data row has quoted commas; pick another file"
    lines[1] = b",".join(fields[: max(1, len(fields) // 2)])
    f.write_bytes(b"\n".join(lines))


def _missing_column(f: Path, column: str | None) -> None:
    """Remove one column (header and values) from a CSV whose rows hold no quoted commas."""
    if not column:
        raise ValueError("missing_column needs --column NAME")
    rows = [r.rstrip(b"\r").split(b",") for r in f.read_bytes().split(b"\n")]
    i = rows[0].index(column.encode())
    f.write_bytes(b"\n".join(b",".join(c for j, c in enumerate(r) if j != i) if len(r) > i else b",".join(r)
                             for r in rows))


def _trailing_garbage(f: Path, _: str | None) -> None:
    f.write_bytes(f.read_bytes() + GARBAGE)


def _corrupt_db(f: Path, _: str | None) -> None:
    """Overwrite the SQLite header page (100-byte header and the schema root) with garbage: nothing in the file
    can be read any more. Side files (-wal, -shm) are removed so SQLite cannot rebuild from them."""
    data = bytearray(f.read_bytes())
    page = min(len(data), 4096)
    data[:page] = bytes((i * 37 + 11) % 251 for i in range(page))
    f.write_bytes(bytes(data))
    for side in ("-wal", "-shm"):
        (f.parent / (f.name + side)).unlink(missing_ok=True)


def _gz_cut(f: Path, _: str | None) -> None:
    """A gzip stream cut at half its compressed bytes: the head decompresses, the end of stream is missing."""
    data = f.read_bytes()
    assert data[:2] == b"\x1f\x8b", f"{f} is not gzip"
    f.write_bytes(data[: len(data) // 2])


def _gz_head(f: Path, _: str | None) -> None:
    """A gzip stream cut at a tenth of its compressed bytes: only its head decompresses (the metadata and the
    first events, before the trace's first step), so the rank must be found from that head or its file name."""
    data = f.read_bytes()
    assert data[:2] == b"\x1f\x8b", f"{f} is not gzip"
    f.write_bytes(data[: len(data) // 10])


DAMAGES: dict[str, Callable[[Path, str | None], None]] = {
    "truncate": _truncate,
    "empty": _empty,
    "missing": _missing,
    "bad_utf8": _bad_utf8,
    "short_row": _short_row,
    "missing_column": _missing_column,
    "trailing_garbage": _trailing_garbage,
    "corrupt_db": _corrupt_db,
    "gz_cut": _gz_cut,
    "gz_head": _gz_head,
}


def copy_writable(src: Path, dest: Path) -> Path:
    """Copy SRC (folder or file) to DEST and make every copied file and folder writable by the owner
    (the shared real data is read-only). Returns DEST."""
    if dest.exists():
        raise FileExistsError(dest)
    if src.is_dir():
        shutil.copytree(src, dest, copy_function=shutil.copyfile)
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    for root, dirs, files in os.walk(dest):
        for n in [*dirs, *files, "."]:
            p = Path(root) / n
            p.chmod(p.stat().st_mode | stat.S_IWUSR | stat.S_IRUSR | (stat.S_IXUSR if p.is_dir() else 0))
    if dest.is_file():
        dest.chmod(dest.stat().st_mode | stat.S_IWUSR)
    return dest


def damage(kind: str, src: Path, dest: Path, rel: str, column: str | None = None,
           parts: list[str] | None = None) -> Path:
    """Write a copy of SRC at DEST with the file REL (relative to DEST; "." when SRC is one file) damaged by
    KIND; with PARTS, only those children of SRC are copied (e.g. two rank folders of a fixture folder that
    holds other things too). Returns the damaged file's path (which no longer exists for "missing")."""
    if kind not in DAMAGES:
        raise ValueError(f"unknown damage {kind!r}; one of {', '.join(DAMAGES)}")
    src, dest = Path(src).resolve(), Path(dest).resolve()
    if dest.is_relative_to(src if src.is_dir() else src.parent):
        raise ValueError("DEST must lie outside the source profile")
    if parts:
        dest.mkdir(parents=True)
        for part in parts:
            copy_writable(src / part, dest / part)
    else:
        copy_writable(src, dest)
    target = dest if rel in ("", ".") else dest / rel
    if not target.is_file():
        raise FileNotFoundError(target)
    DAMAGES[kind](target, column)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stepdoctor.evals.generate.damage", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=sorted(DAMAGES))
    ap.add_argument("src", type=Path)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--file", required=True, help="the file to damage, relative to DEST")
    ap.add_argument("--column", help="for missing_column: the CSV column to remove")
    ap.add_argument("--part", action="append", help="copy only this child of SRC (repeatable)")
    a = ap.parse_args(argv)
    try:
        print(damage(a.kind, a.src, a.dest, a.file, a.column, a.part))
    except (OSError, ValueError) as e:
        print(f"damage: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
