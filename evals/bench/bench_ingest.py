"""Ingest benchmark: stepdoctor vs the parse floor vs HTA 0.5.0, on N ranks of ~M MB each, per vendor.

What one run measures (every measurement in a fresh child process, sampled by this process):

1. input, `--vendor kineto` (default): N copies of `trace_diff/control` enlarged by repeating its
   ProfilerSteps to ~M MB each (`evals.generate.kineto.repeat_kineto_trace`); `--vendor ascend`: an
   N-rank torch_npu text export from the scenario generator (`evals.generate.write_ascend_profile`, the
   sample's problems planted) with ~`--events` trace events per rank; `--vendor ascend-db`: that export
   converted into torch_npu's DB export (`evals.generate.to_db`: ascend_pytorch_profiler_{rank}.db and
   analysis.db per rank, what `export_type=db` writes). Cached in --data between runs
   (the manifest that says how they were built lives beside that directory, so it is not taken for a
   rank);
2. parse floor, per rank, one core: read the bytes (decompress if gz) + one typed msgspec decode of the
   whole document keeping only the fields stepdoctor stores (Kineto: `kineto.TraceDoc`; Ascend: every
   file of the rank read, trace_view.json decoded into events whose args keep only the fields the
   reader stores, the communication JSON files decoded plainly, the CSVs parsed by DuckDB; a DB export:
   every row of every table of its SQLite files fetched). Nothing else;
3. stepdoctor `read_rank` per file, one core: the reader alone (-> normalized columns in memory), and
   the same plus the rest of ingest's work for one rank, as the ingest processes do it: typing the
   columns (`RankTables.parts()`, in the parse worker) and inserting them (`store.writer.Writer`, in the
   ingest process) into a new database, checkpointed;
4. stepdoctor ingest: `open_profile(dir, IngestOptions(fork=True))` into an empty cache, as the CLI runs it (the
   measuring process, with one BLAS thread like the CLI, is forked for the ingest process; discovery,
   the parse workers, the rename), then `compute_breakdown` (the analysis HTA's numbers are compared with);
5. HTA 0.5.0 (Kineto only, when --hta-python points at an interpreter that imports `hta`):
   `TraceAnalysis(trace_dir)`, then the temporal breakdown (timed alone: load + temporal breakdown is
   what stepdoctor's ingest + breakdown is compared with), then idle (all ranks), kernel breakdown,
   comm/comp overlap and launch stats (all ranks), visualize=False — the analyses of
   kineto-format-and-hta.md §6.

RSS: the whole child process tree is sampled every 50 ms (psutil): the largest single process (and
which one: the measuring process, stepdoctor's ingest process or a parse worker) and the largest sum
over the tree are reported. CPU: user+system seconds of every process of the tree. Wall times are what
the child measured around the call, imports excluded (pandas included: stepdoctor's store no longer
imports it, the analyses do), so a loaded machine shows as wall >> CPU; the ratios are printed for both.

Readers: one parse path (msgspec and the standard library).

`--repeat R` runs R rounds of (2, 4, 5) in a row; 3 runs once. Wall times on these machines drift by
±15-40 % from one minute to the next, so a ratio is taken within a round, where the tools ran side by
side, and the median of the rounds' ratios is printed with each round's; the table shows the round whose
stepdoctor time is the median.

Run: .venv/bin/python -m stepdoctor.evals.bench.bench_ingest [--ranks 8] [--mb 90] [--gz] [--repeat 3]
     [--hta-python /tmp/hta-venv/bin/python]   (HTA lives in its own venv, never a project dependency)
     .venv/bin/python -m stepdoctor.evals.bench.bench_ingest --vendor ascend [--ranks 8] [--events 400000]
     .venv/bin/python -m stepdoctor.evals.bench.bench_ingest --vendor ascend-db [--ranks 8] [--events 100000]

The Ascend default, 400k trace events per rank, makes a ~98 MB trace_view.json (plus ~72 MB of other files)
per rank: the size of the Kineto ranks, where the memory target (peak RSS at most 1.5x the largest file)
means something; at 100k events the largest file is 29 MB, below what the interpreter with numpy takes.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import resource
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepdoctor.analysis import one_blas_thread
from stepdoctor.evals.bench import compile_bytecode
from stepdoctor.evals.bench.sampling import Sampled, run_sampled

DEFAULT_SRC = Path(__file__).resolve().parents[2].parent / "shared/data/kineto/trace_diff/control/control.json.gz"
DEFAULT_HTA = Path("/tmp/hta-venv/bin/python")

HTA_SCRIPT = r"""
import json, logging, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
ranks = ta.t.get_ranks()
ta.get_temporal_breakdown(visualize=False)
t_temporal = time.perf_counter()
ta.get_idle_time_breakdown(ranks=ranks, visualize=False)
ta.get_gpu_kernel_breakdown(visualize=False)
ta.get_comm_comp_overlap(visualize=False)
ta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
t2 = time.perf_counter()
print(json.dumps({"load_s": t1 - t0, "temporal_s": t_temporal - t1, "analyses_s": t2 - t1, "ranks": len(ranks)}))
"""


# --------------------------------------------------------------------------------------------------
# children (run as `python -m stepdoctor.evals.bench.bench_ingest --child KIND ...`)
# --------------------------------------------------------------------------------------------------

def _read_bytes(path: Path) -> bytes:
    with open(path, "rb") as f:
        magic = f.read(2)
        f.seek(0)
        if magic == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=f) as g:
                return g.read()
        return f.read()


def _ascend_floor_event() -> type:
    """The trace event struct of the Ascend floor: `ascend_text.Event` with `args` decoded into one struct
    holding every args field the reader stores (the union of its HostArgs, HardwareArgs and CommArgs), so
    the floor decodes what the reader must decode, and nothing more."""
    import msgspec

    from stepdoctor.analysis.ingest import ascend_text as at

    seen: dict[str, Any] = {}
    for st in (at.HostArgs, at.HardwareArgs, at.CommArgs):
        for f in msgspec.structs.fields(st):
            seen.setdefault(f.encode_name, (f"f{len(seen)}", Any, msgspec.field(default=None, name=f.encode_name)))
    args = msgspec.defstruct("FloorArgs", list(seen.values()), gc=False)
    ev = [(f.name, f.type, msgspec.field(default=f.default, name=f.encode_name))
          for f in msgspec.structs.fields(at.Event) if f.name != "args"]
    return msgspec.defstruct("FloorEvent", [*ev, ("args", args, msgspec.field(default_factory=args))], gc=False)


def child_floor(path: Path) -> dict[str, Any]:
    """Read + typed decode keeping only the stored fields; one core; the documents are kept (not freed).

    A Kineto file: the whole trace into `kineto.TraceDoc`. An Ascend rank directory: every file read;
    trace_view.json into events whose args hold only the fields the reader stores
    (`_ascend_floor_event`), communication*.json decoded plainly, each CSV parsed by DuckDB into numpy
    columns (the reader reads them with DuckDB too), every row of every table of a SQLite (.db) file
    fetched (the DB reader fetches rows with sqlite3 too).
    """
    import duckdb
    import msgspec

    from stepdoctor.analysis.ingest.ascend_text.csv_io import csv_header, csv_source
    from stepdoctor.analysis.ingest.kineto import TraceDoc

    ascend_events = msgspec.json.Decoder(list[_ascend_floor_event()])
    con = duckdb.connect()
    gc.disable()
    keep: list[Any] = []
    c0, t0 = time.process_time(), time.perf_counter()
    if path.is_dir():
        n_bytes = events = 0
        for f in _files(path):
            data = f.read_bytes()
            n_bytes += len(data)
            if f.name == "trace_view.json":
                keep.append(ascend_events.decode(data))
                events += len(keep[-1])
            elif f.suffix == ".json":
                keep.append(msgspec.json.decode(data))
            elif f.suffix == ".csv":  # as text columns, declared from the header (no sniffing), like the reader
                keep.append(con.execute(f"SELECT * FROM {csv_source(csv_header(f))}",
                                        [str(f)]).fetchnumpy())
            elif f.suffix == ".db":
                db = sqlite3.connect(f"file:{f}?mode=ro&immutable=1", uri=True)
                for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                    rows = db.execute(f'SELECT * FROM "{table}"').fetchall()
                    events += len(rows) if table in ("TASK", "PYTORCH_API", "CANN_API") else 0
                    keep.append(rows)
                db.close()
    else:
        data = _read_bytes(path)
        n_bytes = len(data)
        keep.append(msgspec.json.Decoder(TraceDoc).decode(data))
        events = len(keep[-1].traceEvents)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"wall_s": wall, "cpu_s": cpu, "events": events, "bytes": n_bytes,
            "maxrss_b": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def child_read(path: Path) -> dict[str, Any]:
    """read_rank alone; then what the rest of ingest does with one rank: `RankTables.parts()` (in the parse
    worker) and the insert of those columns by `store.writer.Writer` (in the ingest process), checkpointed."""
    from stepdoctor.analysis.ingest.discover import discover
    from stepdoctor.analysis.store.parse import reader
    from stepdoctor.analysis.store.writer import Writer, connect_for_writing

    src = discover(path).sources[0]  # a Kineto file, or a torch_npu text or DB export directory
    read_rank = reader(src.format)
    c0, t0 = time.process_time(), time.perf_counter()
    tables = read_rank(src)
    read_wall, read_cpu = time.perf_counter() - t0, time.process_time() - c0
    rss_read = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    c1, t1 = time.process_time(), time.perf_counter()
    parts = list(tables.parts())
    with tempfile.TemporaryDirectory() as d:
        con, rows = connect_for_writing(Path(d) / "one.duckdb")
        writer = Writer(con, rows)
        writer.claim(tables.rank)
        for name, cols in parts:  # as the ingest process inserts a rank's columns
            writer.data(tables.rank, name, cols)
        writer.done(tables.rank, list(tables.warnings), sorted(tables.capabilities))
        writer.finish([])
        con.close()
    part_wall, part_cpu = time.perf_counter() - t1, time.process_time() - c1
    return {"read_wall_s": read_wall, "read_cpu_s": read_cpu, "part_wall_s": part_wall, "part_cpu_s": part_cpu,
            "host_ops": tables.count("host_ops"), "device_ops": tables.count("device_ops"),
            "maxrss_read_b": rss_read, "maxrss_b": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def child_stepdoctor(trace_dir: Path, cache: Path) -> dict[str, Any]:
    from stepdoctor.analysis.build import open_profile
    from stepdoctor.analysis.metrics.breakdown import compute_breakdown
    from stepdoctor.analysis.store import IngestOptions

    phase_file = os.environ.get("BENCH_PHASE_FILE")

    def progress(done: int, n: int, _label: str) -> None:
        if done == n and phase_file:  # every rank stored: what follows is finishing and opening the database
            Path(phase_file).write_text("open")

    t0 = time.perf_counter()
    prof = open_profile(trace_dir, IngestOptions(cache_dir=cache, progress=progress, fork=True))  # as the CLI does
    t1 = time.perf_counter()
    rows = compute_breakdown(prof)
    t2 = time.perf_counter()
    return {"ingest_s": t1 - t0, "analyses_s": t2 - t1, "ranks": len(prof.info.ranks), "rows": len(rows),
            "steps": prof.info.steps}


# --------------------------------------------------------------------------------------------------
# the parent: build data, run children while sampling their process tree
# --------------------------------------------------------------------------------------------------

def build_traces(src: Path, out: Path, ranks: int, mb: float, gz: bool) -> list[Path]:
    """N rank files of ~mb MB (uncompressed), reused when a previous run made the same set."""
    from stepdoctor.evals.generate.kineto import repeat_kineto_trace

    manifest = out.parent / f"{out.name}.manifest.json"  # beside the traces: discovery would take it for a rank
    want = {"src": str(src), "ranks": ranks, "mb": mb, "gz": gz}
    suffix = ".json.gz" if gz else ".json"
    files = [out / f"rank{r}{suffix}" for r in range(ranks)]
    old_manifest = out / "manifest.json"  # where earlier versions of this script kept it
    if old_manifest.exists() and not manifest.exists():
        old_manifest.replace(manifest)
    if manifest.exists() and json.loads(manifest.read_text()) == want and all(f.exists() for f in files):
        return files
    shutil.rmtree(out, ignore_errors=True)
    manifest.unlink(missing_ok=True)
    out.mkdir(parents=True)
    for r, f in enumerate(files):
        repeat_kineto_trace(src, f, r, int(mb * 1e6), world_size=ranks)
    manifest.write_text(json.dumps(want))
    return files


def build_ascend(out: Path, ranks: int, events: int) -> list[Path]:
    """An N-rank torch_npu text export with ~`events` trace events per rank (the generator's planted
    problems of bench_issues), reused when a previous run made the same set; returns the rank dirs."""
    from stepdoctor.evals.bench.bench_issues import build

    manifest = out.parent / f"{out.name}.manifest.json"
    want = {"vendor": "ascend", "ranks": ranks, "events": events}
    if manifest.exists() and json.loads(manifest.read_text()) == want and out.is_dir():
        return sorted(out.glob("*_ascend_pt"))
    shutil.rmtree(out, ignore_errors=True)
    manifest.unlink(missing_ok=True)
    build(out, ranks, events)
    manifest.write_text(json.dumps(want))
    return sorted(out.glob("*_ascend_pt"))


def build_ascend_db(out: Path, ranks: int, events: int) -> list[Path]:
    """The `build_ascend` export (built or reused in its own folder) converted into the DB export in `out`,
    reused when a previous run made the same set; returns the rank dirs."""
    from stepdoctor.evals.generate.to_db import convert_profile

    manifest = out.parent / f"{out.name}.manifest.json"
    want = {"vendor": "ascend-db", "ranks": ranks, "events": events}
    if manifest.exists() and json.loads(manifest.read_text()) == want and out.is_dir():
        return sorted(out.glob("*_ascend_pt"))
    text = out.parent / f"stepdoctor-bench-ascend-{ranks}x{events}ev"
    build_ascend(text, ranks, events)
    shutil.rmtree(out, ignore_errors=True)
    manifest.unlink(missing_ok=True)
    convert_profile(text, out)
    manifest.write_text(json.dumps(want))
    return sorted(out.glob("*_ascend_pt"))


@dataclass
class Round:
    """One round of --repeat: the floor of every file, stepdoctor, HTA (Kineto, when installed), run in a row."""
    floor: list[Sampled]
    sd: Sampled
    hta: Sampled | None

    @property
    def sd_total(self) -> float:
        return self.sd.result["ingest_s"] + self.sd.result["analyses_s"]

    @property
    def floor_ratio(self) -> float:
        return self.sd.result["ingest_s"] / sum(x.result["wall_s"] for x in self.floor)

    @property
    def hta_ratio(self) -> float:
        assert self.hta is not None
        return (self.hta.result["load_s"] + self.hta.result["temporal_s"]) / self.sd_total


def _each(xs: Any) -> str:
    return ", ".join(f"{x:.2f}" for x in xs)


def _files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]


def _mb(b: float) -> str:
    return f"{b / 1e6:,.0f} MB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vendor", choices=["kineto", "ascend", "ascend-db"], default="kineto")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=float, default=90.0, help="Kineto: uncompressed size of each rank file, MB")
    ap.add_argument("--events", type=int, default=None,
                    help="Ascend: trace events per rank (default 400,000; the DB export 100,000)")
    ap.add_argument("--gz", action="store_true", help="Kineto: write the rank files gzip-compressed")
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC, help="the Kineto trace whose steps are repeated")
    ap.add_argument("--data", type=Path, default=None, help="where the rank files are built (kept)")
    ap.add_argument("--hta-python", type=Path, default=DEFAULT_HTA,
                    help="python of a venv with holistictraceanalysis==0.5.0 (skipped when absent)")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds of (floor, stepdoctor, HTA); the table shows the round of median stepdoctor "
                         "time, the ratios each round's and their median")
    ap.add_argument("--child", choices=["floor", "read", "stepdoctor"], help=argparse.SUPPRESS)
    ap.add_argument("paths", nargs="*", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.events is None:
        a.events = 100_000 if a.vendor == "ascend-db" else 400_000

    if a.child:
        fn = {"floor": lambda: child_floor(a.paths[0]), "read": lambda: child_read(a.paths[0]),
              "stepdoctor": lambda: child_stepdoctor(a.paths[0], a.paths[1])}[a.child]
        print(json.dumps(fn()))
        return 0

    compile_bytecode()  # stepdoctor as installed, like the pip-installed peer
    tmp = Path(tempfile.gettempdir())
    if a.vendor.startswith("ascend"):
        db = a.vendor == "ascend-db"
        data = a.data or tmp / f"stepdoctor-bench-{a.vendor}-{a.ranks}x{a.events}ev"
        print(f"building a {a.ranks}-rank Ascend {'DB' if db else 'text'} export, ~{a.events:,} trace events per "
              f"rank, in {data} ...", flush=True)
        files = (build_ascend_db if db else build_ascend)(data, a.ranks, a.events)
        sizes = [sum(f.stat().st_size for f in _files(d)) for d in files]
        raw_sizes = sizes
        largest = max(f.stat().st_size for d in files for f in _files(d))
    else:
        data = a.data or tmp / f"stepdoctor-bench-kineto-{a.ranks}x{a.mb:g}MB{'-gz' if a.gz else ''}"
        print(f"building {a.ranks} traces of ~{a.mb:g} MB from {a.src.name} in {data} ...", flush=True)
        files = build_traces(a.src, data, a.ranks, a.mb, a.gz)
        sizes = [f.stat().st_size for f in files]
        raw_sizes = sizes if not a.gz else [len(_read_bytes(f)) for f in files]
        largest = max(sizes)
    me = [sys.executable, "-m", "stepdoctor.evals.bench.bench_ingest", "--child"]
    env = dict(os.environ, PYTHONHASHSEED="0")

    hta_script = None
    if a.vendor == "kineto" and not a.no_hta and a.hta_python.exists():
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as s:
            s.write(HTA_SCRIPT)
        hta_script = s.name
    reads = [run_sampled([*me, "read", str(f)], env) for f in files]
    rounds: list[Round] = []
    try:
        for _ in range(a.repeat):  # the floor, stepdoctor and HTA side by side (see --repeat)
            floor = [run_sampled([*me, "floor", str(f)], env) for f in files]
            with tempfile.TemporaryDirectory(prefix="stepdoctor-bench-cache-") as cache:
                phase = Path(cache) / "phase"
                sd = run_sampled([*me, "stepdoctor", str(data), str(Path(cache) / "db")],
                                 dict(one_blas_thread(dict(env)), BENCH_PHASE_FILE=str(phase)), phase)
            hta = run_sampled([str(a.hta_python), hta_script, str(data)]) if hta_script else None
            rounds.append(Round(floor, sd, hta))
    finally:
        if hta_script:
            os.unlink(hta_script)
    mid = sorted(rounds, key=lambda r: r.sd_total)[(len(rounds) - 1) // 2]  # the round of median stepdoctor time
    floor, sd, hta = mid.floor, mid.sd, mid.hta

    floor_cpu = sum(x.result["cpu_s"] for x in floor)
    floor_wall = sum(x.result["wall_s"] for x in floor)
    read_cpu = sum(x.result["read_cpu_s"] for x in reads)
    read_wall = sum(x.result["read_wall_s"] for x in reads)
    part_cpu = sum(x.result["read_cpu_s"] + x.result["part_cpu_s"] for x in reads)
    print()
    print(f"{a.ranks} {a.vendor} ranks, {_mb(sum(raw_sizes))} ({_mb(sum(sizes))} on disk, largest file {_mb(largest)}), "
          f"{sum(x.result['events'] for x in floor):,} events; {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.1f}")
    print()
    hdr = f"{'measurement':44s} {'wall s':>8s} {'CPU s':>8s} {'max proc':>10s} {'tree':>10s}"
    print(hdr)
    print("-" * len(hdr))

    def row(name: str, wall: float, cpu: float, proc: int | None, tree: int | None) -> None:
        print(f"{name:44s} {wall:8.2f} {cpu:8.2f} {_mb(proc) if proc else '':>10s} {_mb(tree) if tree else '':>10s}")

    row("parse floor, Σ files, one core", floor_wall, floor_cpu, max(x.result["maxrss_b"] for x in floor), None)
    row("read_rank, Σ files, one core", read_wall, read_cpu, max(x.result["maxrss_read_b"] for x in reads), None)
    row("read_rank + parts + DuckDB insert, Σ files", sum(x.result["read_wall_s"] + x.result["part_wall_s"] for x in reads),
        part_cpu, max(x.result["maxrss_b"] for x in reads), None)
    row("stepdoctor ingest (open_profile)", sd.result["ingest_s"], sd.cpu_s, sd.peak_proc_b, sd.peak_tree_b)
    row("stepdoctor breakdown", sd.result["analyses_s"], 0.0, None, None)
    sd_total = sd.result["ingest_s"] + sd.result["analyses_s"]
    if hta is not None:
        row("HTA 0.5.0 load", hta.result["load_s"], hta.cpu_s, hta.peak_proc_b, hta.peak_tree_b)
        row("HTA 0.5.0 temporal breakdown", hta.result["temporal_s"], 0.0, None, None)
        row("HTA 0.5.0 all analyses (temporal included)", hta.result["analyses_s"], 0.0, None, None)
    print()
    print("ratios")
    print(f"  read_rank / floor (one core, CPU)              {read_cpu / floor_cpu:6.2f}   (wall {read_wall / floor_wall:.2f})")
    print(f"  read+parts+insert / floor (CPU)                {part_cpu / floor_cpu:6.2f}")
    print(f"  ingest wall / Σ floor wall ({min(a.ranks, os.cpu_count() or 1)} parse workers)  "
          f"{sd.result['ingest_s'] / floor_wall:6.2f}   (ingest CPU / floor CPU {sd.cpu_s / floor_cpu:.2f})")
    if len(rounds) > 1:
        print(f"    per round: {_each(r.floor_ratio for r in rounds)}; "
              f"median {statistics.median(r.floor_ratio for r in rounds):.2f}")
    print(f"  peak RSS / largest file: read_rank process     {max(x.result['maxrss_read_b'] for x in reads) / largest:6.2f}")
    print(f"  peak RSS / largest file: ingest, max process   {sd.peak_proc_b / largest:6.2f}   "
          f"(tree {sd.peak_tree_b / largest:.2f})")
    print("    by process: " + ", ".join(f"{k} {_mb(v)} ({v / largest:.2f})" for k, v in
                                      sorted(sd.peak_by_role.items(), key=lambda kv: -kv[1])))
    print("  ingest CPU by process (s): " + ", ".join(f"{k} {v:.2f}" for k, v in
                                                   sorted(sd.cpu_by_role.items(), key=lambda kv: -kv[1])))
    if hta is not None:
        hta_lt = hta.result["load_s"] + hta.result["temporal_s"]
        hta_total = hta.result["load_s"] + hta.result["analyses_s"]
        print(f"  HTA / stepdoctor, load + temporal breakdown    {hta_lt / sd_total:6.2f}   "
              f"(with all five analyses {hta_total / sd_total:.2f}; load only "
              f"{hta.result['load_s'] / sd.result['ingest_s']:.2f}; CPU {hta.cpu_s / sd.cpu_s:.2f})")
        if len(rounds) > 1:
            print(f"    per round: {_each(r.hta_ratio for r in rounds)}; "
                  f"median {statistics.median(r.hta_ratio for r in rounds):.2f}")
        print(f"  HTA peak RSS: max process {_mb(hta.peak_proc_b)}, tree {_mb(hta.peak_tree_b)}")
    elif a.vendor == "kineto":
        print("  HTA: not run (no interpreter with hta at --hta-python)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
