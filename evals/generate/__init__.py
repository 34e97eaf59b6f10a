"""Seeded scenario generators with planted problems."""
