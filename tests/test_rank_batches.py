"""`rank_batches`: ranks cut into consecutive batches bounded by a table's rows, as the checks that read event
rows of many ranks use it (on the shared 4-rank Ascend cluster)."""

from __future__ import annotations

from conftest import CLUSTER4, need
from stepdoctor.analysis.build import open_profile
from stepdoctor.analysis.checks._common import rank_batches
from stepdoctor.analysis.checks.base import CheckContext
from stepdoctor.analysis.store import IngestOptions


def test_batches_follow_the_row_counts_in_the_order_given(tmp_path):
    ctx = CheckContext(open_profile(need(CLUSTER4), IngestOptions(cache_dir=tmp_path)))
    counts = dict(ctx.profile.rows("SELECT rank, count(*) FROM device_ops GROUP BY rank"))
    ranks = sorted(counts)
    assert len(ranks) == 4 and min(counts.values()) > 0
    assert rank_batches(ctx, ranks, "device_ops") == [ranks]  # all under the default batch
    one_each = rank_batches(ctx, ranks, "device_ops", max_rows=1)
    assert one_each == [[r] for r in ranks]  # a rank over the limit is a batch of its own
    rev = list(reversed(ranks))
    got = rank_batches(ctx, rev, "device_ops", max_rows=counts[rev[0]] + counts[rev[1]])
    assert got[0] == rev[:2] and [r for b in got for r in b] == rev
    assert rank_batches(ctx, [], "device_ops") == []
    assert rank_batches(ctx, [99], "device_ops") == [[99]]  # a rank without rows still gets a batch
