"""How much an assistant reads from each MCP tool: text answer and structured content, bytes and ~tokens.

Starts the real server over stdio (`stepdoctor mcp --root <data>`, the way an IDE host starts it) with the
MCP client, loads each profile and calls every tool with its defaults (the arguments an assistant passes
first), and prints one Markdown table. Sizes: the text content's UTF-8 bytes; the structured content as
compact JSON (what a host forwards to the model when it forwards it); tokens ~ bytes / 4 (English and JSON
average, good to ~20%). `tools/list` is measured once, with and without output schemas.

    .venv/bin/python -m stepdoctor.evals.answer_sizes [--data ../shared/data] [profile ...]

A profile is a path under --data; the default set is four real profiles of different kinds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data"
DEFAULT_PROFILES = (
    "real/gpu-h100/gloo2_straggler",          # Kineto, 2 ranks over gloo, a straggler
    "real/gpu-h100/attn_math",                # Kineto, one H100, many kernels
    "real/ascend/msinsight-pt-text-l1",       # torch_npu text export, 2 ranks, Level1
    "real/kineto/tracelens-mi300-resnet-actckpt",  # ROCm, rank 0 of 8
)
COMPARE_BASE = "real/gpu-h100/clean"          # compare_runs: the target is the profile itself
CODE_FILE = "real/gpu-h100/clean/train.py"    # suggest_edit reads (never writes over MCP)
QUERY = "SELECT rank, category, count(*) AS n, sum(dur_ns) / 1e6 AS ms FROM device_ops GROUP BY ALL ORDER BY 1, 2"


@dataclass
class Size:
    profile: str
    tool: str
    text: int
    structured: int
    error: str = ""

    @property
    def ratio(self) -> float | None:
        return self.structured / self.text if self.text else None


def tokens(n: int) -> int:
    return round(n / 4)


def _jsonlen(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())


def _command() -> list[str]:
    script = Path(sys.executable).parent / "stepdoctor"
    return [str(script)] if script.exists() else [sys.executable, "-m", "stepdoctor"]


def _calls(pid: str, data: Path, issues: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(tool, arguments) for every tool but load_profile, with the defaults an assistant starts from."""
    first = (issues.get("findings") or [None])[0]
    fix = (first or {}).get("fixes", [None])[0] if first else None
    calls: list[tuple[str, dict[str, Any]]] = [
        ("list_issues", {"profile_id": pid}),
        ("breakdown", {"profile_id": pid}),
        ("slow_ranks", {"profile_id": pid}),
        ("slow_links", {"profile_id": pid}),
        ("top_kernels", {"profile_id": pid}),
        ("env_audit", {"profile_id": pid}),
        ("query", {"profile_id": pid, "sql": QUERY}),
        ("compare_runs", {"base": str(data / COMPARE_BASE), "target": pid}),
        ("explain", {"id": first["check"], "profile_id": pid, "finding": 1} if first else {"id": "slow-rank"}),
        ("list_fixes", {}),
    ]
    if fix:
        calls.append(("suggest_edit", {"code_path": str(data / CODE_FILE), "fix": fix}))
    return calls


async def measure(data: Path, profiles: list[str], cache: Path) -> tuple[list[Size], dict[str, int]]:
    from mcp import Client, StdioServerParameters

    env = {k: os.environ[k] for k in ("HOME", "PATH", "LANG", "TMPDIR") if k in os.environ}
    env["STEPDOCTOR_CACHE_DIR"] = str(cache)
    cmd = _command()
    sizes: list[Size] = []
    lists: dict[str, int] = {}
    for schemas in (False, True):
        params = StdioServerParameters(command=cmd[0], args=[*cmd[1:], "mcp", "--root", str(data),
                                                              *(["--output-schemas"] if schemas else [])],
                                       env=env, cwd=str(REPO))
        async with Client(params, raise_exceptions=True, read_timeout_seconds=600) as c:
            tl = await c.list_tools()
            lists["with output schemas" if schemas else "default"] = _jsonlen(tl.model_dump(mode="json",
                                                                                           exclude_none=True))
            if schemas:
                continue
            for rel in profiles:
                r = await c.call_tool("load_profile", {"path": str(data / rel)})
                sizes.append(_size(rel, "load_profile", r))
                if r.is_error:
                    continue
                pid = r.structured_content["profile_id"]
                issues = await c.call_tool("list_issues", {"profile_id": pid})
                for tool, args in _calls(pid, data, issues.structured_content or {}):
                    r = issues if tool == "list_issues" else await c.call_tool(tool, args)
                    sizes.append(_size(rel, tool, r))
    return sizes, lists


def _size(profile: str, tool: str, r: Any) -> Size:
    text = "".join(getattr(x, "text", "") for x in r.content)
    structured = _jsonlen(r.structured_content) if r.structured_content is not None else 0
    return Size(profile, tool, len(text.encode()), structured, error=text[:120] if r.is_error else "")


def table(sizes: list[Size], lists: dict[str, int]) -> str:
    lines = ["| profile | tool | text bytes | text ~tokens | structured bytes | structured ~tokens | "
             "structured / text |", "|---|---|---:|---:|---:|---:|---:|"]
    for s in sizes:
        ratio = "-" if s.ratio is None else f"{s.ratio:.1f}"
        note = f" (error: {s.error})" if s.error else ""
        lines.append(f"| {s.profile} | {s.tool}{note} | {s.text:,} | {tokens(s.text):,} | {s.structured:,} | "
                     f"{tokens(s.structured):,} | {ratio} |")
    lines += ["", "| tools/list | bytes | ~tokens |", "|---|---:|---:|"]
    lines += [f"| {k} | {v:,} | {tokens(v):,} |" for k, v in lists.items()]
    ok = [s for s in sizes if not s.error and s.text]
    if ok:
        worst = max(ok, key=lambda s: s.ratio or 0.0)
        big = max(ok, key=lambda s: s.structured)
        lines += ["", f"Largest structured / text: {worst.ratio:.2f} ({worst.tool} on {worst.profile}); largest "
                  f"structured content: {big.structured:,} bytes ({big.tool} on {big.profile}); largest text: "
                  f"{max(s.text for s in ok):,} bytes."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder (the server's root)")
    ap.add_argument("profiles", nargs="*", default=list(DEFAULT_PROFILES), help="profiles, relative to --data")
    ns = ap.parse_args(argv)
    data = ns.data.resolve()
    if not data.is_dir():
        print(f"no data folder at {data}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="stepdoctor-sizes-") as cache:
        sizes, lists = asyncio.run(measure(data, ns.profiles, Path(cache)))
    print(table(sizes, lists))
    return 0


if __name__ == "__main__":
    sys.exit(main())
