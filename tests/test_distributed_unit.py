"""Single-process checks of the fused sync: passthrough without a process group, bucket planning, packing and unpacking,
the byte layout of the gather, the collective-device decision, the hooks and the seam. No process group is created
here (the real collectives run in ``tests/distributed``)."""

import copy
import gc
import math
import pickle
import weakref

import pytest
import torch
import torchmetrics
from torchmetrics.metric import Metric

import torchmetrics_async as tma
from torchmetrics_async import _torchmetrics as seam
from torchmetrics_async import distributed as fused
from torchmetrics_async import metric as metric_base
from torchmetrics_async.distributed.collection import _FusedSyncCollection
from torchmetrics_async.sync import buckets as fused_buckets
from torchmetrics_async.sync import metrics as fused_sync
from torchmetrics_async.sync.buckets import _plan_buckets
from torchmetrics_async.sync.gather import (
    _ALIGN,
    _EMPTY,
    _ROW,
    MAX_GATHER_DIMS,
    _byte_view,
    _CatPieces,
    _decode,
    _layout,
    _row,
)
from torchmetrics_async.sync.plan import CHECK_WORDS, _check_row, _fingerprint, _mismatch


class UserCollection(torchmetrics.MetricCollection):
    """A user's own collection class: acceleration must keep it (and its pickling)."""

    def describe(self) -> str:
        return "mine"


@pytest.fixture
def local_devices(monkeypatch):
    """Bucket planning without a process group: every tensor's collective device is its own device."""
    monkeypatch.setattr(
        fused_buckets, "collective_device", lambda group=None, device=None, backend=None: torch.device(device)
    )


# --- not distributed: the inputs come back ----------------------------------------------------------------------------


def test_reductions_return_the_inputs_without_a_process_group():
    values = {"t": torch.tensor([1.0, 2.0]), "n": 3, "s": "x", "none": None}
    for reduce in (fused.reduce_sum, fused.reduce_max, fused.reduce_min):
        out = reduce(values)
        assert out == values
        assert out is not values
        assert all(out[key] is values[key] for key in values)
    assert fused.reduce_mean({"t": values["t"], "x": 0.5})["t"] is values["t"]
    handle = fused.reduce_custom(values, {"n": "sum"}, async_op=True)
    assert handle.is_completed()
    assert handle.wait()["t"] is values["t"]


def test_all_gather_without_a_process_group_stacks_over_one_rank():
    out = fused.all_gather({"t": torch.tensor([1.0, 2.0]), "n": 3, "s": "x"})
    assert out["t"].shape == (1, 2)
    assert out["n"].tolist() == [3]
    assert out["s"] == "x"
    assert fused.all_gather({"t": torch.ones(())}, async_op=True).wait()["t"].shape == (1,)


def test_invalid_reductions_fail_without_a_process_group_too():
    with pytest.raises(ValueError, match="Unknown reduction 'median'"):
        fused.reduce_custom({"a": torch.ones(())}, {"a": "median"})
    with pytest.raises(TypeError, match=r"torch\.mean refuses it too"):
        fused.reduce_mean({"count": torch.tensor(3)})
    with pytest.raises(TypeError, match=r"torch\.mean refuses it too"):
        fused.reduce_custom({"count": 3})  # the default op is "mean" (as datarax), and 3 is an int
    with pytest.raises(TypeError, match="no order"):
        fused.reduce_max({"z": torch.ones(2, dtype=torch.complex64)})
    with pytest.raises(TypeError, match="dict of tensors"):
        fused.reduce_sum([torch.ones(())])


def test_metric_syncs_do_nothing_without_a_process_group():
    metric = tma.MeanMetric()
    metric.update(torch.tensor([1.0, 3.0]))
    assert fused.sync_metrics([metric]) is None
    assert fused.sync_metrics({"m": metric}, async_op=True).wait() is None
    metric.sync()
    assert not metric._is_synced
    assert metric.compute() == 2.0


# --- the collective-device seam -----------------------------------------------------------------------------------


