"""Ranks whose data differ must plan the same fused sync: values equal torchmetrics' on every rank, no abort or hang.

One spawn for the module (see ``asymmetric.py`` for what each rank runs).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.distributed import asymmetric, harness
from tests.distributed.harness import scenario
from tests.parity import assert_same

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="needs gloo"
)


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return harness.run(asymmetric.run_all, world_size=2)


def test_rank_without_batches_computes_torchmetrics_values(ranks):
    rank0, rank1 = scenario(ranks, "idle_rank")
    assert rank0["groups"] == {0: ["acc"], 1: ["f1"]}  # no update: no compute group on rank 0 ...
    assert rank1["groups"] == {0: ["acc", "f1"]}  # ... one on rank 1: the plan must not follow them
    for rank, result in enumerate((rank0, rank1)):
        assert_same(result["ours"], result["theirs"], where=f"rank {rank}", exact=True)
        assert_same(
            result["ours"], {"acc": torch.tensor(0.5), "f1": torch.tensor(0.5)}, where=f"rank {rank}", exact=True
        )
        assert result["count"] == {"all_gather_single": 1, "all_reduce": 1}  # the plan check, the buckets


def test_forward_only_rank_next_to_updating_rank(ranks):
    for rank, result in enumerate(scenario(ranks, "forward_only")):
        assert_same(result["ours"], result["theirs"], where=f"rank {rank}", exact=True)
        assert result["count"] == {"all_gather_single": 1, "all_reduce": 1}  # the plan check, the buckets


def test_compute_groups_that_form_on_one_rank_only(ranks):
    rank0, rank1 = scenario(ranks, "data_dependent_groups")
    assert rank0["groups"] == {0: ["at_05", "at_07"]}
    assert rank1["groups"] == {0: ["at_05"], 1: ["at_07"]}
    for rank, result in enumerate((rank0, rank1)):
        assert_same(result["ours"], result["theirs"], where=f"rank {rank}", exact=True)
        # each member syncs its own states (at_07 computes on its own synced states, not at_05's)
        assert_same(
            result["second window"]["ours"],
            result["second window"]["theirs"],
            where=f"rank {rank} window 2",
            exact=True,
        )
        assert result["count"] == result["second window"]["count"] == {"all_gather_single": 1, "all_reduce": 1}


def test_member_with_a_cached_value_on_one_rank_still_takes_part(ranks):
    rank0, rank1 = scenario(ranks, "cached_on_one_rank")
    # torchmetrics hangs here (rank 0 returns its cache, rank 1 waits in a gather); the fused sync includes the
    # cached member on both ranks: rank 0 returns its cache, rank 1 computes over both ranks' states.
    assert_same(rank0["second"], rank0["first"], exact=True)
    assert_same(rank1["second"], {"mean": torch.tensor(13.0 / 3.0), "sum": torch.tensor(13.0)}, exact=True)


def test_rank_without_updates_for_every_registered_class(ranks):
    per_rank = scenario(ranks, "zero_updates_every_family")
    names = [name for name, *_ in asymmetric._registered() if name not in asymmetric._NO_EMPTY_COMPUTE]
    for rank, results in enumerate(per_rank):
        assert set(results) == {*names, "<collection>"}
        for name in names:
            assert_same(results[name]["ours"], results[name]["theirs"], where=f"rank {rank} {name}", exact=True)
        collection = results["<collection>"]
        assert_same(collection["ours"], collection["theirs"], where=f"rank {rank} collection", exact=True)


@pytest.fixture(scope="module")
def mismatched() -> list[dict[str, Any]]:
    # A rank that reached a collective of another size would abort (gloo) or hang: the timeout fails the test.
    return harness.run(asymmetric.run_mismatches, world_size=2)


# What each rank's message must name (rank 0, rank 1): the members at positions that differ.
_NAMED = {
    "member order": (["'a' (", "'b' ("], ["'a' (", "'b' ("]),
    "member order, list states": (["differ: 'b' (", "'c' ("], ["differ: 'b' (", "'c' ("]),
    "member missing": (["differ: 'b' (MeanMetric)", "2 on rank 0, 1 on rank 1"], ["differ: member 1 (absent"]),
    "list member missing": (
        ["differ: 'b' (CatMetric), 'c' (SumMetric)"],
        ["differ: 'c' (SumMetric), member 2 (absent"],
    ),
    "state shape": (["differ: 'a' (MulticlassAccuracy)"], ["differ: 'a' (MulticlassAccuracy)"]),
    "state dtype": (["differ: 'b' (SumMetric)"], ["differ: 'b' (SumMetric)"]),
}


@pytest.mark.parametrize("case", list(asymmetric.MISMATCHES))
def test_mismatched_plans_raise_a_clear_error_on_every_rank(mismatched, case):
    """Ranks whose definitions differ (order, a member, a state's shape or dtype) raise, whatever the entry point.

    Only the plan check (one fixed-size all_gather) ran: no collective whose size depends on the plan.
    """
    kind, entry = case.split(": ")
    for rank, result in enumerate(scenario(mismatched, case)):
        assert result["error"] is not None, f"rank {rank}: no error"
        assert "the ranks planned different syncs" in result["error"]
        if entry in ("compute", "sync_metrics", "sync_context"):  # the collector syncs its own copies, unnamed
            for part in _NAMED[kind][rank]:
                assert part in result["error"], result["error"]
        assert result["count"] == {"all_gather_single": 1}, result["count"]
        assert_same(result["after"], torch.tensor(2.0), exact=True)  # still in step: the next collective works


def test_a_collector_plan_that_changes_after_agreement_raises_on_every_rank_and_keeps_them_in_step(mismatched):
    """Windows after the first launch without reading their check: a rank whose plan changed must still not abort."""
    one, one_with_lists, every = zip(*(r.values() for r in scenario(mismatched, "plan changed")), strict=True)
    for case in (one, one_with_lists):
        for rank, result in enumerate(case):
            first, second, third = result["windows"]
            assert first["raised at"] is None
            assert first["values"] == result["theirs"]
            # the changed rank reads its check before launching and raises there; the other one launched at once and
            # raises when it reads the check with its results
            for window in (second, third):
                assert window["raised at"] == ("schedule" if rank == 1 else "collect"), window
                assert "the ranks planned different syncs" in window["error"]
                assert "differ: '1' (SumMetric)" in window["error"]  # the collector syncs copies named by position
                assert window["count"] == case[0]["windows"][1]["count"]  # the same collectives on both ranks
            assert_same(result["after"], torch.tensor(2.0), exact=True)
    for result in every:  # a change on every rank is a new plan every rank agrees on: values as torchmetrics'
        for window in result["windows"]:
            assert window["raised at"] is None, window
            assert window["values"] == result["theirs"]  # small sums: exact
        assert_same(result["after"], torch.tensor(2.0), exact=True)
