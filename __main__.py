"""`python -m stepdoctor ...`: the same CLI as the `stepdoctor` command."""

from .tools.cli import run

run()