def test_collective_device_keeps_tensors_where_the_backend_supports_them():
    assert fused.collective_device(device="cpu", backend="gloo") == torch.device("cpu")
    assert fused.collective_device(device="cuda:1", backend="gloo") == torch.device("cuda", 1)
    assert fused.collective_device(device="cuda:1", backend="nccl") == torch.device("cuda", 1)
    # a mixed backend routes each device type to its own backend
    assert fused.collective_device(device="cpu", backend="cpu:gloo,cuda:nccl") == torch.device("cpu")


def test_collective_device_stages_cpu_states_to_the_current_cuda_device_under_nccl(monkeypatch):
    monkeypatch.setattr(torch.distributed, "get_backend", lambda group=None: "nccl")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert fused.collective_device() == torch.device("cuda", 3)
    assert fused.collective_device(object(), torch.device("cpu")) == torch.device("cuda", 3)
    assert fused.collective_device(None, torch.device("cuda", 0)) == torch.device("cuda", 0)
    monkeypatch.setattr(torch.distributed, "get_backend", lambda group=None: "gloo")
    assert fused.collective_device(None, "cpu") == torch.device("cpu")


# --- buckets --------------------------------------------------------------------------------------------------------


def _keys(buckets):
    return [(b.dtype, b.op, [s.token for s in b.segments]) for b in buckets]


def test_buckets_group_by_dtype_and_op_with_mean_sharing_the_sum_buffer(local_devices):
    items = [
        ("h_sum", torch.ones(2, dtype=torch.float16), "sum"),
        ("f_mean", torch.ones(3), "mean"),
        ("bf_mean", torch.ones(1, dtype=torch.bfloat16), "mean"),
        ("i_sum", torch.ones(2, dtype=torch.int32), "sum"),
        ("s_max", torch.ones(2, dtype=torch.int16), "max"),
        ("d_min", torch.ones((), dtype=torch.float64), "min"),
        ("l_sum", torch.ones((), dtype=torch.int64), "sum"),
    ]
    buckets, leftovers = _plan_buckets(items, group=None)
    assert leftovers == []
    # in (device type, dtype, op) order, not the order of the items: ranks that list them differently still launch
    # buckets of the same sizes, and the plan check reports it
    assert _keys(buckets) == [
        (torch.float32, "sum", ["h_sum", "f_mean", "bf_mean"]),  # halves accumulate in float32, as torch.sum does
        (torch.float64, "min", ["d_min"]),
        (torch.int32, "max", ["s_max"]),  # gloo has no int16 reductions
        (torch.int64, "sum", ["i_sum", "l_sum"]),  # torch.sum promotes integers to int64
    ]


@pytest.mark.parametrize(
    ("others", "flag_op", "expected"),
    [
        ([("v", torch.ones(()), "max")], "max", ("same", torch.float32, "max")),
        ([("v", torch.ones(()), "sum")], "max", ("count", torch.float32, "sum")),
        ([("v", torch.ones((), dtype=torch.float64), "max")], "min", ("negated", torch.float64, "max")),
        ([("v", torch.ones((), dtype=torch.uint8), "max")], "min", (None, torch.uint8, "min")),  # unsigned: no
        ([], "max", (None, torch.uint8, "max")),
    ],
)
def test_bool_flags_ride_in_a_buffer_that_exists_anyway(local_devices, others, flag_op, expected):
    buckets, _ = _plan_buckets([*others, ("flag", torch.zeros((), dtype=torch.bool), flag_op)], group=None)
    ride, dtype, op = expected
    host = next(b for b in buckets if any(s.token == "flag" for s in b.segments))
    assert (host.dtype, host.op) == (dtype, op)
    assert next(s for s in host.segments if s.token == "flag").ride == ride


def test_a_lone_flag_can_ride_in_the_shape_exchange(local_devices):
    buckets, leftovers = _plan_buckets(
        [("flag", torch.zeros((), dtype=torch.bool), "max")], group=None, spare=torch.device("cpu")
    )
    assert buckets == []
    assert [s.token for s in leftovers] == ["flag"]


