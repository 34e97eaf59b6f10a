"""trace_view.json -> `TraceColumns`: the streaming typed decode (pieces cut at event boundaries)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ...errors import ProfileError
from ...files import open_regular
from .common import ANALYSE_HINT
from .numbers import float64_part, int_array
from .trace_columns import TraceColumnBuilder
from .trace_events import (
    BLOCK_BYTES,
    CANN,
    COMM,
    COMM_FIELDS,
    FLOAT_FIELDS,
    FLOW_FIELDS,
    FLOW_PHASES,
    HARDWARE,
    HOST_FIELDS,
    HOST_KINDS,
    HW_FIELDS,
    INT64_FIELDS,
    MAX_WINDOW_BYTES,
    NULLABLE_INT_FIELDS,
    OVERLAP,
    OVERLAP_FIELDS,
    PIECE_BYTES,
    SKIP,
    START_FIELDS,
    STEP_RE,
    WS,
    Event,
    dur_ns,
    ts_ns,
)
from .trace_groups import TraceColumns

# Rows collected before they are converted into column parts (`_flush`): each conversion is a few calls per
# column whatever its length, so the rows of several pieces (~9 of 256 KB) are converted together; the rows
# hold only the events' fields (the decoded events of a piece are freed after it), their raw args a view
# of their piece's text (~2 MB of pieces stay referenced until the conversion).
FLUSH_ROWS = 1 << 13


class TraceParser(TraceColumnBuilder):
    """Decode one trace_view.json into `TraceColumns` (algorithm: the comment above `trace_events.BLOCK_BYTES`)."""

    def __init__(self, path: Path, block_bytes: int = BLOCK_BYTES) -> None:
        self.path = path
        self.block = block_bytes
        self.out = TraceColumns()
        self._pending: list[Event] = []
        # Names, categories, shapes repeat millions of times: keep one string object per distinct value.
        self._names: dict[str, str] = {}
        self._framework_cat: dict[tuple[str, str | None], str] = {}
        self._blobs: dict[bytes, str] = {}
        self._ids: dict[Any, Any] = {}     # pid / tid values
        self._parts: dict[str, list[Any]] = {}

    # -- decoding -------------------------------------------------------------------------------------

    def parse(self) -> TraceColumns:
        """The trace as columns: with the default block size read in pieces first (see PIECE_BYTES)."""
        if self.block == BLOCK_BYTES:
            try:
                self.out = TraceParser(self.path, PIECE_BYTES)._parse(8 * PIECE_BYTES)
                return self.out
            except Exception:  # the block-size read below decides (it reads or fails as a whole-file read)
                pass
        return self._parse(MAX_WINDOW_BYTES)

    def _parse(self, max_window: int) -> TraceColumns:
        dec = msgspec.json.Decoder(list[Event], float_hook=Decimal)
        with open_regular(self.path) as f:
            first = f.read(self.block)
            if not first:
                raise ProfileError(self.path, f"empty file (0 bytes); {ANALYSE_HINT}")
            head = first.lstrip(b"\xef\xbb\xbf" + WS)
            if not head:
                raise ProfileError(self.path, f"empty file (only whitespace); {ANALYSE_HINT}")
            if head[:1] == b"{":
                raise ProfileError(self.path, "is a JSON object, but the Ascend trace_view.json is a JSON array "
                                              "of events (is this a Kineto trace?)")
            if head[:1] != b"[":
                raise ProfileError(self.path, "not JSON: expected '[' at the start of the event array")
            offset = len(first) - len(head) + 1      # file offset of carry[0]
            del head
            more = f.read(self.block) if len(first) - offset < self.block // 2 else None
            if more == b"":
                # The whole file is one piece: decoded where it was read ('[' included), without copies of
                # the file (each costs as much as reading it).
                self._decode_tail(dec, first, offset, offset)
                self._finish()
                return self.out
            carry = bytearray(first)
            del carry[:offset], first
            read_done = more is not None  # the first round's read (below) was done above
            if more:
                carry += more
            del more
            eof = False
            widen = False
            while True:
                if read_done:
                    read_done = False
                elif not eof and (len(carry) < self.block // 2 or widen):
                    more = f.read(self.block)
                    if more:
                        carry += more
                    else:
                        eof = True
                if eof:
                    self._decode_tail(dec, carry, 0, offset)
                    break
                cut = _last_boundary(carry)
                if cut is None:
                    widen = True
                    if len(carry) > max_window:
                        raise ProfileError(self.path, f"invalid JSON near byte {offset}: no event boundary "
                                                      f"in {len(carry)} bytes")
                    continue
                end, nxt = cut
                # "[" + events + "]" in one copy
                piece = bytearray(end + 2)
                piece[0], piece[-1] = 0x5B, 0x5D
                with memoryview(carry) as mv:
                    piece[1:end + 1] = mv[:end]
                try:
                    events = dec.decode(piece)
                except msgspec.DecodeError as e:
                    # The cut fell inside a nested value/string (or the data is broken): widen the window.
                    widen = True
                    if len(carry) > max_window:
                        raise ProfileError(self.path, f"invalid JSON near byte {offset}: {e}") from None
                    continue
                widen = False
                self._consume(events)
                del events, piece
                offset += nxt
                del carry[:nxt]
        self._finish()
        return self.out

    def _decode_tail(self, dec: msgspec.json.Decoder, buf: bytes | bytearray, start: int,
                     offset: int) -> None:
        """Decode the rest of the event array, buf[start:] (file offset `offset`): '[' + the events + ']'.

        When buf[start - 1] is the array's '[' (a file read in one piece) the text is decoded in place,
        else from one copy.
        """
        end = len(buf)
        while end > start and buf[end - 1] in WS:
            end -= 1
        if end == start or buf[end - 1] != 0x5D:  # ']'
            raise ProfileError(self.path, f"truncated: the file ends at byte {offset + len(buf) - start} "
                                          f"inside the event array (no closing ']'); {ANALYSE_HINT}")
        if start and buf[start - 1] == 0x5B:  # '['
            text: Any = memoryview(buf)[start - 1:end]
        else:
            text = bytearray(end - start + 1)
            text[0] = 0x5B
            text[1:] = memoryview(buf)[start:end]
        try:
            events = dec.decode(text)
        except msgspec.DecodeError as e:
            msg = str(e)
            if "truncated" in msg.lower():
                raise ProfileError(self.path, f"truncated JSON after byte {offset} ({msg}); {ANALYSE_HINT}") \
                    from None
            raise ProfileError(self.path, f"invalid JSON after byte {offset}: {msg}") from None
        self._consume(events)

    # -- classification -------------------------------------------------------------------------------

    def _consume(self, events: list[Event]) -> None:
        """Route each event of one decoded piece. This is the hot loop: the common cases (X events of the
        communication, device and host processes) are handled inline. Communication and device tasks are
        only collected: their ts, dur, args and shared strings are converted a column at a time in `_flush`
        (as is the earliest start, min_ts). Reading the event attributes stays here: Python 3.11's
        specialized attribute reads cost less than C-level getters mapped over the events."""
        out = self.out
        # locals, not attribute reads, inside the loop
        kinds, names, ids = out.kinds, self._names, self._ids
        host_rows, hw_rows, comm_rows = out.host_rows, out.hw_rows, out.comm_rows
        overlap_rows, flow_rows = out.overlap_rows, out.flow_rows
        dropped_min = None   # earliest start of the X events that count for min_ts but are not kept
        out.n_events += len(events)
        for ev in events:
            ph = ev.ph
            if ph != "X":
                if ph in FLOW_PHASES:  # a flow is identified by (cat or name, id)
                    if ev.id is not None:
                        flow_rows.append((ev.cat or ev.name, ev.id, ph, ev.pid, ev.tid, ev.ts))
                else:
                    self._other(ev, ph)
                continue
            pid = ev.pid
            kind = kinds.get(pid)
            if kind == COMM:
                comm_rows.append((pid, ev.tid, ev.name, ev.ts, ev.dur, ev.args))
                continue
            if kind == HARDWARE:
                hw_rows.append((pid, ev.tid, ev.name, ev.ts, ev.dur, ev.args))
                continue
            if kind == OVERLAP:
                overlap_rows.append((ev.name, ev.ts, ev.dur))
                continue
            if kind is None:
                # process_name not seen yet: keep the event (detached from the input buffer) for later.
                ev.args = msgspec.Raw(bytes(ev.args))
                self._pending.append(ev)
                continue
            if kind == SKIP and (ev.cat is None or ev.cat.lower() != "gc"):
                continue
            ts = ev.ts
            # fast path for the usual "…250.125" string: dropping the dot gives exact ns
            if type(ts) is str and len(ts) > 4 and ts[-4] == ".":
                try:
                    start = int(ts.replace(".", "", 1))
                except ValueError:
                    start = ts_ns(ts)
            else:
                start = ts_ns(ts)
            if start is None:
                out.n_bad_ts += 1
                continue
            d = ev.dur
            dur = round(d * 1000) if type(d) is float else dur_ns(d)
            name = ev.name
            name = names.setdefault(name, name)
            cat = ev.cat
            if kind in HOST_KINDS:
                pid = ids.setdefault(pid, pid)
                tid = ids.setdefault(ev.tid, ev.tid)
                if cat is not None and cat.lower() == "gc":
                    host_rows.append((pid, tid, name, "gc", start, dur, None))
                    continue
                if kind == CANN:
                    category = "cann"
                else:
                    category = self._framework_cat.get((name, cat)) or self._categorize(name, cat)
                    if category == "user_annotation" and name.startswith("ProfilerStep#"):
                        m = STEP_RE.match(name)
                        if m:
                            out.steps.append((int(m.group(1)), start, dur))
                raw = ev.args
                host_rows.append((pid, tid, name, category, start, dur, raw if len(raw) > 2 else None))
            elif cat is not None and cat.lower() == "gc":  # GC is recognised by cat, whatever the process
                host_rows.append((ev.pid, ev.tid, name, "gc", start, dur, None))
            elif dropped_min is None or start < dropped_min:
                dropped_min = start
        self._lower_min_ts(dropped_min)
        if len(host_rows) + len(hw_rows) + len(comm_rows) + len(overlap_rows) + len(flow_rows) >= FLUSH_ROWS:
            self._flush()

    def _lower_min_ts(self, t: int | None) -> None:
        if t is not None and (self.out.min_ts is None or t < self.out.min_ts):
            self.out.min_ts = t

    def _flush(self) -> None:
        """Move the row buffers (FLUSH_ROWS rows or more, or the last ones) into column parts (int64 arrays
        for start/dur).

        Device, communication and overlap rows and flows come raw from `_consume` (ts, dur, args as
        decoded), converted here a column at a time; host, device and communication rows end with their raw
        `args`, decoded in one call per batch (`decode_args`).
        """
        out = self.out
        for rows, names, args in ((out.host_rows, HOST_FIELDS, self._host_arg_columns),
                                  (out.hw_rows, HW_FIELDS, self._hw_arg_columns),
                                  (out.comm_rows, COMM_FIELDS, self._comm_arg_columns),
                                  (out.overlap_rows, OVERLAP_FIELDS, None),
                                  (out.flow_rows, FLOW_FIELDS, None)):
            if not rows:
                continue
            cols: list[Sequence[Any]] = list(zip(*rows, strict=True))
            rows.clear()
            if names is FLOW_FIELDS:
                cols = self._flow_columns(cols)
            elif names is not HOST_FIELDS:
                cols = self._timed_columns(cols)
            if not cols:
                continue
            if args is not None:
                cols = cols[:-1] + args(cols[-1], cols[1])
            self.add_parts(names, cols)

    def add_parts(self, names: tuple[str, ...], cols: Sequence[Sequence[Any]]) -> None:
        """Append one group's columns: int64 arrays for the start / dur fields, masked int64 arrays for the
        nullable int fields (the list kept where a value is beyond int64: `nullable_int_parts` then gives
        the list of all values), float64 for bandwidth; the earliest start lowers out.min_ts.

        Converted here, a part at a time, rather than when the parts are joined: a Python int or float
        per value of the communication columns held to the end of the trace costs ~30 MB on a rank of
        250k HCCL tasks."""
        parts = self._parts
        for fname, col in zip(names, cols, strict=True):
            if fname in INT64_FIELDS:
                col = np.asarray(col, dtype=np.int64)
                if fname in START_FIELDS:
                    self._lower_min_ts(int(col.min()))
            elif fname in NULLABLE_INT_FIELDS and isinstance(col, list):
                arr = int_array(col)
                if arr is not None:
                    col = arr
            elif fname in FLOAT_FIELDS:
                col = float64_part(col)
            parts.setdefault(fname, []).append(col)


def _last_boundary(buf: bytes) -> tuple[int, int] | None:
    """(end of the last complete top-level candidate element, start of the next) or None.

    A candidate is `}` + whitespace + `,` + whitespace + `{`; whether it really is top level is decided by
    decoding (see TraceParser.parse).
    """
    n = len(buf)
    end = n
    while True:
        k = buf.rfind(b"}", 0, end)
        if k < 0:
            return None
        j = k + 1
        while j < n and buf[j] in WS:
            j += 1
        if j < n and buf[j] == 0x2C:  # ','
            j += 1
            while j < n and buf[j] in WS:
                j += 1
            if j < n and buf[j] == 0x7B:  # '{'
                return k + 1, j
        end = k
