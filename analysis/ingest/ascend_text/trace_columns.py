"""The parser's steps that build `TraceColumns` from decoded events (`TraceColumnBuilder`, the base of
`TraceParser`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from .numbers import float64_part, nullable_int_parts
from .trace_events import (
    ANY,
    COMM_ARGS,
    FLOAT_FIELDS,
    FLOW_PHASES,
    HOST_ARGS,
    HW_ARGS,
    INT64_FIELDS,
    NO_HOST_ARGS,
    NULLABLE_INT_FIELDS,
    PROCESS_KINDS,
    SKIP,
    STR_OR_NONE,
    CommArgs,
    Event,
    HardwareArgs,
    as_float,
    as_int,
    decode_args,
    durs_ns,
    floats,
    ints,
    message_bytes,
    starts_ns,
    text_or_none,
    ts_ns,
)
from .trace_groups import GROUPS, FreqSamples, group_of


class TraceColumnBuilder:
    """The column-building half of `TraceParser`: labels, args and flows of the decoded events -> `TraceColumns`."""

    def _timed_columns(self, cols: list[Sequence[Any]]) -> list[Sequence[Any]]:
        """The columns of collected device / communication tasks, (pid, tid, name, ts, dur, args), or overlap
        intervals, (name, ts, dur), with ts and dur in ns: what `_consume` does per event for host events
        (events without a readable ts dropped and counted, shared pid / tid / name objects). [] when none
        is left."""
        i_ts = 3 if len(cols) == 6 else 1   # tasks: (pid, tid, name, ts, dur, args); overlap: (name, ts, dur)
        start = starts_ns(cols[i_ts])
        if type(start) is list and None in start:
            keep = [s is not None for s in start]
            self.out.n_bad_ts += len(keep) - sum(keep)
            cols = [list(itertools.compress(c, keep)) for c in cols]
            start = list(itertools.compress(start, keep))
            if not start:
                return []
        ids, names = self._ids, self._names
        dur = durs_ns(cols[i_ts + 1])
        if i_ts == 1:
            return [list(map(names.setdefault, cols[0], cols[0])), start, dur]
        pid, tid, name, _, _, args = cols
        return [list(map(ids.setdefault, pid, pid)), list(map(ids.setdefault, tid, tid)),
                list(map(names.setdefault, name, name)), start, dur, args]

    def _flow_columns(self, cols: list[Sequence[Any]]) -> list[Sequence[Any]]:
        """(cat, id, ph, pid, tid, ts ns) columns of collected flow events (cat, id, ph, pid, tid, ts):
        flows without a readable ts are dropped (`ts_ns`); shared cat / pid / tid objects. [] when none."""
        cat, flow_id, ph, pid, tid, ts = cols
        start = starts_ns(ts)  # ts_ns of each (the same fast path, then the same parse)
        if type(start) is list and None in start:
            keep = [s is not None for s in start]
            cat, flow_id, ph, pid, tid, start = (list(itertools.compress(c, keep))
                                                 for c in (cat, flow_id, ph, pid, tid, start))
            if not start:
                return []
        ids, names = self._ids, self._names
        return [list(map(names.setdefault, cat, cat)), flow_id, ph, list(map(ids.setdefault, pid, pid)),
                list(map(ids.setdefault, tid, tid)), start]

    def _categorize(self, name: str, cat: str | None) -> str:
        """host_ops.category of a framework event (cached per (name, cat))."""
        if name.startswith("ProfilerStep#"):
            category = "user_annotation"
        elif "dataloader" in name.lower():
            category = "dataloader"
        elif cat is None or cat == "cpu_op":
            category = "cpu_op"
        elif cat in ("python_function", "user_annotation"):
            category = cat
        else:
            category = "other"
        self._framework_cat[(name, cat)] = category
        return category

    def _label(self, v: Any) -> str | None:
        """A short repeated arg value (task type, transport ...) as one shared str."""
        if type(v) is str:
            return self._names.setdefault(v, v) if v else None
        return text_or_none(v)

    def _blob(self, raw: msgspec.Raw) -> str | None:
        """Raw JSON text of an arg (Input Dims ...) as one shared str per distinct value."""
        if not len(raw):
            return None
        b = bytes(raw)
        s = self._blobs.get(b)
        if s is None:
            s = self._blobs[b] = b.decode("utf-8", "replace")
        return s

    def _labels(self, values: Sequence[Any]) -> list[str | None]:
        """`_label` of every value of a column."""
        if STR_OR_NONE.issuperset(map(type, values)):
            share = self._names.setdefault
            table = {v: share(v, v) if v else None for v in set(values)}
            return list(map(table.__getitem__, values))
        return [self._label(v) for v in values]

    def _host_arg_columns(self, raws: Sequence[Any], tids: Sequence[Any]) -> list[Sequence[Any]]:
        """(call stack, input dims JSON, input types JSON, connection id) columns from the raw args (None
        where the event has no args); `tids` is unused (the signature of the other `_*_arg_columns`)."""
        n = len(raws)
        stack: list[str | None] = [None] * n
        dims: list[str | None] = [None] * n
        types: list[str | None] = [None] * n
        conn: list[int | None] = [None] * n
        idx = [i for i, r in enumerate(raws) if r is not None]
        if idx:
            blob = self._blob
            args = decode_args(HOST_ARGS, [raws[i] for i in idx], NO_HOST_ARGS)
            for i, a in zip(idx, args, strict=True):
                stack[i], dims[i], types[i], conn[i] = \
                    self.call_stack(a.call_stack, a.call_stack2), blob(a.input_dims), blob(a.input_type), \
                    as_int(a.connection_id)
        return [stack, dims, types, conn]

    def call_stack(self, stack: Any, stack2: Any) -> str | None:
        """A host event's call stack text ("Call stack", else "Call Stack"); notes that the trace has one."""
        s = text_or_none(stack if stack is not None else stack2)
        if s is not None:
            self.out.with_stack = True
        return s

    def _hw_arg_columns(self, raws: Sequence[Any], tids: Sequence[Any]) -> list[Sequence[Any]]:
        """(task type, stream, task id, connection id) columns of Ascend Hardware tasks; the stream is Stream
        Id, else Physic Stream Id, else the tid."""
        args = decode_args(HW_ARGS, raws, HardwareArgs())
        # one comprehension per field: attribute reads in bytecode beat C-level getters / astuple here
        return self.hw_columns([a.task_type for a in args], [a.stream_id for a in args],
                               [a.physic_stream_id for a in args], [a.task_id for a in args],
                               [a.connection_id for a in args], tids)

    def hw_columns(self, task_type: list[Any], stream_id: list[Any], physic: list[Any], task_id: list[Any],
                   conn: list[Any], tids: Sequence[Any]) -> list[Sequence[Any]]:
        """The Hardware arg columns from the args' values as decoded."""
        stream = ints(stream_id)
        if None in stream:
            phys = ints(physic)
            stream = [s if s is not None else p if p is not None else as_int(t)
                      for s, p, t in zip(stream, phys, tids, strict=True)]
        return [self._labels(task_type), stream, ints(task_id), ints(conn)]

    def _comm_arg_columns(self, raws: Sequence[Any], tids: Sequence[Any]) -> list[Sequence[Any]]:
        """(size, transport, link, src, dst, bandwidth, connection id, message bytes) columns of Communication
        events; message bytes = count x element size (hcom_* ops)."""
        args = decode_args(COMM_ARGS, raws, CommArgs())
        return self.comm_columns([a.size for a in args], [a.transport for a in args], [a.link for a in args],
                                 [a.src for a in args], [a.dst for a in args], [a.bandwidth for a in args],
                                 [a.connection_id for a in args], [a.data_type for a in args],
                                 [a.count for a in args])

    def comm_columns(self, size: list[Any], transport: list[Any], link: list[Any], src: list[Any],
                     dst: list[Any], bw: list[Any], conn: list[Any], data_type: list[Any],
                     count: list[Any]) -> list[Sequence[Any]]:
        """The Communication arg columns from the args' values as decoded."""
        return [ints(size), self._labels(transport), self._labels(link), ints(src), ints(dst), floats(bw),
                ints(conn), message_bytes(ints(count), data_type)]

    def _other(self, ev: Event, ph: str) -> None:
        out = self.out
        if ph == "M":
            self._on_meta(ev)
        elif ph in FLOW_PHASES:  # (taken inline by `_consume`)
            if ev.id is not None:
                cat = ev.cat or ev.name
                out.flow_rows.append((cat, ev.id, ph, ev.pid, ev.tid, ev.ts))
        elif ph == "C":
            if ev.name == "AI Core Freq":
                self._on_freq(ev)
        elif ph not in ("i", "I", "R"):
            out.n_unsupported_phase += 1

    def _on_meta(self, ev: Event) -> None:
        out = self.out
        try:
            args = ANY.decode(ev.args)
        except msgspec.DecodeError:
            return
        if not isinstance(args, dict):
            return
        if ev.name == "process_name":
            pname = str(args.get("name", ""))
            out.process_names[ev.pid] = pname
            out.kinds[ev.pid] = PROCESS_KINDS.get(pname.strip().lower(), SKIP)
        elif ev.name == "process_labels":
            out.process_labels[ev.pid] = str(args.get("labels", ""))
        elif ev.name == "thread_name":
            out.thread_names[(ev.pid, ev.tid)] = str(args.get("name", ""))

    def _on_freq(self, ev: Event) -> None:
        t = ts_ns(ev.ts)
        try:
            args = ANY.decode(ev.args)
        except msgspec.DecodeError:
            return
        if t is None or not isinstance(args, dict):
            return
        mhz = as_float(args.get("MHz"))
        if mhz is None:  # other spellings: take the first numeric value
            mhz = next((x for x in map(as_float, args.values()) if x is not None), None)
        if mhz is not None:
            self.out.freq_ts.append(t)
            self.out.freq_mhz.append(mhz)

    def _finish(self) -> None:
        """Classify events whose process_name came after them, then transpose the row buffers."""
        pending, self._pending = self._pending, []
        out = self.out
        if pending:
            unknown = {ev.pid for ev in pending if ev.pid not in out.kinds}
            for pid in unknown:
                out.kinds[pid] = SKIP  # no process_name at all: only GC events (by cat) are kept
            out.n_unclassified += sum(1 for ev in pending if ev.pid in unknown
                                      and (ev.cat is None or ev.cat.lower() != "gc"))
            out.n_events -= len(pending)  # _consume counts them again
            self._consume(pending)
        self._flush()
        joined: dict[str, Any] = {}
        for fname in list(self._parts):
            parts = self._parts.pop(fname)  # (each field's pieces go as it is joined: not all twice at once)
            if fname in INT64_FIELDS:
                joined[fname] = parts[0] if len(parts) == 1 else np.concatenate(parts)
            elif fname in NULLABLE_INT_FIELDS:
                joined[fname] = nullable_int_parts(parts)
            elif fname in FLOAT_FIELDS:
                joined[fname] = np.concatenate([float64_part(p) for p in parts])
            else:
                joined[fname] = parts[0] if len(parts) == 1 else list(itertools.chain.from_iterable(parts))
        for group, (cls, names) in GROUPS.items():
            for fname in names:
                if fname not in joined:
                    joined[fname] = (np.empty(0, dtype=np.int64) if fname in INT64_FIELDS
                                     else nullable_int_parts([]) if fname in NULLABLE_INT_FIELDS
                                     else np.empty(0, dtype=np.float64) if fname in FLOAT_FIELDS else ())
            setattr(out, group, group_of(joined, names, cls))
        out.freq = FreqSamples(out.freq_ts, out.freq_mhz)
        out.freq_ts, out.freq_mhz = [], []