def _emulate(buckets, world_size):
    """Pack every bucket and reduce it as ``world_size`` ranks holding the same values would."""
    for bucket in buckets:
        buffer = bucket.pack()
        if bucket.op == "sum":
            buffer.mul_(world_size)
    return {token: value for bucket in buckets for token, value in bucket.finish(world_size).items()}


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_pack_and_unpack_restore_values_shapes_and_torch_dtypes(local_devices, world_size):
    items = {
        "h": (torch.tensor([[0.5, 1.5]], dtype=torch.float16), "sum"),
        "f": (torch.tensor([1.0, 2.0, 3.0]), "mean"),
        "i": (torch.tensor([2**30, 5], dtype=torch.int32), "sum"),
        "b": (torch.tensor([True, False]), "sum"),
        "m": (torch.tensor([math.nan, 2.0]), "max"),
        "n": (torch.tensor([math.nan, -2.0], dtype=torch.float64), "min"),
        "any": (torch.tensor(True), "max"),
        "all": (torch.tensor([True, False]), "min"),
        "z": (torch.tensor([1 + 2j]), "mean"),
    }
    buckets, _ = _plan_buckets([(key, t, op) for key, (t, op) in items.items()], group=None)
    out = _emulate(buckets, world_size)
    k = world_size
    torch.testing.assert_close(out["h"], torch.tensor([[0.5 * k, 1.5 * k]], dtype=torch.float16))
    torch.testing.assert_close(out["f"], items["f"][0])
    assert out["i"].dtype == torch.int64
    assert out["i"].tolist() == [2**30 * k, 5 * k]
    assert out["b"].tolist() == [k, 0]
    assert out["b"].dtype == torch.int64
    torch.testing.assert_close(out["m"], items["m"][0], equal_nan=True)
    torch.testing.assert_close(out["n"], items["n"][0], equal_nan=True)
    assert out["any"].dtype == torch.bool
    assert out["any"].item() is True
    assert out["all"].tolist() == [True, False]
    torch.testing.assert_close(out["z"], items["z"][0])


def test_means_come_first_so_one_division_covers_them(local_devices):
    buckets, _ = _plan_buckets(
        [("s", torch.ones(2), "sum"), ("flag", torch.tensor(True), "max"), ("m", torch.ones(3), "mean")], group=None
    )
    (bucket,) = buckets
    bucket.pack()
    assert [(s.token, s.offset) for s in bucket.segments] == [("m", 0), ("s", 3), ("flag", 5)]


def test_a_nan_mask_travels_with_float_max_and_min_buffers(local_devices):
    buckets, _ = _plan_buckets([("m", torch.tensor([math.nan, 1.0]), "max")], group=None)
    assert buckets[0].pack().tolist() == [pytest.approx(math.nan, nan_ok=True), 1.0, 1.0, 0.0]
    buckets, _ = _plan_buckets([("m", torch.tensor([math.nan, 1.0]), "min")], group=None)
    assert buckets[0].pack()[2:].tolist() == [-1.0, 0.0]  # min over ranks of -isnan: -1 where any rank has NaN


# --- the byte-packed gather -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pieces",
    [
        [torch.ones(2, 3), torch.zeros(1, 3)],
        [torch.tensor(1.0), torch.tensor([2.0, 3.0])],  # 0-dim elements count as one row
        [torch.ones(2, 3), torch.ones(0)],  # torch.cat skips 1-D empty tensors
        [torch.ones(2, dtype=torch.int64), torch.ones(1, dtype=torch.float16)],  # dtype promotion
        [torch.ones(0)],
        [torch.ones(0, 4, dtype=torch.bool)],
    ],
)
def test_list_state_description_and_packing_match_torch_cat(pieces):
    expected = torch.cat([p.unsqueeze(0) if p.ndim == 0 else p for p in pieces])
    item = _CatPieces(pieces)
    dtype, shape = item.describe()
    assert (dtype, shape) == (expected.dtype, tuple(expected.shape))
    buffer = torch.zeros(256, dtype=torch.uint8)
    out = _byte_view(buffer, 16, dtype, shape)
    assert item.write(out) is None
    assert torch.equal(_byte_view(buffer, 16, dtype, shape), expected)


