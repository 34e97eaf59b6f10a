"""What one trace_view.json becomes (`TraceColumns`): one struct-of-arrays group per event kind, each
freed (`release`) once the phase that turns it into tables has run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from .trace_events import COMM_FIELDS, FLOW_FIELDS, HOST_FIELDS, HW_FIELDS, OVERLAP_FIELDS

# Start/dur columns are int64 ns arrays; the nullable communication ints masked int64 arrays (a list of the
# values when one is beyond int64), bandwidth float64 (NaN: none); the other columns lists of shared str /
# ids. Within a group every column has one value per event.


@dataclass(frozen=True, slots=True)
class HostEvents:
    """Python / MindSpore framework events, CANN API calls and GC: `cat` is host_ops.category."""

    pid: Sequence[Any]
    tid: Sequence[Any]
    name: Sequence[str]
    cat: Sequence[str]
    start: Sequence[int]
    dur: Sequence[int]
    stack: Sequence[str | None]
    dims: Sequence[str | None]
    types: Sequence[str | None]
    conn: Sequence[int | None]


@dataclass(frozen=True, slots=True)
class HardwareTasks:
    """Ascend Hardware tasks (the device's kernels, copies and waits)."""

    pid: Sequence[Any]
    tid: Sequence[Any]
    name: Sequence[str]
    start: Sequence[int]
    dur: Sequence[int]
    task_type: Sequence[str | None]
    stream: Sequence[int | None]
    task_id: Sequence[int | None]
    conn: Sequence[int | None]


@dataclass(frozen=True, slots=True)
class CommEvents:
    """The Communication / HCCL process: hcom_* ops and their sub-tasks (told apart by thread later)."""

    pid: Sequence[Any]
    tid: Sequence[Any]
    name: Sequence[str]
    start: Sequence[int]
    dur: Sequence[int]
    size: Sequence[int | None]
    transport: Sequence[str | None]
    link: Sequence[str | None]
    src: Sequence[int | None]
    dst: Sequence[int | None]
    bw: Sequence[float]
    conn: Sequence[int | None]
    msg_bytes: Sequence[int | None]


@dataclass(frozen=True, slots=True)
class OverlapLanes:
    """Overlap Analysis intervals (name = Computing / Communication / Communication(Not Overlapped) / Free)."""

    name: Sequence[str]
    start: Sequence[int]
    dur: Sequence[int]


@dataclass(frozen=True, slots=True)
class FlowEvents:
    """Flow endpoints (s/f/t); a flow is identified by (cat or name, id)."""

    cat: Sequence[str]
    id: Sequence[Any]
    ph: Sequence[str]
    pid: Sequence[Any]
    tid: Sequence[Any]
    ts: Sequence[int]


@dataclass(frozen=True, slots=True)
class FreqSamples:
    """AI Core Freq counter samples, in trace order."""

    ts: list[int]
    mhz: list[float]


# group attribute of TraceColumns -> (its type, the parser's part names: prefix + the group's field name)
GROUPS: dict[str, tuple[type, tuple[str, ...]]] = {
    "host": (HostEvents, HOST_FIELDS), "hardware": (HardwareTasks, HW_FIELDS), "comm": (CommEvents, COMM_FIELDS),
    "overlap": (OverlapLanes, OVERLAP_FIELDS), "flows": (FlowEvents, FLOW_FIELDS),
}


def group_of(parts: dict[str, Any], names: tuple[str, ...], cls: type) -> Any:
    """The group `cls` of the joined part columns `parts` (taken out of it) named `names`."""
    return cls(**{n[n.index("_") + 1:]: parts.pop(n) for n in names})


@dataclass
class TraceColumns:
    """Everything kept from trace_view.json: the event groups, steps, process / thread names and counts.

    While parsing, each event is one tuple in `*_rows` (one append per event is much cheaper than one per
    field; device, communication and overlap events and flows as decoded, host events converted); after
    each decoded piece the rows are transposed and converted into compact column parts (int64 arrays,
    lists of shared strings), which `TraceParser._finish` joins into the groups.
    """

    host: HostEvents = field(default=None)        # type: ignore[assignment]  # (set by _finish)
    hardware: HardwareTasks = field(default=None)  # type: ignore[assignment]
    comm: CommEvents = field(default=None)         # type: ignore[assignment]
    overlap: OverlapLanes = field(default=None)    # type: ignore[assignment]
    flows: FlowEvents = field(default=None)        # type: ignore[assignment]
    freq: FreqSamples = field(default=None)        # type: ignore[assignment]
    # AI Core Freq samples while parsing (-> freq)
    freq_ts: list[int] = field(default_factory=list)
    freq_mhz: list[float] = field(default_factory=list)
    # ProfilerStep#N -> (N, start_ns, dur_ns)
    steps: list[tuple[int, int, int]] = field(default_factory=list)
    # metadata
    process_names: dict[Any, str] = field(default_factory=dict)
    process_labels: dict[Any, str] = field(default_factory=dict)
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)
    kinds: dict[Any, int] = field(default_factory=dict)
    n_events: int = 0
    n_unclassified: int = 0          # X events on pids that never got a process_name
    n_unsupported_phase: int = 0     # B/E pairs and other phases this reader does not use
    n_bad_ts: int = 0
    min_ts: int | None = None
    with_stack: bool = False
    # row buffers of the events classified since the last conversion (see TraceParser._flush, FLUSH_ROWS)
    host_rows: list[tuple[Any, ...]] = field(default_factory=list)
    hw_rows: list[tuple[Any, ...]] = field(default_factory=list)
    comm_rows: list[tuple[Any, ...]] = field(default_factory=list)
    overlap_rows: list[tuple[Any, ...]] = field(default_factory=list)
    flow_rows: list[tuple[Any, ...]] = field(default_factory=list)


class _Released:
    """A trace group after its last reader ran (`release`): any use of it is a bug."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("a released trace group was read")


_RELEASED = _Released()


def release(tr: TraceColumns, *groups: str) -> None:
    """Drop these groups of the trace (`host`, `hardware`, `comm`, `flows`) once the phase that turns them into
    tables or frames has run: ~37 MB of columns for a rank of 400k events would otherwise sit under every
    later phase."""
    names = {f.name for f in fields(tr)}
    for g in groups:
        if g not in names:
            raise KeyError(g)
        setattr(tr, g, _RELEASED)
