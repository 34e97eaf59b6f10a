"""Latency of the MCP answers on a loaded profile, as an assistant meets them: the first question after
load_profile, then the same question again (median and p95 of the repeats), through the official client.

    .venv/bin/python -m stepdoctor.evals.bench.bench_mcp PROFILE [PROFILE ...]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

TOOLS = (("list_issues", {}), ("breakdown", {}), ("slow_ranks", {}))
REPEATS = 20


async def measure(path: Path, cache: Path) -> list[str]:
    from mcp import Client

    from ...server.app import create_server

    out = []
    async with Client(create_server([path.parent], cache_dir=cache), raise_exceptions=True) as c:
        r = await c.call_tool("load_profile", {"path": str(path)})
        pid = r.structured_content["profile_id"]
        for tool, args in TOOLS:
            ms = []
            for _ in range(REPEATS + 1):
                t = time.perf_counter()
                r = await c.call_tool(tool, {"profile_id": pid, **args})
                ms.append((time.perf_counter() - t) * 1000)
                if r.is_error:
                    raise SystemExit(f"{tool}: {r.content[0].text}")
            rest = sorted(ms[1:])
            p95 = rest[max(0, round(0.95 * len(rest)) - 1)]
            out.append(f"| {path.name} | {tool} | {ms[0]:.0f} | {statistics.median(rest):.1f} | {p95:.1f} |")
    return out


def main(argv: list[str]) -> int:
    rows = ["| profile | tool | first ms | repeat median ms | repeat p95 ms |", "| --- | --- | --- | --- | --- |"]
    with tempfile.TemporaryDirectory() as cache:
        for p in argv:
            rows += asyncio.run(measure(Path(p).resolve(), Path(cache)))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
