"""Timeline primitives, the bottom of the analysis: nothing here imports another stepdoctor package.

Intervals and their coverage (`intervals`), which device kernels are communication (`comm_kinds`), the
readable names of device ops (`names`), numpy helpers over rows split by rank (`arrays`) and the per-step
breakdown of one rank's device ops in integer ns (`breakdown`). The readers (ingest), the store's per-rank summaries and the metrics all use these, so each
is defined once, below every layer that asks for it.
"""