def test_list_state_with_mismatched_elements_raises_torch_cat_error():
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        _CatPieces([torch.ones(2, 3), torch.ones(2, 4)]).describe()
    assert _CatPieces([]).describe() is None


def test_list_state_with_autograd_history_keeps_it_for_this_rank():
    leaf = torch.ones(2, requires_grad=True)
    out = torch.empty(2)
    local = _CatPieces([leaf * 2]).write(out)
    assert local.requires_grad
    assert out.tolist() == [2.0, 2.0]


def test_gather_rows_and_layout_round_trip():
    described = [(torch.float64, (3,)), None, (torch.bool, (2, 5)), (torch.complex64, ()), (torch.int16, (0, 7))]
    rows = [_row(*d) if d is not None else [_EMPTY] * 2 + [0] * MAX_GATHER_DIMS for d in described]
    assert all(len(row) == _ROW for row in rows)
    assert [_decode(row) for row in rows] == described
    offsets, total = _layout(described)
    assert offsets == [0, 32, 32, 48, 64]
    assert total == 64
    assert all(offset % _ALIGN == 0 for offset in offsets)
    with pytest.raises(ValueError, match="at most 8 dimensions"):
        _row(torch.float32, (1,) * 9)


# --- hooks: SyncFreeMixin._sync_dist, accelerate(collection) --------------------------------------------------------


def test_sync_free_metrics_fuse_the_default_gather_and_keep_a_users_own(monkeypatch):
    calls = []
    monkeypatch.setattr(metric_base, "sync_states", lambda metrics, process_group=None, async_op=False: calls.append(1))
    metric = tma.SumMetric()
    metric.update(torch.tensor(2.0))
    metric._sync_dist(seam.gather_all_tensors)
    assert calls == [1]

    def two_identical_ranks(tensor, group=None):
        return [tensor, tensor]

    metric._sync_dist(two_identical_ranks)  # torchmetrics' path: stack the "gathered" states and reduce
    assert calls == [1]
    assert metric.sum_value.item() == 4.0


def test_accelerated_collection_fuses_its_compute_and_pickles():
    collection = tma.accelerate(torchmetrics.MetricCollection([torchmetrics.MeanMetric(), torchmetrics.CatMetric()]))
    assert type(collection) is fused.MetricCollection
    assert isinstance(collection, torchmetrics.MetricCollection)
    collection.update(torch.tensor([1.0, 3.0]))
    for clone in (pickle.loads(pickle.dumps(collection)), copy.deepcopy(collection), collection.clone(prefix="x_")):
        assert type(clone) is fused.MetricCollection
        assert clone.compute()[next(iter(clone.keys()))] is not None
    assert collection.compute()["MeanMetric"] == 2.0


def test_a_users_collection_class_keeps_its_code_and_pickles():
    collection = tma.accelerate(UserCollection([torchmetrics.SumMetric()]))
    assert isinstance(collection, UserCollection)
    assert isinstance(collection, _FusedSyncCollection)
    assert type(collection).__name__ == "UserCollection"
    assert collection.describe() == "mine"
    collection.update(torch.tensor(2.0))
    for clone in (pickle.loads(pickle.dumps(collection)), copy.deepcopy(collection)):
        assert type(clone) is type(collection)
        assert clone.compute() == {"SumMetric": torch.tensor(2.0)}
    assert fused.fused_collection_class(UserCollection) is type(collection)


# --- the seam -------------------------------------------------------------------------------------------------------


def test_seam_gather_is_torchmetrics_default_sync_function():
    assert Metric._sync_dist.__defaults__[0] is seam.gather_all_tensors
    assert torchmetrics.SumMetric().distributed_available_fn is seam.jit_distributed_available
    assert seam.MetricCollection is torchmetrics.MetricCollection


