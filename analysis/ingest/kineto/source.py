"""Streaming read of a Kineto file: the inflated stream (`inflate.Source`) read block by block, the
traceEvents array cut into pieces at event boundaries and decoded; damage keeps the events read before it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import msgspec

from ...errors import ProfileError
from .events import ANY, EVENTS, RAW_DICT, Event, loose_events
from .inflate import Doc, Source

_WS = frozenset(b" \t\r\n")


_BLOCK = 512 << 10        # bytes read (decompressed) per read call


_PIECE = 512 << 10        # target size of one decoded piece of the traceEvents array (see below)


_HEAD_LIMIT = 64 << 20    # how far to look for the "traceEvents" key before decoding the whole file


_MAX_CUT_TRIES = 64


_BYTE_RE = re.compile(r"\(byte (\d+)\)")
_DEEP_RE = re.compile(rb"[\[{](?:\s*[\[{]){255,}")


def _err_pos(e: Exception) -> int | None:
    m = _BYTE_RE.search(str(e))
    return int(m.group(1)) if m else None


def _invalid(path: Path, e: Exception, offset: int, total: int) -> ProfileError:
    """ProfileError for bad JSON. `offset` maps a position inside the decoded piece to the decompressed
    stream; `total` is the stream's length (where truncated data ends)."""
    msg = str(e)
    if "truncated" in msg:
        return ProfileError(path, f"invalid JSON: truncated (the data ends at byte {total} inside an unfinished "
                                  "value)")
    pos = _err_pos(e)
    core = _BYTE_RE.sub("", msg).replace("JSON is malformed: ", "").strip()
    where = f" at byte {offset + pos}" if pos is not None else ""
    return ProfileError(path, f"invalid JSON: {core}{where}")


def _decode_events(piece: bytes | memoryview, doc: Doc) -> list[Event]:
    """Typed decode of `[ ... ]`; values of unexpected types fall back to a loose decode + coercion; bytes
    that are not UTF-8 (JSON text must be) become U+FFFD, counted in `doc.not_utf8`, so they cost only the
    names they are in."""
    try:
        return EVENTS.decode(piece)
    except msgspec.ValidationError:
        return loose_events(piece)
    except RecursionError:   # arrays or objects nested past the decoder's depth: damage like any other,
        # at the first long run of opening brackets (so the events before it are kept)
        m = _DEEP_RE.search(bytes(piece))
        raise msgspec.DecodeError(f"nested too deeply{f' (byte {m.start()})' if m else ''}") from None
    except msgspec.DecodeError as e:
        if "UTF-8" not in str(e):
            raise
    raw = bytes(piece)
    fixed = raw.decode("utf-8", "replace")
    doc.not_utf8 += fixed.count("\ufffd") - raw.count("\ufffd".encode())
    return _decode_events(fixed.encode("utf-8"), doc)


def _split_array_end(piece: bytes, e: Exception) -> int | None:
    """For a 'trailing characters' error: the length of the leading complete array in `piece`."""
    if "trailing characters" not in str(e):
        return None
    pos = _err_pos(e)
    k = min(pos if pos is not None else len(piece), len(piece)) - 1
    # msgspec points at (or just past) the first trailing character; the array's ']' precedes it
    for _ in range(3):
        while k >= 0 and piece[k] != 0x5D:
            k -= 1
        if k < 0:
            return None
        try:
            msgspec.json.decode(piece[: k + 1], type=list[msgspec.Raw])
            return k + 1
        except msgspec.DecodeError:
            k -= 1
    return None


