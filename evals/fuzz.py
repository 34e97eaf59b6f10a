"""A bounded fuzz campaign of every reader and of the hang-dump reader, on copies of real profiles.

Each case mutates one file of a real profile (bytes flipped, cut, zeroed, duplicated or deleted; junk, deep
nesting or huge numerals inserted; a gzip member re-compressed around the damage) and runs the command a user
would (`stepdoctor breakdown --format json`, `stepdoctor hang`) in a subprocess, with a time limit. Outcomes:

- kept: exit 0 (the damaged part lost, the rest answered);
- refused: exit 2 with one line on stderr and no traceback or exception name (nothing usable left);
- crash: anything else (an exit code other than 0 / 2, a traceback, an exception name as the message);
- hang: past the time limit.

The peak resident memory of every run is recorded. Not part of `make test` (it runs for minutes):

    .venv/bin/python -m stepdoctor.evals.fuzz --minutes 10 --out evals/bench/results-<date>-fuzz.md
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REAL = REPO.parent / "shared" / "data" / "real"
CLI = [str(REPO / ".venv" / "bin" / "stepdoctor")]
LIMIT_S = 60
# An exception's name where a message should be (`KeyError: 'x'`, `duckdb.InvalidInputException`).
_EXC_NAME = re.compile(r"\b[A-Z]\w*(Error|Exception)\b")


@dataclass(frozen=True)
class Target:
    """One reader's seed: a profile folder, the file in it that is mutated, the command that reads it."""

    reader: str
    profile: Path
    rel: str
    command: str = "breakdown"


def targets() -> list[Target]:
    gloo = REAL / "gpu-h100" / "gloo2_straggler" / "traces"
    text = REAL / "ascend" / "msinsight-pt-text-l0"
    db = REAL / "ascend" / "msinsight-pt-db-l0"
    hang = REPO / "tests" / "data" / "real_hang" / "stuck"
    out1 = "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/"
    single = REAL / "kineto" / "kineto-docs-h100-sync-before"
    found = [Target("kineto", gloo, sorted(p.name for p in gloo.iterdir())[-1]) if gloo.is_dir() else None,
             Target("kineto, one trace (damage may leave nothing)", single, "before_fix_trace.json"),
             Target("ascend text: trace_view.json", text, out1 + "trace_view.json"),
             Target("ascend text: kernel_details.csv", text, out1 + "kernel_details.csv"),
             Target("ascend text: step_trace_time.csv", text, out1 + "step_trace_time.csv"),
             Target("ascend text: communication.json", text, out1 + "communication.json"),
             Target("ascend text: profiler_info", text, "rank1_ascend_pt/profiler_info_1.json"),
             Target("ascend db", db, out1 + "ascend_pytorch_profiler_1.db"),
             Target("flight recorder dump", hang, "fr/gloo_fr_trace_rank_1", "hang"),
             Target("py-spy stacks", hang, "stacks/pyspy_rank_1.json", "hang")]
    return [t for t in found if t is not None and (t.profile / t.rel).is_file()]


# ---- mutations ---------------------------------------------------------------------------------------------

def _span(rng: random.Random, n: int) -> tuple[int, int]:
    a = rng.randrange(max(1, n))
    return a, min(n, a + rng.choice((1, 8, 64, 4096, 1 << 16)))


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    n = len(data)
    kind = rng.choice(("flip", "truncate", "zero", "duplicate", "delete", "junk", "nest", "numeral", "flips"))
    a, b = _span(rng, n)
    if kind == "flip":
        i = rng.randrange(max(1, n))
        return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:] if n else data, kind
    if kind == "flips":
        buf = bytearray(data)
        for _ in range(rng.randrange(2, 200)):
            if buf:
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        return bytes(buf), kind
    if kind == "truncate":
        return data[: rng.randrange(max(1, n))], kind
    if kind == "zero":
        return data[:a] + b"\0" * (b - a) + data[b:], kind
    if kind == "duplicate":
        return data[:b] + data[a:b] * rng.choice((1, 10, 1000)) + data[b:], kind
    if kind == "delete":
        return data[:a] + data[b:], kind
    if kind == "junk":
        junk = rng.choice((b"\xff\xfe\x00", b'"', b"]", b"}", b",,", b"NaN", b"\n", os.urandom(64)))
        return data[:a] + junk + data[a:], kind
    if kind == "nest":
        d = rng.choice((100, 10_000, 200_000))
        return data[:a] + b"[" * d + b"1" + b"]" * d + data[a:], kind
    return data[:a] + b"9" * rng.choice((20, 400, 100_000)) + data[a:], kind


