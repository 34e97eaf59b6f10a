"""analysis/ingest"""
