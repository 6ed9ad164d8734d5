"""Clustering metrics against the installed torchmetrics: batch values counted on the device, torchmetrics' compute,
checks at the door, deferred cluster-count checks of a forward batch, collections, and no host sync."""

import contextlib
import functools
import math
import pickle
from typing import Any
from unittest import mock

import pytest
import torch
import torchmetrics.clustering as tmc
from torchmetrics import MetricCollection

import torchmetrics_async.clustering as tac
from tests.parity import Step, assert_same, run_side_by_side
from torchmetrics_async.clustering import COUNT_MESSAGE, DUNN_MESSAGE, groups
from torchmetrics_async.errors import ShapeMismatchError
from torchmetrics_async.testing import count_host_syncs, no_host_sync

AVERAGES = ("min", "geometric", "arithmetic", "max")
EXTRINSIC = [
    ("MutualInfoScore", {}),
    *(("NormalizedMutualInfoScore", {"average_method": m}) for m in AVERAGES),
    *(("AdjustedMutualInfoScore", {"average_method": m}) for m in AVERAGES),
    ("AdjustedRandScore", {}),
    ("RandScore", {}),
    ("FowlkesMallowsIndex", {}),
    ("HomogeneityScore", {}),
    ("CompletenessScore", {}),
    ("VMeasureScore", {}),
    ("VMeasureScore", {"beta": 0.5}),
]
INTRINSIC = [
    ("CalinskiHarabaszScore", {}),
    ("DaviesBouldinScore", {}),
    *(("DunnIndex", {"p": p}) for p in (1, 2, math.inf)),
]
IDS = [f"{name}-{kwargs}" for name, kwargs in EXTRINSIC + INTRINSIC]


