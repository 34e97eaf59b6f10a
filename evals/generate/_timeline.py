"""Vendor-neutral simulation of training steps on every rank, shared by the Ascend and Kineto writers.

A rank's step is a *program*: host instructions in issue order (launch a kernel, a blocking host call, an
idle gap, enqueue a collective, make the compute stream wait for the collectives, synchronize). `simulate`
runs the programs of all ranks step by step and records when every host call, kernel and collective ran.

Times are integer nanoseconds: the writers format µs with exactly 3 decimals, and sums of intervals
(step_trace_time.csv, op_statistic.csv) are exact, not float sums.

The model, which is what makes the planted problems show the way they do in real profiles:

- one host thread issues instructions in order; a launch costs `host_ns` of host time, its launch API call
  (`Node@launch` / `cudaLaunchKernel`) starts `api_offset_ns` into it;
- the compute stream runs kernels in launch order: a kernel starts at max(stream free + gap, launch API end +
  latency), so the device idles when the host falls behind (host-bound, GC, syncs);
- collectives run on a communication stream in issue order. A collective is *ready* on a rank when its
  host call was made and the compute kernels before it finished. A synchronized collective transfers from
  the moment the last rank is ready (the others wait) and ends at the same time on every rank, after the
  slowest rank's transfer. Rank-local collectives (p2p to ranks outside the profile) do not wait;
- `WaitComm` makes the compute stream wait for every collective issued so far (the optimizer needs the
  reduced gradients), `StepSync` makes the host wait for the compute stream (loss.item());
- the next step starts on every rank when the slowest rank finished the previous one, so per-rank steps
  stay aligned in absolute time (a faster rank idles between its ProfilerSteps).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

US = 1_000  # ns per µs
MS = 1_000_000  # ns per ms


# --------------------------------------------------------------------------------------------- program
@dataclass(slots=True)
class Op:
    """One device kernel: `key` names the logical op (the writers map it to vendor names)."""

    key: str
    kind: str  # matmul | attention | vector | aicpu | tiny | optimizer | memcpy | memset
    layer: int
    dur_ns: int
    phase: str  # fwd | bwd | opt | io
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Launch:
    """A host op that launches one kernel. `sync`: the host waits for the kernel right after the launch
    (aclrtSynchronizeStream / cudaStreamSynchronize); `blocking`: the launch call itself returns only when
    the kernel finished (a pageable memcpy)."""

    op: Op
    host_ns: int
    sync: bool = False
    blocking: bool = False
    thread: str = "main"


@dataclass(slots=True)
class Call:
    """A host-only call that blocks the host thread (dataloader, GC, op compile, malloc, SyncBatchNorm)."""

    name: str
    kind: str
    dur_ns: int
    thread: str = "main"
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Idle:
    """The host does nothing that is recorded (a GC pause on Kineto, an idle step tail)."""

    dur_ns: int


@dataclass(slots=True)
class Span:
    """Begin (`begin=True`) or end of an enclosing host range, e.g. `Optimizer.step#AdamW.step`."""

    name: str
    kind: str
    begin: bool
    thread: str = "main"


@dataclass(slots=True)
class Collective:
    """A collective enqueued on the communication stream; `transit_ns` is this rank's transfer time."""

    name: str
    kind: str  # allreduce | send
    nbytes: int
    transit_ns: int
    synced: bool = True
    host_ns: int = 30 * US
    thread: str = "main"
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class WaitComm:
    """The compute stream waits for every collective issued so far (host cost: a few µs)."""

    thread: str = "main"


@dataclass(slots=True)
class StepSync:
    """The host waits until the compute stream is idle (loss.item() at the end of a step)."""

    name: str = "sync"
    thread: str = "main"


Instruction = Launch | Call | Idle | Span | Collective | WaitComm | StepSync


# --------------------------------------------------------------------------------------------- records
@dataclass(slots=True)
class KernelRec:
    """When a kernel ran (`ts`, `dur`) and when its launch API (`api_ts`, `api_dur`) and, with a sync
    plant, the stream sync after it (`sync_ts`, `sync_dur`; -1 = none) ran on the host."""

    op: Op
    ts: int
    dur: int
    api_ts: int
    api_dur: int
    sync_ts: int = -1
    sync_dur: int = 0


@dataclass(slots=True)
class HostRec:
    """A host instruction as it ran; `kernel` is set for launches."""

    ins: Any
    ts: int
    dur: int
    kernel: KernelRec | None = None


@dataclass(slots=True)
class CommRec:
    """A collective as it ran on one rank: enqueued at `host_ts`, ready at `ready`, started on the stream
    at `ts`, transferring from `xfer_ts` for `transit`, finished at `end` (wait = elapse - transit)."""

    coll: Collective
    host_ts: int
    ready: int
    ts: int = 0
    xfer_ts: int = 0
    end: int = 0

    @property
    def transit(self) -> int:
        return self.coll.transit_ns


