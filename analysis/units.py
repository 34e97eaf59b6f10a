"""Unit constants: the one home for conversions between the store's integer nanoseconds and the units
findings report.

Floats, so that any value divided or multiplied by them is a float (JSON evidence never flips between
int and float with the input); integer code converts explicitly (`int(ms * NS_PER_MS)`).
"""

from __future__ import annotations

NS_PER_US = 1e3
NS_PER_MS = 1e6
# the same as integers, for exact integer and Decimal arithmetic in the readers (a Decimal times a float fails)
NS_PER_US_INT = 1_000
NS_PER_MS_INT = 1_000_000
# profilers' "MB" (communication.json Transit Size(MB), MindSpore comm_fusion sizes) is 10^6 bytes
BYTES_PER_MB = 1e6