def _pair(name: str, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    return getattr(tmc, name)(**kwargs), getattr(tac, name)(**kwargs)


def _labels(seed: int, size: int, clusters: int) -> torch.Tensor:
    """Labels with gaps and negatives (relabelled by rank, as torch.unique does)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, clusters, (size,), generator=generator) * 7 - 5


def _extrinsic(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    size, clusters = (1, 2, 5, 16, 40)[seed % 5], (1, 2, 3, 9)[seed % 4]
    return _labels(seed, size, clusters), _labels(seed + 100, size, (3, 1, 6)[seed % 3])


def _intrinsic(seed: int, clusters: int = 3, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    size = 4 * clusters + seed % 5
    labels = torch.cat([torch.arange(clusters), torch.randint(0, clusters, (size - clusters,), generator=generator)])
    return torch.randn(size, 3, generator=generator, dtype=dtype) + labels[:, None] * 2.0, labels * 3 + 1


@pytest.mark.parametrize(("name", "kwargs"), EXTRINSIC + INTRINSIC, ids=IDS)
def test_values_match_torchmetrics(name: str, kwargs: dict[str, Any]) -> None:
    """forward() (each batch's value) and compute() (torchmetrics' own), over batches of 1 to 40 entries."""
    batch = _extrinsic if (name, kwargs) in EXTRINSIC else _intrinsic
    reference, accelerated = _pair(name, kwargs)
    run_side_by_side(reference, accelerated, [Step("forward" if i % 3 else "update", batch(i)) for i in range(12)])


@pytest.mark.parametrize(("name", "kwargs"), EXTRINSIC + INTRINSIC, ids=IDS)
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_update_and_forward_make_no_host_sync(name: str, kwargs: dict[str, Any], device: str) -> None:
    metric = getattr(tac, name)(**kwargs).to(device)
    inputs = [x.to(device) for x in ((_extrinsic if (name, kwargs) in EXTRINSIC else _intrinsic)(3))]
    with no_host_sync():
        metric.update(*inputs)
        metric(*inputs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ["CalinskiHarabaszScore", "DaviesBouldinScore", "DunnIndex"])
def test_intrinsic_many_clusters_and_float64(name: str, dtype: torch.dtype) -> None:
    """30 clusters. Above 25 centroids torchmetrics' DaviesBouldin takes cdist's matrix-product formula, whose
    self-distances come out nonzero (0.0156 here, turning its score from 0.94 into 5.5): forward() takes the exact
    distances, which is torchmetrics' value with cdist's exact formula."""
    reference, accelerated = _pair(name, {})
    exact = functools.partial(torch.cdist, compute_mode="donot_use_mm_for_euclid_dist")
    with mock.patch.object(torch, "cdist", exact) if name == "DaviesBouldinScore" else contextlib.nullcontext():
        run_side_by_side(reference, accelerated, [Step("forward", _intrinsic(seed, 30, dtype)) for seed in range(3)])


def test_davies_bouldin_above_25_clusters_differs_from_torchmetrics_only_by_its_self_distances() -> None:
    """The deviation above is real (else the patch is moot): torchmetrics' own forward gives another number."""
    reference, accelerated = _pair("DaviesBouldinScore", {})
    batch = _intrinsic(0, 30)
    assert not torch.isclose(accelerated(*batch), reference(*batch))


def test_adjusted_mutual_info_over_several_column_blocks() -> None:
    """A batch of 1500: the expected mutual information runs over 3 blocks of columns, as torchmetrics' loops."""
    preds, target = _labels(1, 1500, 3), _labels(2, 1500, 2)
    reference, accelerated = _pair("AdjustedMutualInfoScore", {})
    with no_host_sync():
        value = accelerated(preds, target)
    assert_same(value, reference(preds, target))


@pytest.mark.parametrize("name", ["HomogeneityScore", "CompletenessScore", "VMeasureScore", "MutualInfoScore"])
def test_empty_batch_gives_torchmetrics_value(name: str) -> None:
    reference, accelerated = _pair(name, {})
    empty = torch.zeros(0, dtype=torch.long)
    assert_same(accelerated(empty, empty), reference(empty, empty))


def test_adjusted_mutual_info_of_an_empty_batch_raises_as_torchmetrics() -> None:
    reference, accelerated = _pair("AdjustedMutualInfoScore", {})
    empty = torch.zeros(0, dtype=torch.long)
    with pytest.raises(RuntimeError) as expected:
        reference(empty, empty)
    with pytest.raises(RuntimeError, match="^" + str(expected.value).replace("(", r"\(").replace(")", r"\)")):
        accelerated(empty, empty)


@pytest.mark.parametrize(("name", "kwargs"), EXTRINSIC[:1] + INTRINSIC[:1], ids=str)
def test_float_labels_and_shapes_are_rejected_in_update(name: str, kwargs: dict[str, Any]) -> None:
    """torchmetrics raises these in forward() and compute(); here update() too, at once (metadata, no read)."""
    reference, accelerated = _pair(name, kwargs)
    if name == "MutualInfoScore":
        bad = [(torch.rand(4), torch.tensor([0, 1, 0, 1])), (torch.tensor([[0, 1]]), torch.tensor([[0, 1]]))]
    else:
        bad = [(torch.rand(4, 2).long(), torch.tensor([0, 1, 0, 1])), (torch.rand(4), torch.tensor([0, 1, 0, 1]))]
    for inputs in bad:
        reference.update(*inputs)  # torchmetrics appends anything
        with pytest.raises(ValueError, match="Expected") as expected:
            reference.compute()
        reference.reset()
        with no_host_sync(), pytest.raises(ValueError, match=str(expected.value)[:30]):
            accelerated.update(*inputs)


@pytest.mark.parametrize("name", ["CalinskiHarabaszScore", "DaviesBouldinScore", "DunnIndex"])
def test_intrinsic_length_mismatch_is_rejected_in_update(name: str) -> None:
    """torchmetrics fails in compute() (mask indexing); here update() raises at once."""
    reference, accelerated = _pair(name, {})
    data, labels = torch.rand(4, 2), torch.tensor([0, 1, 0])
    reference.update(data, labels)
    with pytest.raises((IndexError, RuntimeError)):
        reference.compute()
    with no_host_sync(), pytest.raises(ShapeMismatchError, match="as many labels as samples"):
        accelerated.update(data, labels)


@pytest.mark.parametrize(
    ("name", "message"),
    [("CalinskiHarabaszScore", COUNT_MESSAGE), ("DaviesBouldinScore", COUNT_MESSAGE), ("DunnIndex", DUNN_MESSAGE)],
)
def test_a_forward_batch_torchmetrics_rejects_is_nan_then_raised_by_compute(name: str, message: str) -> None:
    """One cluster in a forward() batch: torchmetrics raises there; here NaN, and compute()/reset() raise it."""
    reference, accelerated = _pair(name, {})
    data, labels = _intrinsic(0)
    one = (data, torch.zeros_like(labels))
    with pytest.raises((ValueError, RuntimeError), match=message[:30]):
        reference(*one)
    with no_host_sync():
        value = accelerated(*one)
        accelerated.update(data, labels)
    assert value.isnan()
    with pytest.raises(RuntimeError, match=message[:30]):
        accelerated.compute()
    accelerated(*one)
    with pytest.raises(RuntimeError, match=message[:30]):
        accelerated.reset()


def test_update_alone_does_not_check_the_cluster_count() -> None:
    """As in torchmetrics, update() only appends: a one-cluster batch among others computes torchmetrics' value."""
    reference, accelerated = _pair("CalinskiHarabaszScore", {})
    data, labels = _intrinsic(0)
    steps = [Step("update", (data[:4], torch.zeros(4, dtype=torch.long))), Step("update", (data, labels))]
    run_side_by_side(reference, accelerated, steps)


def test_collection_and_pickle_keep_torchmetrics_values() -> None:
    names = ["AdjustedRandScore", "MutualInfoScore", "VMeasureScore", "FowlkesMallowsIndex"]
    reference = MetricCollection({name: getattr(tmc, name)() for name in names})
    accelerated = MetricCollection({name: getattr(tac, name)() for name in names})
    for seed in range(4):
        batch = _extrinsic(seed + 2)
        with no_host_sync():
            values = accelerated(*batch)
        assert_same(values, reference(*batch))
    assert_same(pickle.loads(pickle.dumps(accelerated)).compute(), reference.compute())


def test_groups_rank_count_and_first() -> None:
    x = torch.tensor([3, -1, 3, 7, -1, 3])
    rank, size, first = groups(x)
    assert rank.tolist() == [1, 0, 1, 2, 0, 1]
    assert size.tolist() == [3, 2, 3, 1, 2, 3]
    assert first.tolist() == [True, True, False, True, False, False]


def test_compute_is_torchmetrics_own() -> None:
    """compute() runs torchmetrics' compute (which reads the host); only update()/forward() must not."""
    accelerated = tac.RandScore()
    accelerated.update(*_extrinsic(3))
    with count_host_syncs() as syncs:
        accelerated.compute()
    assert syncs.total > 0


# Fuzz findings (tools/fuzz.py, seeds 1 and 2): each was a difference from torchmetrics before its fix.
@pytest.mark.parametrize(("name", "kwargs"), [EXTRINSIC[0], EXTRINSIC[5], INTRINSIC[0], INTRINSIC[2]], ids=str)
def test_zero_dim_labels_are_one_entry_as_in_torchmetrics(name: str, kwargs: dict[str, Any]) -> None:
    reference, accelerated = _pair(name, kwargs)
    batch = _extrinsic(4) if (name, kwargs) in EXTRINSIC else _intrinsic(0)
    one = (torch.tensor(2), torch.tensor(-1)) if (name, kwargs) in EXTRINSIC else (batch[0][:1], batch[1][0])
    run_side_by_side(reference, accelerated, [Step("update", one), Step("forward", batch), Step("update", batch)])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("name", "kwargs"), INTRINSIC, ids=str)