@dataclass(slots=True)
class SpanRec:
    name: str
    kind: str
    thread: str
    ts: int
    dur: int


@dataclass
class StepRec:
    """Everything that ran on one rank in one step; `start` / `end` bound the ProfilerStep."""

    step: int
    start: int
    end: int = 0
    host: list[HostRec] = field(default_factory=list)
    kernels: list[KernelRec] = field(default_factory=list)
    comms: list[CommRec] = field(default_factory=list)
    spans: list[SpanRec] = field(default_factory=list)


@dataclass(frozen=True)
class Timing:
    """Host/device timing constants of a vendor (ns)."""

    api_offset_ns: int = 5 * US  # launch API call starts this far into its host op
    api_dur_ns: int = 8 * US  # launch API call duration
    latency_ns: int = 20 * US  # launch API end -> earliest kernel start
    gap_ns: int = 2 * US  # idle between consecutive kernels on a stream
    sync_tail_ns: int = 2 * US  # a sync returns this long after the device finished
    wait_host_ns: int = 5 * US  # host cost of WaitComm
    step_gap_ns: int = 30 * US  # between consecutive ProfilerSteps
    tail_ns: int = 15 * US  # host work after the last instruction of a step


# -------------------------------------------------------------------------------------------- simulate
def _run_rank(
    prog: Iterable[Instruction], step: int, start: int, t: Timing
) -> Generator[list[CommRec], None, StepRec]:
    """Run one rank's step program; yields its pending collectives at every WaitComm."""
    rec = StepRec(step=step, start=start)
    host = start
    dev = start  # time from which the compute stream is free
    last_kernel_end = start
    pending: list[CommRec] = []
    open_spans: list[tuple[Span, int]] = []
    for ins in prog:
        if isinstance(ins, Launch):
            api_ts = host + t.api_offset_ns
            api_end = api_ts + t.api_dur_ns
            k_ts = max(dev, api_end + t.latency_ns)
            k_end = k_ts + ins.op.dur_ns
            dev = k_end + t.gap_ns
            last_kernel_end = k_end
            kr = KernelRec(ins.op, k_ts, ins.op.dur_ns, api_ts, t.api_dur_ns)
            host_end = host + ins.host_ns
            if ins.blocking:
                # A synchronous copy: the API call spans the copy, the op returns right after it.
                kr.api_dur = k_end + t.sync_tail_ns - api_ts
                host_end = max(host_end, api_ts + kr.api_dur + t.api_offset_ns)
            if ins.sync:
                kr.sync_ts = api_ts + kr.api_dur + US
                kr.sync_dur = max(k_end + t.sync_tail_ns - kr.sync_ts, US)
                host_end = max(host_end, kr.sync_ts + kr.sync_dur)
            rec.host.append(HostRec(ins, host, host_end - host, kr))
            rec.kernels.append(kr)
            host = host_end
        elif isinstance(ins, Call):
            rec.host.append(HostRec(ins, host, ins.dur_ns))
            host += ins.dur_ns
        elif isinstance(ins, Idle):
            host += ins.dur_ns
        elif isinstance(ins, Span):
            if ins.begin:
                open_spans.append((ins, host))
            else:
                begin, ts = open_spans.pop()
                rec.spans.append(SpanRec(begin.name, begin.kind, begin.thread, ts, host - ts))
        elif isinstance(ins, Collective):
            ready = max(host + ins.host_ns // 2, last_kernel_end)
            cr = CommRec(ins, host, ready)
            rec.comms.append(cr)
            pending.append(cr)
            rec.host.append(HostRec(ins, host, ins.host_ns))
            host += ins.host_ns
        elif isinstance(ins, WaitComm):
            yield pending
            if pending:
                dev = max(dev, max(c.end for c in pending) + t.gap_ns)
            pending = []
            rec.host.append(HostRec(ins, host, t.wait_host_ns))
            host += t.wait_host_ns
        elif isinstance(ins, StepSync):
            end = max(host + 10 * US, last_kernel_end + t.sync_tail_ns, dev - t.gap_ns + t.sync_tail_ns)
            rec.host.append(HostRec(ins, host, end - host))
            host = end
        else:  # pragma: no cover - programming error
            raise TypeError(f"unknown instruction {ins!r}")
    if pending:
        raise ValueError("collectives issued after the last WaitComm of a step")
    if open_spans:
        raise ValueError(f"unclosed spans: {[s.name for s, _ in open_spans]}")
    rec.end = max(host, dev - t.gap_ns) + t.tail_ns
    return rec


def _resolve(pendings: list[list[CommRec]], comm_free: list[int]) -> None:
    """Give every pending collective its stream start, transfer start and end, across ranks."""
    n = len(pendings)
    synced = [[c for c in p if c.coll.synced] for p in pendings]
    counts = {len(s) for s in synced}
    if len(counts) > 1:
        raise ValueError(f"ranks issue different numbers of synchronized collectives: {sorted(counts)}")
    pos = [0] * n

    def run_local(r: int) -> None:
        p = pendings[r]
        while pos[r] < len(p) and not p[pos[r]].coll.synced:
            c = p[pos[r]]
            c.ts = c.xfer_ts = max(c.ready, comm_free[r])
            c.end = c.ts + c.transit
            comm_free[r] = c.end
            pos[r] += 1

    for _ in range(counts.pop() if counts else 0):
        for r in range(n):
            run_local(r)
        cur = [pendings[r][pos[r]] for r in range(n)]
        starts = [max(c.ready, comm_free[r]) for r, c in enumerate(cur)]
        xfer = max(starts)
        end = xfer + max(c.transit for c in cur)
        for r, c in enumerate(cur):
            c.ts, c.xfer_ts, c.end = starts[r], xfer, end
            comm_free[r] = end
            pos[r] += 1
    for r in range(n):
        run_local(r)


def simulate(
    programs: list[list[list[Instruction]]], step_ids: list[int], t0: int, timing: Timing
) -> list[list[StepRec]]:
    """Run `programs[rank][step_index]` for every rank; returns `[rank][step_index]` records.

    Every rank's program of a step must contain the same number of `WaitComm` and of synchronized
    collectives (they are matched by order across ranks).
    """
    n = len(programs)
    out: list[list[StepRec]] = [[] for _ in range(n)]
    start = t0
    for si, step in enumerate(step_ids):
        gens = [_run_rank(programs[r][si], step, start, timing) for r in range(n)]
        comm_free = [start] * n
        results: list[StepRec | None] = [None] * n
        reqs: list[list[CommRec] | None] = [None] * n

        def advance(
            r: int, first: bool, gens: list = gens, results: list = results, reqs: list = reqs
        ) -> None:
            try:
                reqs[r] = next(gens[r]) if first else gens[r].send(None)
            except StopIteration as stop:
                results[r] = stop.value
                reqs[r] = None

        for r in range(n):
            advance(r, True)
        while any(q is not None for q in reqs):
            if any(q is None for q in reqs):
                raise ValueError("ranks have different numbers of WaitComm in a step")
            _resolve([q for q in reqs if q is not None], comm_free)
            for r in range(n):
                advance(r, False)
        steps = [res for res in results if res is not None]
        for r in range(n):
            out[r].append(steps[r])
        start = max(s.end for s in steps) + timing.step_gap_ns
    return out


# ------------------------------------------------------------------------------------------- intervals
def union(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge [start, end) intervals into a sorted list of disjoint ones."""
    merged: list[tuple[int, int]] = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if merged and s <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    return merged


def subtract(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """a minus b, both disjoint sorted lists."""
    out: list[tuple[int, int]] = []
    j = 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def clip(intervals: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """Intersect disjoint sorted intervals with [lo, hi)."""
    return [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]


def total(intervals: Iterable[tuple[int, int]]) -> int:
    return sum(e - s for s, e in intervals)


# ---------------------------------------------------------------------------------------------- format
def us_str(ns: int) -> str:
    """ns as a µs string with exactly 3 decimals ("1700000000015250.000"), exact for any magnitude."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def us_num(ns: int) -> float:
    """ns as a float µs value (shortest repr; exact for durations below 2**53 ns)."""
    return ns / 1000


# ------------------------------------------------------------------------------------------------ model
# The model both vendors run: a decoder-only transformer trained data-parallel. Durations are µs at bf16
# on the reference device; (key, kind, µs).
FWD_LAYER: tuple[tuple[str, str, float], ...] = (
    ("norm", "vector", 60),
    ("qkv", "matmul", 900),
    ("attn", "attention", 700),
    ("proj", "matmul", 300),
    ("add_norm", "vector", 80),
    ("up", "matmul", 1100),
    ("act", "vector", 120),
    ("down", "matmul", 550),
)
BWD_LAYER: tuple[tuple[str, str, float], ...] = (
    ("down_dx", "matmul", 550),
    ("down_dw", "matmul", 550),
    ("act_grad", "vector", 150),
    ("up_dx", "matmul", 1100),
    ("up_dw", "matmul", 1100),
    ("add_norm_grad", "vector", 100),
    ("proj_dx", "matmul", 300),
    ("proj_dw", "matmul", 300),
    ("attn_grad", "attention", 1500),
    ("qkv_dx", "matmul", 900),
    ("qkv_dw", "matmul", 900),
    ("norm_grad", "vector", 80),
)
HEAD_FWD: tuple[tuple[str, str, float], ...] = (("lm_head", "matmul", 1200), ("loss", "vector", 150))
HEAD_BWD: tuple[tuple[str, str, float], ...] = (
    ("loss_grad", "vector", 150),
    ("lm_head_dx", "matmul", 1200),
    ("lm_head_dw", "matmul", 1200),
)
EMBED_FWD: tuple[str, str, float] = ("embed", "vector", 120)
# Long enough to hide the last gradient bucket's transfer in a clean profile.
EMBED_BWD: tuple[str, str, float] = ("embed_grad", "vector", 2400)
OPTIMIZER: tuple[tuple[str, str, float], ...] = (("adamw", "optimizer", 900), ("adamw", "optimizer", 900))


# ---------------------------------------------------------------------------------------------- builder
class Builder:
    """Builds one rank's program for one step and applies the plants that change timing alike on every
    vendor: slow-rank compute factor, fp32 slowdown, host-bound scaling, sync-stream, jitter.

    `rng` is the rank's own `random.Random`, so the same seed gives the same bytes. `rank_speed` is a
    per-rank systematic factor (the caller draws it once per rank) that keeps clean ranks within ~1 %.
    """

    def __init__(self, rank: int, step: int, rng: Any, plants: list[Any], rank_speed: float = 1.0) -> None:
        self.rank = rank
        self.step = step
        self.rng = rng
        self.rank_speed = rank_speed
        self.plants = [p for p in plants if p.hits(rank, step)]
        self.ins: list[Instruction] = []
        self._compute_factor = 1.0
        for p in self.of("slow-rank"):
            if p.params.get("dimension", "compute") == "compute":
                self._compute_factor *= float(p.params["factor"])
        hb = self.first("host-bound")
        self._kernel_scale = float(hb.params["kernel_scale"]) if hb else 1.0
        self._host_us = float(hb.params["host_us"]) if hb else None
        fp32 = self.first("fp32-compute")
        self._fp32 = float(fp32.params["slowdown"]) if fp32 else 1.0
        self._sync = self.first("sync-stream") is not None
        self.freq_factor = 1.0  # set by a vendor (AI-core throttling with slowdown)

    def of(self, check: str) -> list[Any]:
        """The plants of `check` that apply to this rank and step."""
        return [p for p in self.plants if p.check == check]

    def first(self, check: str) -> Any | None:
        found = self.of(check)
        return found[0] if found else None

    def kernel_ns(self, kind: str, base_us: float) -> int:
        """A kernel's duration: base x jitter x the planted factors for its kind."""
        f = self.rank_speed * self.rng.uniform(0.99, 1.01)
        if kind not in ("memcpy", "memset"):
            f *= self._compute_factor * self._kernel_scale * self.freq_factor
        if kind in ("matmul", "attention"):
            f *= self._fp32
        return max(int(base_us * US * f), 1 * US)

    def host_ns(self, base_us: float = 35.0) -> int:
        us = self._host_us if self._host_us is not None else base_us
        return int(us * US * self.rng.uniform(0.9, 1.1))

    def launch(
        self,
        key: str,
        kind: str,
        base_us: float,
        layer: int,
        phase: str,
        *,
        thread: str = "main",
        meta: dict[str, Any] | None = None,
        host_us: float = 35.0,
        blocking: bool = False,
        dur_ns: int | None = None,
        sync: bool | None = None,
    ) -> Launch:
        op = Op(
            key,
            kind,
            layer,
            dur_ns if dur_ns is not None else self.kernel_ns(kind, base_us),
            phase,
            meta or {},
        )
        ins = Launch(
            op,
            self.host_ns(host_us),
            sync=self._sync if sync is None else sync,
            blocking=blocking,
            thread=thread,
        )
        self.ins.append(ins)
        return ins

    def call(self, name: str, kind: str, dur_ns: int, thread: str = "main", **meta: Any) -> None:
        self.ins.append(Call(name, kind, dur_ns, thread, meta))

    def idle(self, dur_ns: int) -> None:
        self.ins.append(Idle(dur_ns))

    def span(self, name: str, kind: str, begin: bool, thread: str = "main") -> None:
        self.ins.append(Span(name, kind, begin, thread))

    def collective(self, coll: Collective) -> None:
        self.ins.append(coll)

    def wait_comm(self, thread: str = "main") -> None:
        self.ins.append(WaitComm(thread))

    def step_sync(self, name: str = "sync", thread: str = "main") -> None:
        self.ins.append(StepSync(name, thread))

    # Where the host-side plants go, spread over the forward layers so they land mid-step.
    @staticmethod
    def spread(count: int, layers: int) -> list[int]:
        """How many of `count` items go after each of `layers` forward layers (front-loaded)."""
        base, extra = divmod(count, max(layers, 1))
        return [base + (1 if i < extra else 0) for i in range(max(layers, 1))]