def _mutated_file(raw: bytes, rng: random.Random) -> tuple[bytes, str]:
    """A mutation of the file's content: inside the gzip stream (then recompressed) or of the gzip bytes."""
    if raw[:2] == b"\x1f\x8b" and rng.random() < 0.7:
        out, kind = mutate(gzip.decompress(raw), rng)
        return gzip.compress(out, compresslevel=1), f"{kind} (inside gzip)"
    return mutate(raw, rng)


# ---- running -------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    kept: int = 0
    refused: int = 0
    crashes: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    peak_mb: float = 0.0
    seconds: list[float] = field(default_factory=list)


_WRAP = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
         "sys.stdout.write(r.stdout); sys.stderr.write(r.stderr); "
         "sys.stderr.write('\\n@@rss %d' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
         "sys.exit(r.returncode)")


def run_case(t: Target, work: Path, cache: Path) -> tuple[str, str, float, float]:
    """(outcome, detail, seconds, peak MB) of one run over the mutated copy `work`."""
    env = {**os.environ, "STEPDOCTOR_CACHE_DIR": str(cache)}
    args = [*CLI, t.command, str(work)] + (["--format", "json"] if t.command == "breakdown" else [])
    t0 = time.monotonic()
    try:
        r = subprocess.run([sys.executable, "-c", _WRAP, *args], capture_output=True, text=True, env=env,
                           timeout=LIMIT_S, errors="replace")
    except subprocess.TimeoutExpired:
        return "hang", f"past {LIMIT_S} s", time.monotonic() - t0, 0.0
    took = time.monotonic() - t0
    err, _, rss = r.stderr.rpartition("\n@@rss ")
    peak = int(rss or 0) / 1024
    lines = [x for x in err.splitlines() if x.strip()]
    if r.returncode == 0:
        return "kept", "", took, peak
    if r.returncode == 2 and len(lines) == 1 and "Traceback" not in err and not _EXC_NAME.search(lines[0]):
        return "refused", lines[0], took, peak
    return "crash", f"exit {r.returncode}: {(lines or [''])[-1][:300]}", took, peak


def campaign(minutes: float, seed: int) -> dict[str, Outcome]:
    rng = random.Random(seed)
    ts = targets()
    results = {t.reader: Outcome() for t in ts}
    deadline = time.monotonic() + minutes * 60
    with tempfile.TemporaryDirectory(prefix="stepdoctor-fuzz-") as tmp:
        copies = {}
        for t in ts:
            dest = Path(tmp) / f"p{len(copies)}"
            shutil.copytree(t.profile, dest)
            copies[t.reader] = dest
        i = 0
        while time.monotonic() < deadline:
            t = ts[i % len(ts)]
            i += 1
            work = copies[t.reader]
            path = work / t.rel
            original = (t.profile / t.rel).read_bytes()
            data, kind = _mutated_file(original, rng)
            path.write_bytes(data)
            outcome, detail, took, peak = run_case(t, work, Path(tmp) / "cache")
            path.write_bytes(original)
            o = results[t.reader]
            o.seconds.append(took)
            o.peak_mb = max(o.peak_mb, peak)
            if outcome == "kept":
                o.kept += 1
            elif outcome == "refused":
                o.refused += 1
            elif outcome == "hang":
                o.hangs.append(f"{kind}: {detail}")
            else:
                o.crashes.append(f"{kind}: {detail}")
            shutil.rmtree(Path(tmp) / "cache", ignore_errors=True)
    return results


def report(results: dict[str, Outcome], minutes: float, seed: int) -> str:
    lines = [f"# Fuzz campaign of the readers ({time.strftime('%Y-%m-%d')})", "",
             f"`python -m stepdoctor.evals.fuzz --minutes {minutes:g} --seed {seed}` on this project's 2-core "
             f"machine; each case mutates one file of a copy of a real profile and runs the user's command "
             f"(limit {LIMIT_S} s). kept = exit 0, refused = exit 2 with one line, crash = anything else.", "",
             "| reader | cases | kept | refused | crashes | hangs | slowest s | peak MB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, o in results.items():
        n = o.kept + o.refused + len(o.crashes) + len(o.hangs)
        lines.append(f"| {name} | {n} | {o.kept} | {o.refused} | {len(o.crashes)} | {len(o.hangs)} | "
                     f"{max(o.seconds, default=0):.1f} | {o.peak_mb:.0f} |")
    bad = [(name, x) for name, o in results.items() for x in o.crashes + o.hangs]
    lines += ["", "## Crashes and hangs", ""] + ([f"- {name}: {x}" for name, x in bad] or ["none"])
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    if not REAL.is_dir():
        print(f"fuzz: the real profiles are not at {REAL}", file=sys.stderr)
        return 2
    text = report(campaign(a.minutes, a.seed), a.minutes, a.seed)
    if a.out:
        a.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