def _open_array(src: Source, doc: Doc) -> tuple[bytearray, int] | None:
    """Read the head of the document up to the first element of the event list.

    Returns the bytes read so far and the offset just past the list's `[` (filling `doc.meta` with the
    keys before `traceEvents`, or setting `doc.top_level_list`), or None when the layout needs the
    whole-document fallback (no `"traceEvents"` key in the first 64 MiB, or the key inside a string);
    the bytes read are then in `doc.head`."""
    buf = bytearray()
    while len(buf) < (1 << 16) and (data := src.read(_BLOCK)):
        buf += data
    i = 0
    if buf[:3] == b"\xef\xbb\xbf":
        i = 3
    while i < len(buf) and buf[i] in _WS:
        i += 1
    if i >= len(buf):
        raise ProfileError(src.path, "empty file")
    first = buf[i]
    if first == 0x5B:   # '[': a bare list of events
        doc.top_level_list = True
        pos = i + 1
    elif first == 0x7B:  # '{'
        key = buf.find(b'"traceEvents"', i)
        while key < 0 and not src.eof and len(buf) < _HEAD_LIMIT:
            buf += src.read(_BLOCK)
            key = buf.find(b'"traceEvents"', max(i, len(buf) - _BLOCK - 16))
        pos = -1
        if key >= 0:
            j = key + len(b'"traceEvents"')
            while j < len(buf) and buf[j] in _WS:
                j += 1
            if j < len(buf) and buf[j] == 0x3A:  # ':'
                j += 1
                while j < len(buf) and buf[j] in _WS:
                    j += 1
                if j < len(buf) and buf[j] == 0x5B:
                    try:
                        head = ANY.decode(bytes(buf[i:key]) + b'"traceEvents":0}')
                        doc.meta.update({k: v for k, v in head.items() if k != "traceEvents"})
                        pos = j + 1
                    except msgspec.DecodeError:
                        pos = -1  # the key was inside a string: fall back
        if pos < 0:
            doc.head = bytes(buf[i:])
            return None
    else:
        raise ProfileError(src.path, f"invalid JSON: expected '{{' or '[' at byte {i}, found {chr(first)!r}")
    return buf, pos


def _fill(src: Source, buf: bytearray, pos: int) -> bytearray:
    """`buf` with blocks read until _PIECE bytes follow `pos` (or the end): gathered and joined once
    (bytearray += would copy the growing buffer again and again)."""
    chunks: list[bytes | bytearray] = [buf]
    have = len(buf) - pos
    while not src.eof and have < _PIECE:
        block = src.read(_BLOCK)
        chunks.append(block)
        have += len(block)
    return bytearray().join(chunks)


def iter_events(src: Source, doc: Doc) -> Iterator[list[Event]]:
    """Yield lists of events in file order, filling `doc` with the top-level metadata."""
    opened = _open_array(src, doc)
    if opened is None:
        yield from _whole_document(src, doc.head + src.read_all(), doc)
        return
    buf, pos = opened
    base = 0  # offset of buf[0] in the decompressed stream
    while True:
        if not src.eof and len(buf) - pos < _PIECE:
            buf = _fill(src, buf, pos)
        if src.eof:
            yield from _finish_rest(src, b"[" + bytes(buf[pos:]), doc, base + pos - 1)
            return
        hi = len(buf)
        done = False
        for _ in range(_MAX_CUT_TRIES):
            j = buf.rfind(b"}", pos, hi)
            if j < 0:
                break
            k = j + 1
            while k < len(buf) and buf[k] in _WS:
                k += 1
            if k >= len(buf) or buf[k] != 0x2C:  # not followed by ','
                hi = j
                continue
            # decode in place, without copying the piece: the separator before pos becomes '[' and
            # the byte after the '}' (',' or whitespace) becomes ']' for the duration of the decode.
            # msgspec.Raw values keep a buffer export until the consumer drops the events, so `buf` is
            # never resized after a successful decode (see below).
            buf[pos - 1] = 0x5B
            saved = buf[j + 1]
            buf[j + 1] = 0x5D
            mv = memoryview(buf)
            view = mv[pos - 1: j + 2]
            try:
                evs = _decode_events(view, doc)  # type: ignore[arg-type]
            except msgspec.DecodeError as e:
                view.release()
                mv.release()
                buf[j + 1] = saved
                piece = b"[" + bytes(buf[pos: j + 1]) + b"]"
                end = _split_array_end(piece, e)
                if end is not None:  # the events array ended inside this piece
                    yield _decode_events(piece[:end], doc)
                    tail = piece[end:-1] + bytes(buf[j + 1:]) + src.read_all()
                    _read_tail(src, tail, doc, base + pos - 1 + end)
                    return
                p = _err_pos(e)
                if "truncated" not in str(e) and p is not None and p < len(piece) - 2:
                    raise _invalid(src.path, e, base + pos - 1, base + len(buf)) from None
                hi = j  # the cut was inside a string or a nested value: try the previous '}'
                continue
            yield evs
            del evs, view, mv
            pos = k + 1
            done = True
            break
        if not done:
            # no usable cut in the buffer (one huge event, or an odd layout): read more; if the
            # buffer keeps growing without a cut, decode the rest in one go
            if len(buf) - pos > _HEAD_LIMIT:
                rest = b"[" + bytes(buf[pos:]) + src.read_all()
                yield from _finish_rest(src, rest, doc, base + pos - 1)
                return
            buf += src.read(_BLOCK)
            continue
        # continue in a new buffer holding the unconsumed bytes (and the separator before them): the old
        # one may still be pinned by msgspec.Raw values of events the consumer has not dropped yet
        base += pos - 1
        buf = buf[pos - 1:]
        pos = 1


