"""The MCP server under attack: links out of the roots, hostile paths, a query that would eat the machine,
and the cache left behind by a killed ingest. Uses only the bundled example (no ../shared needed)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from stepdoctor.analysis import build
from stepdoctor.analysis.store import IngestOptions
from stepdoctor.server.query import run_query
from stepdoctor.server.query_pool import QueryPool
from stepdoctor.server.roots import Roots

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "cluster4"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r


def test_a_hard_link_to_a_file_outside_is_refused_without_echoing_it(tmp_path: Path, root: Path):
    secret = tmp_path / "secret.csv"
    secret.write_text("header: topsecret-line-1, a, b\n")
    os.link(secret, root / "trace.json")
    with pytest.raises(ToolError) as ei:
        Roots([root]).resolve(str(root / "trace.json"))
    assert "hard links" in str(ei.value) and "topsecret" not in str(ei.value)
    prof = root / "run"
    prof.mkdir()
    os.link(secret, prof / "kernel_details.csv")
    with pytest.raises(ToolError, match="hard links"):
        Roots([root]).check_tree(prof)
    Roots([root], allow_links=True).check_tree(prof)   # allowed when asked


def test_symlinks_refused_unless_allowed_and_never_out_of_the_roots(tmp_path: Path, root: Path):
    (root / "inside").mkdir()
    (root / "inside" / "a.json").write_text("{}")
    (root / "link").symlink_to(root / "inside")
    with pytest.raises(ToolError, match="symbolic link"):
        Roots([root]).resolve(str(root / "link"))
    assert Roots([root], allow_links=True).resolve(str(root / "link")) == root / "inside"
    (root / "out").symlink_to(tmp_path)
    with pytest.raises(ToolError, match="outside the allowed roots"):
        Roots([root], allow_links=True).resolve(str(root / "out"))


@pytest.mark.parametrize("raw,problem", [("a\x00b", "NUL byte"), ("x" * 5000, "longer than"),
                                         ("/".join(["y" * 300] * 2), "longer than")])
def test_hostile_paths_get_one_clear_line(root: Path, raw: str, problem: str):
    with pytest.raises(ToolError, match=problem) as ei:
        Roots([root]).resolve(raw)
    assert "\n" not in str(ei.value)


def test_a_memory_eating_query_stops_at_the_memory_limit(tmp_path: Path):
    prof = build.open_profile(EXAMPLE, IngestOptions(cache_dir=tmp_path / "cache"))
    sql = "SELECT string_agg(repeat('x', 100000), ',') AS s FROM range(20000)"   # ~2 GB of text
    pool = QueryPool(64, 400, 30.0)
    try:
        with pytest.raises(ToolError, match="64 MB"):
            run_query(prof, sql, 10, pool=pool)
    finally:
        pool.close()


def test_temporaries_of_a_killed_ingest_are_removed_on_the_next_run(tmp_path: Path):
    cache = tmp_path / "cache"
    cache.mkdir()
    dead = 2 ** 22 + 12345   # above the default pid_max: no such process
    stale = [cache / f"abc.duckdb.tmp-{dead}-1", cache / f"abc.duckdb.tmp-{dead}-1.wal"]
    for f in stale:
        f.write_bytes(b"x" * 1000)
    (cache / f"abc.duckdb.tmp-{dead}-1.tmp").mkdir()
    mine = cache / f"def.duckdb.tmp-{os.getpid()}-1"
    mine.write_bytes(b"in progress")
    build.open_profile(EXAMPLE, IngestOptions(cache_dir=cache))
    assert not any(f.exists() for f in stale) and not (cache / f"abc.duckdb.tmp-{dead}-1.tmp").exists()
    assert mine.exists()   # a live process's build is left alone
    shutil.rmtree(cache)


def test_a_file_inside_a_rank_folder_is_checked_as_the_folder_discovery_reads(tmp_path: Path, root: Path):
    """PATH = a rank's trace_view.json (or its ASCEND_PROFILER_OUTPUT/) makes discovery read the folder above
    it: a link planted there is refused as if that folder had been given."""
    from stepdoctor.server.registry import ProfileRegistry

    rank = root / "run" / "node0_40000_20250101120000100_ascend_pt"
    shutil.copytree(EXAMPLE / rank.name, rank)
    out = rank / "ASCEND_PROFILER_OUTPUT"
    for planted, given in ((out / "kernel_details.csv", out / "trace_view.json"),
                           (rank / "profiler_info_0.json", out)):
        secret = tmp_path / planted.name
        shutil.move(planted, secret)
        planted.symlink_to(secret)
        reg = ProfileRegistry(Roots([root]), IngestOptions(cache_dir=tmp_path / "cache"))
        with pytest.raises(ToolError, match="links outside the allowed roots"):
            reg.load(Roots([root]).resolve(str(given)))
        planted.unlink()
        shutil.move(secret, planted)


@pytest.mark.anyio
async def test_a_cache_database_damaged_under_a_loaded_profile_is_read_again(tmp_path: Path):
    """Bytes flipped in every block of a loaded profile's cache database (a disk fault, another process)
    before its tables are read: the answer finds the failed checksum, drops the database and reads the
    profile again: the same answer as an undamaged server's, never a wrong or partial one."""
    from mcp import Client

    from stepdoctor.server.app import create_server

    async with Client(create_server([EXAMPLE.parent], cache_dir=tmp_path / "clean"), raise_exceptions=True) as c:
        clean = (await c.call_tool("list_issues", {"path": str(EXAMPLE)})).structured_content
    server = create_server([EXAMPLE.parent], cache_dir=tmp_path / "cache")
    async with Client(server, raise_exceptions=True) as c:
        await c.call_tool("load_profile", {"path": str(EXAMPLE)})
        (db,) = (tmp_path / "cache").glob("*.duckdb")
        data = bytearray(db.read_bytes())
        for at in range(3 * 4096 + 100, len(data), 256 * 1024):   # past the headers: one byte per block
            data[at] ^= 0xFF
        db.write_bytes(bytes(data))
        r = await c.call_tool("list_issues", {"path": str(EXAMPLE)})
        assert not r.is_error, r.content[0].text
        assert db.read_bytes() != bytes(data)   # found damaged, deleted and built again
        assert r.structured_content["findings"] == clean["findings"]
        assert not any("Corrupt" in w for w in r.structured_content.get("warnings", []))
