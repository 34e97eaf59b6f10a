"""The `stepdoctor` console command: the CLI (`tools.cli`) and, for `stepdoctor mcp`, the MCP server.

The top of the layers: the CLI lives in `tools/` and the server above it in `server/`, so the one command
that can start either is composed here, and no tool module imports the server.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from .tools import cli


def _serve(argv: list[str]) -> int:
    """`stepdoctor mcp ARGS` is `stepdoctor-mcp ARGS`: one parser, so both take the same options."""
    from .server.app import main as mcp_main

    return mcp_main(argv)


def main(argv: list[str] | None = None) -> int:
    return cli.main(argv, serve=_serve)


def run() -> None:
    """The console entry point: `main()`, then the process ends without the interpreter's teardown.

    Tearing down what a command loaded (pandas, DuckDB, pydantic, the checks) frees objects one by one after
    the output is written; nothing is left to do at that point: the output streams and logging handlers are
    flushed here, a profile's cache database was renamed into place before the command used it, and no
    command leaves a thread with work in progress. An exception (`--debug`) or SystemExit (argparse) leaves
    the normal way, with its traceback or message.
    """
    rc = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: the output is lost either way
            stream.flush()
    logging.shutdown()
    os._exit(rc)


if __name__ == "__main__":
    run()
