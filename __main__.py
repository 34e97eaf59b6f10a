"""`python -m stepdoctor ...`: the same command as `stepdoctor`."""

from .main import run

run()
