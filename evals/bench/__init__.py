"""Benchmarks: stepdoctor against the peer tools on the same input."""