def test_already_synced_message_is_torchmetrics_own():
    metric = torchmetrics.SumMetric()
    metric._is_synced = True
    with pytest.raises(seam.TorchMetricsUserError) as err:
        metric.sync()
    assert str(err.value) == seam.ALREADY_SYNCED_MESSAGE


def test_plan_check_rows_name_the_members_that_differ():
    a, b, c = (_fingerprint(name) for name in "abc")
    assert len(_check_row(0, [a] * 40)) == len(_check_row(0, [])) == CHECK_WORDS  # fixed size, whatever the plan
    other = _mismatch(["'x' (X)", "'y' (Y)"], [_check_row(1, [a, b]), _check_row(2, [a, c])])
    assert "metrics: 2 on rank 0, 2 on rank 1" in str(other)
    assert "member(s) at the same position differ: 'y' (Y)." in str(other)
    missing = _mismatch(["'x' (X)"], [_check_row(1, [a, b]), _check_row(2, [a])])  # as rank 1 sees it
    assert "member(s) at the same position differ: member 1 (absent on this rank)." in str(missing)
    assert "This rank syncs 'x' (X)." in str(missing)
    elsewhere = _mismatch(["'x' (X)"], [_check_row(1, [a]), _check_row(2, [a])])  # members agree, buckets do not
    assert "the members agree, but not their collectives" in str(elsewhere)


def test_plan_fingerprint_follows_the_layout_not_the_values():
    one, two = tma.MeanMetric(), tma.MeanMetric()
    one.update(torch.tensor([1.0, 2.0]))  # values differ, layout does not
    layout = [(type(m).__qualname__, tuple((a, str(getattr(m, a).dtype)) for a in m._reductions)) for m in (one, two)]
    assert _fingerprint(layout[0]) == _fingerprint(layout[1])
    assert _fingerprint(("a", 1)) != _fingerprint(("a", 2))
    assert 0 <= _fingerprint(("a", 1)) < 2**62


class _Group:
    """Stands for a process group: a cached plan must not keep it alive (gloo's threads would outlive the group)."""


def _leaves(value):
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def test_bucket_plans_are_cached_by_layout_and_hold_no_state_or_group(monkeypatch, local_devices):
    monkeypatch.setattr(fused_sync, "collective_device", lambda group=None, device=None, backend=None: device)
    monkeypatch.setattr(fused_sync, "_PLANS", {})
    group = _Group()
    alive = weakref.ref(group)

    def plan(metrics, group=group):
        reduces, gathers, _, _, layout = fused_sync._plan_states(metrics)
        return fused_sync._cached_plan(layout, reduces, len(gathers), group, None), reduces

    first, _ = plan([tma.MeanMetric(), tma.MaxMetric()])
    other = [tma.MeanMetric(), tma.MaxMetric()]
    other[0].update(torch.tensor([1.0, 2.0]))  # other values, the same layout: the same plan
    again, reduces = plan(other)
    assert again is first
    wider = [tma.MeanMetric(), tma.MaxMetric()]
    wider[1].set_dtype(torch.float64)
    assert plan(wider)[0] is not first
    placed, leftovers = first.place(reduces)
    fresh, fresh_leftovers = _plan_buckets(reduces, group)
    assert fused_buckets.bucket_layout(placed) == fused_buckets.bucket_layout(fresh)
    for mine, theirs in zip([*placed, leftovers], [*fresh, fresh_leftovers], strict=True):
        segments = mine.segments if isinstance(mine, fused_buckets._Bucket) else mine
        expected = theirs.segments if isinstance(theirs, fused_buckets._Bucket) else theirs
        assert [(s.token, s.ride, s.tensor) for s in segments] == [(s.token, s.ride, s.tensor) for s in expected]
    kept = _leaves([getattr(first, slot) for slot in type(first).__slots__])
    assert all(isinstance(leaf, (int, str, torch.device, torch.dtype, type(None))) for leaf in kept), kept
    del plan, group  # what remains is the cache
    gc.collect()
    assert alive() is None