def test_half_precision_and_nan_data_give_torchmetrics_values(name: str, kwargs: dict[str, Any], dtype) -> None:
    data = torch.tensor([[-1.0078125], [1.515625], [0.09033203125], [3.515625]], dtype=dtype)
    labels = torch.tensor([-1, 2, 0, 2])
    nan = torch.tensor([[6.4, 7.8], [-4.7, -5.9], [float("nan"), 12.6], [8.7, 9.4], [-6.8, -5.5]])
    steps = [Step("forward", (data, labels)), Step("forward", (nan, torch.tensor([2, -2, 4, 3, -2])))]
    run_side_by_side(*_pair(name, kwargs), steps)


def _identical_points(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """2 to 4 clusters of 1 to 13 identical points each (float32 or float64, 1 to 5 dims), shuffled."""
    clusters, dims = (int(torch.randint(2, high, (1,), generator=generator)) for high in (5, 6))
    dtype = (torch.float32, torch.float64)[int(torch.randint(0, 2, (1,), generator=generator))]
    points = torch.randn(clusters, dims, generator=generator, dtype=dtype) * 10
    sizes = torch.randint(1, 13, (clusters,), generator=generator)
    sizes[0] += 1  # more points than clusters, as torchmetrics requires
    labels = torch.repeat_interleave(torch.arange(clusters), sizes)
    labels = labels[torch.randperm(labels.numel(), generator=generator)]
    return points[labels], labels * 3 - 2


def test_identical_points_of_the_issue_keep_torchmetrics_exact_values() -> None:
    """Issue 31: torchmetrics' torch.mean lands exactly on each cluster's point (CH 1.0, Dunn inf); a sum by
    index_add_ over the count kept rounding noise (CH 6.4e13, Dunn 6.3e6)."""
    x = [-12.836618423461914, 3.062027931213379, 17.43071746826172]
    y = [-10.715895652770996, 4.1479105949401855, 11.88646125793457]
    batch = (torch.tensor([x] * 8 + [y] * 2), torch.tensor([0] * 8 + [1] * 2))
    for name, kwargs in INTRINSIC:
        reference, accelerated = _pair(name, kwargs)
        assert_same(accelerated(*batch), reference(*batch), exact=True)


@pytest.mark.parametrize(("name", "kwargs"), INTRINSIC, ids=str)
def test_identical_point_clusters_give_torchmetrics_values(name: str, kwargs: dict[str, Any]) -> None:
    """A seeded sweep of clusters of identical points: the centroids are torchmetrics' bit for bit, so its exact
    cases (CH 1.0, Dunn inf) stay exact; where its torch.mean is inexact both divide the same rounding noise (equal
    within float tolerance: the within-cluster sums add in another order)."""
    generator = torch.Generator().manual_seed(31)
    reference, accelerated = _pair(name, kwargs)
    exact_cases = 0
    for _ in range(100):
        data, labels = _identical_points(generator)
        rank = groups(labels)[0]
        means = tac.cluster_means(data, rank, torch.zeros_like(rank).index_add_(0, rank, torch.ones_like(rank)))
        expected_means = torch.stack([data[labels == k].mean(dim=0) for k in labels.unique()])
        assert_same(means[: expected_means.shape[0]], expected_means, exact=True)
        expected = reference(data, labels)
        assert_same(accelerated(data, labels), expected)
        exact_cases += bool(expected == 1.0) if name == "CalinskiHarabaszScore" else bool(expected.isinf())
    assert name == "DaviesBouldinScore" or exact_cases >= 10  # the sweep reaches torchmetrics' exact cases


def test_cluster_means_are_torch_mean_bit_for_bit_and_sync_free() -> None:
    """Random (not identical) data too: every cluster's mean is torchmetrics' ``data[labels == k].mean(dim=0)``."""
    generator = torch.Generator().manual_seed(7)
    shapes = [(37, 1, torch.float32), (50, 3, torch.float32), (64, 5, torch.float64), (45, 12, torch.float16)]
    for size, dims, dtype in shapes:
        labels = torch.randint(0, 4, (size,), generator=generator)
        data = (torch.randn(size, dims, generator=generator) * 10).to(dtype)
        rank = groups(labels)[0]
        sizes = torch.zeros_like(rank).index_add_(0, rank, torch.ones_like(rank))
        with no_host_sync():
            means = tac.cluster_means(data, rank, sizes)
        expected = torch.stack([data[labels == k].mean(dim=0) for k in labels.unique()])
        assert_same(means[: expected.shape[0]], expected, exact=True)
        assert not means[expected.shape[0] :].any()
