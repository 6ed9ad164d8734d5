"""Fused sync on 2 real gloo ranks: values equal torchmetrics' (same data, same run), collectives counted.

One spawn for the module (see ``scenarios.py`` for what each rank runs); each test checks one scenario on both ranks.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from tests.distributed import harness, scenarios
from tests.distributed.harness import scenario
from tests.parity import assert_same, torchmetrics_text

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="needs gloo"
)


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return harness.run(scenarios.run_all, world_size=2)


def test_aggregators_equal_torchmetrics_with_uneven_updates_and_an_idle_rank(ranks):
    for rank, results in enumerate(scenario(ranks, "aggregation_parity")):
        for case, result in results.items():
            assert_same(result["ours"], result["theirs"], where=f"rank {rank} {case}", exact=True)


def test_aggregators_need_one_all_reduce_without_barrier(ranks):
    for results in scenario(ranks, "aggregation_parity"):
        for name in ("MeanMetric", "SumMetric", "MaxMetric", "MinMetric", "RunningMean", "RunningSum"):
            # the deferred-NaN flag rides in the value's buffer
            assert results[name]["our_count"] == {"all_gather_single": 1, "all_reduce": 1}, name  # + the plan check
        # CatMetric: its flag rides in the shape exchange; values and keep-masks share one data gather
        assert results["CatMetric"]["our_count"] == {"all_gather_single": 3}  # plan check, shapes, data
        assert results["CatMetric"]["tm_count"] == {"barrier": 1, "all_gather": 2}
        assert results["MeanMetric"]["tm_count"] == {"barrier": 2, "all_gather": 2}


def test_list_states_of_different_lengths_keep_rank_order_and_trailing_shape(ranks):
    for rank, results in enumerate(scenario(ranks, "cat_shapes")):
        assert_same(results["2-D"]["ours"], results["2-D"]["theirs"], where=f"rank {rank} 2-D", exact=True)
        assert results["2-D"]["ours"].shape == (7, 3)
        empty_rank = results["2-D, rank 1 empty"]
        assert_same(empty_rank["ours"], empty_rank["expected"], where=f"rank {rank} 2-D, rank 1 empty", exact=True)
        assert empty_rank["count"] == {"all_gather_single": 3}
        for case in ("1-D, rank 0 empty", "all empty"):
            assert_same(results[case]["ours"], results[case]["theirs"], where=f"rank {rank} {case}", exact=True)


def test_every_state_kind_and_dtype_syncs_as_torchmetrics_syncs_it(ranks):
    for rank, results in enumerate(scenario(ranks, "mixed_states")):
        assert_same(results["ours"], results["theirs"], where=f"rank {rank}", exact=True)
        assert_same(results["unsynced"], results["local"], where=f"rank {rank} after unsync", exact=True)
        # f32 sum (fp16, bf16 and fp32 sums/means), f64 max (+ bool max), f32 min (+ bool min), int64 sum (int32 and
        # bool sums), int64 min: 5 all_reduces; the list, custom and None states: one shape and one data exchange.
        assert results["our_count"] == {"all_reduce": 5, "all_gather_single": 3}  # + the plan check
        assert results["tm_count"]["barrier"] == 14
        assert results["ours"]["i_sum"].tolist() == [2**31, 14]  # int32 sums become int64 first, as torch.sum does
        assert math.isnan(results["ours"]["f_min"][1])  # gloo's min may drop a NaN; torch.min keeps it
        assert results["int mean errors"][0] is not None
        assert results["int mean errors"][0] == results["int mean errors"][1]


def test_int16_states_sync_where_torchmetrics_gather_cannot_on_gloo(ranks):
    for results in scenario(ranks, "mixed_states"):
        assert_same(results["int16"]["s_max"], torch.tensor([1, 0], dtype=torch.int16), exact=True)
        assert_same(results["int16"]["s_cat"], torch.tensor([0, 1, 1], dtype=torch.int16), exact=True)


def test_list_state_with_a_custom_reduction_falls_back_to_torchmetrics_and_says_so(ranks):
    for rank, results in enumerate(scenario(ranks, "fallback_states")):
        assert_same(results["ours"], results["theirs"], where=f"rank {rank}", exact=True)
        # the tensor state is fused (1 all_reduce); the list state goes through gather_all_tensors per element
        assert results["count"] == {"all_gather_single": 1, "all_reduce": 1, "barrier": 2, "all_gather": 4}
        assert len(results["warnings"]) == 1


def test_collection_computes_with_one_fused_sync(ranks):
    for rank, results in enumerate(scenario(ranks, "collection")):
        assert results["type"] == ("MetricCollection", "torchmetrics_async.distributed")
        four = results["four"]
        assert_same(four["ours"], four["theirs"], where=f"rank {rank}", exact=True)
        # Mean+Sum+Max+Cat: one f32 sum buffer, one f32 max buffer carrying the four NaN flags, one shape exchange and
        # one data exchange for the list states. torchmetrics: a barrier and gathers per state.
        assert four["our_count"] == {"all_reduce": 2, "all_gather_single": 3}  # + the plan check
        assert four["tm_count"] == {"barrier": 5, "all_gather": 6}
        assert four["synced after"] == [False] * 4
        # the plan check, the shape exchange, then one read of every member's deferred flags in compute()
        assert four["host_syncs"]["Tensor.tolist"] == 1 + 1 + 1
        assert_same(
            results["second window"]["ours"],
            results["second window"]["theirs"],
            where=f"rank {rank} window 2",
            exact=True,
        )
        everything = results["all"]
        assert_same(everything["ours"], everything["theirs"], where=f"rank {rank} all", exact=True)
        # + MinMetric's buffer, + RunningMean's base metric, which syncs inside the wrapper's compute
        assert everything["our_count"] == {"all_reduce": 4, "all_gather_single": 4}  # + 2 plan checks


def test_collection_compute_groups_send_shared_states_once(ranks):
    for rank, results in enumerate(scenario(ranks, "collection")):
        groups = results["compute groups"]
        assert groups["groups"] == {0: ["a", "b"]}
        assert_same(groups["ours"], groups["theirs"], where=f"rank {rank}", exact=True)
        assert groups["our_count"] == {"all_gather_single": 1, "all_reduce": 1}


def test_collection_keeps_sync_on_compute_and_user_dist_sync_fn(ranks):
    for rank, results in enumerate(scenario(ranks, "collection")):
        options = results["options"]
        expected = {"custom": torch.tensor(3.0), "fused": torch.tensor(3.0), "local": torch.tensor(rank + 1.0)}
        assert_same(options["ours"], expected, exact=True)
        assert options["calls"] == [(), ()]  # the user's gather saw the value and the flag, as torchmetrics calls it
        assert options["our_count"] == {"all_gather_single": 1, "all_reduce": 1, "barrier": 2, "all_gather": 2}


def test_sync_context_computes_a_dict_of_metrics_on_one_fused_sync(ranks):
    for rank, results in enumerate(scenario(ranks, "collection")):
        result = results["dict"]
        assert_same(result["ours"], result["theirs"], where=f"rank {rank}", exact=True)
        # mean + the flags of mean and cat (counted in the sum buffer), max (a plain torchmetrics metric) in its own
        # buffer; cat's values and keep-masks in the two gathers
        assert result["our_count"] == {"all_reduce": 2, "all_gather_single": 3}  # + the plan check
        assert result["synced after"] == [False, False, False]


def test_deferred_nan_error_on_one_rank_raises_on_every_rank(ranks):
    for results in scenario(ranks, "nan_error"):
        assert torchmetrics_text(results["metric"]) == "Encountered `nan` values in tensor"
        assert results["metric synced after"] is True  # torchmetrics leaves a metric whose compute raised synced
        assert torchmetrics_text(results["collection"]) == "Encountered `nan` values in tensor"
        assert results["collection synced after"] == [False, False]  # the collection restores every member
    assert [r["local sum after"].item() for r in scenario(ranks, "nan_error")] == [3.0, 1.0]


def test_process_group_argument_is_honoured(ranks):
    rank0, rank1 = scenario(ranks, "process_groups")
    # new_group([0]): rank 0 reduces over itself; rank 1 is not a member: no collective, local value.
    assert_same(
        rank0["only rank 0"],
        {"value": torch.tensor(1.0), "count": {"all_gather_single": 1, "all_reduce": 1}},
        exact=True,
    )
    assert_same(rank1["only rank 0"], {"value": torch.tensor(2.0), "count": {}}, exact=True)
    for results in (rank0, rank1):
        assert_same(results["both"]["value"], torch.tensor(9.0 / 4.0), exact=True)
        assert results["both"]["groups are the subgroup"] == [True, True]  # the plan check, the all_reduce
        assert_same(results["override"]["value"], torch.tensor(3.0), exact=True)
        assert results["override"]["groups"] == [True, True]
    assert_same(rank0["two groups"]["value"], {"sub": torch.tensor(1.0), "world": torch.tensor(3.0)}, exact=True)
    assert_same(rank1["two groups"]["value"], {"sub": torch.tensor(2.0), "world": torch.tensor(3.0)}, exact=True)
    assert rank0["two groups"]["count"] == {"all_gather_single": 2, "all_reduce": 2}  # a plan check per group
    assert rank1["two groups"]["count"] == {"all_gather_single": 1, "all_reduce": 1}


def _expected_functional() -> dict[str, Any]:
    nan = math.nan
    f = torch.tensor
    common = {"tag": "train", "nothing": None}
    return {
        "sum": {
            "f": f([3.0, 6.0]), "h": f([1.5, 4.5], dtype=torch.float16), "d": f(1.0 / 3.0 * 2 + 1, dtype=torch.float64),
            "i": f([9, -12]), "nan": f([nan, 5.0]), "x": f(6.0), **common,
        },
        "max": {
            "f": f([2.0, 4.0]), "h": f([1.0, 3.0], dtype=torch.float16), "d": f(4.0 / 3.0, dtype=torch.float64),
            "i": f([6, -4], dtype=torch.int32), "nan": f([nan, 3.0]), "x": f(3.5), **common,
        },
        "min": {
            "f": f([1.0, 2.0]), "h": f([0.5, 1.5], dtype=torch.float16), "d": f(1.0 / 3.0, dtype=torch.float64),
            "i": f([3, -8], dtype=torch.int32), "nan": f([nan, 2.0]), "x": f(2.5), **common,
        },
        "mean": {
            "f": f([1.5, 3.0]), "h": f([0.75, 2.25], dtype=torch.float16),
            "d": f((1.0 / 3.0 * 2 + 1) / 2, dtype=torch.float64), "nan": f([nan, 2.5]), "x": f(3.0), **common,
        },
    }  # fmt: skip


def test_functional_reductions(ranks):
    expected = _expected_functional()
    for rank, results in enumerate(scenario(ranks, "functional")):
        for name, values in expected.items():
            assert_same(results[name], values, where=f"rank {rank} reduce_{name}", exact=True)
        # one all_reduce per (dtype, op) bucket: f32 (the f16 values and the number travel in f32), f64, int32/int64
        assert results["sum count"] == results["max count"] == results["min count"] == {"all_reduce": 3}
        assert results["mean count"] == {"all_reduce": 2}
        assert "torch.mean refuses it too" in results["mean of ints"]
        custom = results["custom"]
        assert_same(custom["f"], torch.tensor([3.0, 6.0]), exact=True)
        assert_same(custom["d"], expected["mean"]["d"], exact=True)  # not in reduce_fn: mean
        assert_same(custom["x"], torch.tensor(3.0), exact=True)  # None: mean
        assert_same(custom["i"], torch.tensor([3, -8], dtype=torch.int32), exact=True)
        assert_same(custom["flag"], torch.tensor(True), exact=True)
        assert results["custom count"] == {"all_reduce": 4}  # f32 sum, f32 max (+ the flag), f64 sum, int32 min
        assert results["async again"] is True
        assert_same(results["async"]["i"], torch.tensor([9, -12]), exact=True)


def test_functional_all_gather(ranks):
    for rank, results in enumerate(scenario(ranks, "functional")):
        expected = {
            "v": torch.tensor([[0.0, 1.0, 2.0], [1.0, 2.0, 3.0]]),
            "m": torch.stack([torch.zeros(2, 2, dtype=torch.int64), torch.ones(2, 2, dtype=torch.int64)]),
            "n": torch.tensor([0, 1]),
            "s": "x",
        }
        assert_same(results["all_gather"], expected, where=f"rank {rank}", exact=True)
        assert_same(results["all_gather async"], expected, where=f"rank {rank} async", exact=True)
        assert results["all_gather count"] == {"all_gather_single": 2}
        assert results["all_gather async pending"] is False
        assert results["all_gather async completed"] is True
        message = "key 'ragged' differs across ranks (rank 0: (2,) torch.float32, rank 1: (3,)"
        assert message in results["all_gather ragged"]
        assert_same(results["after error"], torch.tensor(2.0), exact=True)


def test_sync_unsync_sync_context_and_async_handles(ranks):
    for rank, results in enumerate(scenario(ranks, "sync_unsync")):
        local = (rank + 1) * 3.0
        assert_same(results["synced"], (torch.tensor(9.0), torch.tensor(4.0), True), exact=True)
        assert results["count"] == {"all_gather_single": 1, "all_reduce": 1}
        assert results["host syncs"] == {"Tensor.tolist": 1}  # the plan check; sums and flags are not read
        assert_same(results["unsynced"], (torch.tensor(local), torch.tensor(2.0), False), exact=True)
        assert_same(results["in context"], torch.tensor(9.0), exact=True)
        assert_same(results["after context"], torch.tensor(local), exact=True)
        assert results["twice"] == "TorchMetricsUserError: The Metric has already been synced."
        assert results["async before wait"] == (False, False, False)
        assert_same(
            results["async"], (torch.tensor(3.0), torch.tensor([0.0, 1.0, 0.0, 1.0, 2.0]), True, True), exact=True
        )
        assert results["async pending"] is False  # the all_reduce waits for the plan check, read at launch
        assert results["async completes"] == (True, False)  # done communicating, not finished until wait()
        assert_same(results["async completed"], (torch.tensor(1.0), True), exact=True)
        assert results["cat host syncs"] == {"Tensor.tolist": 2}  # the plan check, then the shapes
        assert results["deepcopy synced"] is True


def test_members_sync_free_as_they_are_join_the_fused_sync_of_an_accelerated_collection(ranks):
    for rank, results in enumerate(scenario(ranks, "verified_members")):
        # MeanMetric is converted; PeakSignalNoiseRatio and SignalNoiseRatio stay torchmetrics' own classes
        assert results["types"] == [
            "torchmetrics_async.aggregation",
            "torchmetrics.image.psnr",
            "torchmetrics.audio.snr",
        ]
        assert_same(results["ours"], results["theirs"], where=f"rank {rank}", exact=True)
        # Their sum states share the fused buckets: the plan check, then one all_reduce per (dtype, op) bucket.
        # torchmetrics: a barrier and a gather per state.
        assert results["our_count"] == {"all_gather_single": 1, "all_reduce": 2}
        assert results["tm_count"]["barrier"] > 0