def _events_before_damage(piece: bytes, at: int | None, doc: Doc) -> list[Event]:
    """The whole events of `[ ...` that precede a decode error at byte `at` (None: unknown, the end): the
    piece is cut after the last `},` before it at which the part before decodes (at most _MAX_CUT_TRIES
    tries); [] when none does. The caller then raises the error; the reader keeps these events."""
    hi = len(piece) if at is None else min(at, len(piece))
    for _ in range(_MAX_CUT_TRIES):
        j = piece.rfind(b"}", 1, hi)
        if j < 0:
            break
        k = j + 1
        while k < len(piece) and piece[k] in _WS:
            k += 1
        if k < len(piece) and piece[k] == 0x2C:
            try:
                return _decode_events(piece[: j + 1] + b"]", doc)
            except msgspec.DecodeError:
                pass
        hi = j
    return []


def _finish_rest(src: Source, piece: bytes, doc: Doc, offset: int) -> Iterator[list[Event]]:
    """The events of `piece` (a "[" and the rest of the array, `offset` its input position), then the keys
    after the array; a damaged end yields the whole events before the damage, then raises."""
    try:
        yield _decode_events(piece, doc)
        if not doc.top_level_list:
            raise ProfileError(src.path, "invalid JSON: truncated (the top-level object is not closed)")
    except msgspec.DecodeError as e:
        end = _split_array_end(piece, e)
        if end is None:
            yield _events_before_damage(piece, _err_pos(e), doc)
            raise _invalid(src.path, e, offset, offset + len(piece)) from None
        yield _decode_events(piece[:end], doc)
        _read_tail(src, piece[end:], doc, offset + end)


def _read_tail(src: Source, tail: bytes, doc: Doc, offset: int) -> None:
    """Parse what follows the traceEvents array: `, "key": value ... }`."""
    if doc.top_level_list:
        raise ProfileError(src.path, f"invalid JSON: trailing characters after the event list at byte {offset}")
    try:
        rest = ANY.decode(b'{"traceEvents":0' + tail)
    except msgspec.DecodeError as e:
        raise _invalid(src.path, e, offset - len(b'{"traceEvents":0'), offset + len(tail)) from None
    doc.meta.update({k: v for k, v in rest.items() if k != "traceEvents"})


def _whole_document(src: Source, data: bytes, doc: Doc) -> Iterator[list[Event]]:
    """Fallback: decode the whole document at once."""
    if not data.strip():
        raise ProfileError(src.path, "empty file")
    try:
        top = RAW_DICT.decode(data)
    except msgspec.ValidationError:
        raise ProfileError(src.path, "no traceEvents: the top-level JSON value is not an object or a list") \
            from None
    except msgspec.DecodeError as e:
        raise _invalid(src.path, e, 0, len(data)) from None
    if "traceEvents" not in top:
        keys = ", ".join(sorted(top)[:8]) or "none"
        raise ProfileError(src.path, f"no traceEvents: not a Kineto / Chrome trace (top-level keys: {keys})")
    for k, v in top.items():
        if k != "traceEvents":
            doc.meta[k] = ANY.decode(v)
    raw = bytes(top.pop("traceEvents"))
    del top
    try:
        yield _decode_events(raw, doc)
    except msgspec.DecodeError:
        raise ProfileError(src.path, "no traceEvents: `traceEvents` is not a list of events") from None
