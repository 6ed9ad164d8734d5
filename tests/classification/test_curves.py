"""The curve family against torchmetrics: values (update, forward, compute, reset), host syncs, errors."""

import contextlib
import warnings
from typing import Any

import pytest
import torch
import torchmetrics.classification as tmc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchmetrics_async.classification as tac
from tests.parity import Step, assert_same, run_side_by_side, torchmetrics_text
from torchmetrics_async._torchmetrics import binary_target_values_message
from torchmetrics_async.classification.curves import CURVE_ORIGINS
from torchmetrics_async.testing import count_host_syncs, no_host_sync

TASKS = ("Binary", "Multiclass", "Multilabel")
NAMES = [origin.__name__ for origin in CURVE_ORIGINS if origin.__name__.startswith(TASKS)]
_MINIMUM = {
    "RecallAtFixedPrecision": "min_precision",
    "PrecisionAtFixedRecall": "min_recall",
    "SensitivityAtSpecificity": "min_specificity",
    "SpecificityAtSensitivity": "min_sensitivity",
}
C = 3


def _kwargs(name: str, thresholds: Any, ignore_index: int | None, minimum: float = 0.5, **extra: Any) -> dict:
    kind = name.removeprefix("Binary").removeprefix("Multiclass").removeprefix("Multilabel")
    kwargs = {"thresholds": thresholds, "ignore_index": ignore_index, **extra}
    if kind in _MINIMUM:
        kwargs[_MINIMUM[kind]] = minimum
    if name.startswith("Multiclass"):
        kwargs["num_classes"] = C
    if name.startswith("Multilabel"):
        kwargs["num_labels"] = C
    return kwargs


def _averages(name: str) -> list[Any]:
    if name in ("MulticlassAUROC", "MulticlassAveragePrecision"):
        return ["macro", "weighted", "none"]
    if name in ("MultilabelAUROC", "MultilabelAveragePrecision"):
        return ["micro", "macro", "weighted", "none"]
    if name in ("MulticlassPrecisionRecallCurve", "MulticlassROC"):
        return [None, "macro"]  # binned "micro" fails in torchmetrics' update: see test_binned_micro_fails_alike
    return [None]


def _batch(name: str, rng: torch.Generator, n: int, logits: bool, ignore_index: int | None, dtype: torch.dtype):
    if name.startswith("Binary"):
        preds, target = torch.rand(n, 2, generator=rng), torch.randint(0, 2, (n, 2), generator=rng)
    elif name.startswith("Multiclass"):
        preds, target = torch.rand(n, C, 2, generator=rng).softmax(1), torch.randint(0, C, (n, 2), generator=rng)
    else:
        preds, target = torch.rand(n, C, 2, generator=rng), torch.randint(0, 2, (n, C, 2), generator=rng)
    if logits:
        preds = (preds - 0.5) * 10
    # Coarse scores: ties with each other and with the thresholds.
    preds = (preds * 8).round() / 8
    if ignore_index is not None:
        target = torch.where(torch.rand(target.shape, generator=rng) < 0.25, ignore_index, target)
    return preds.to(dtype), target


def _quiet(fn: Any, *args: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


@pytest.mark.sweep
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    thresholds=st.sampled_from([None, 5, [0.9, 0.1, 0.5, 0.25], "tensor"]),
    ignore_index=st.sampled_from([None, -1, 0]),
    logits=st.booleans(),
    sizes=st.lists(st.integers(0, 6), min_size=1, max_size=2),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.float16]),
    # min_precision=0 with a class without positives: torchmetrics' _lexargmax fails (IndexError; README, Deviations).
    minimum=st.sampled_from([0.5, 0.9]),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_values_match_torchmetrics(
    name: str,
    thresholds: Any,
    ignore_index: Any,
    logits: bool,
    sizes: list,
    dtype: Any,
    minimum: float,
    seed: int,
    data,
) -> None:
    """forward (batch values), update, compute and reset, as torchmetrics; binned update/forward make no host sync."""
    if thresholds == "tensor":
        thresholds = torch.tensor([0.0, 0.3, 0.7, 1.0])
    average = data.draw(st.sampled_from(_averages(name)))
    extra = {} if average is None else {"average": average}
    if name == "BinaryAUROC":
        extra["max_fpr"] = data.draw(st.sampled_from([None, 0.2, 0.8]))
    kwargs = _kwargs(name, thresholds, ignore_index, minimum, **extra)
    ours, theirs = getattr(tac, name)(**kwargs), getattr(tmc, name)(**kwargs)
    rng = torch.Generator().manual_seed(seed)
    for _window in range(2):
        for step, n in enumerate(sizes):
            preds, target = _batch(name, rng, n, logits, ignore_index, dtype)
            if step % 2:
                with no_host_sync() if thresholds is not None else count_host_syncs():
                    ours.update(preds, target)
                theirs.update(preds, target)
                continue
            try:
                expected = _quiet(theirs, preds, target)
            except Exception as err:  # torchmetrics fails on this batch (an empty one, say): so must we
                if isinstance(err, IndexError) and thresholds is not None and kwargs.get("max_fpr") is not None:
                    # A binned max_fpr AUROC whose batch curve ends below max_fpr: torchmetrics indexes past the
                    # curve. forward() cannot raise that without a host read: its batch value is NaN (README).
                    with no_host_sync():
                        value = _quiet(ours, preds, target)
                    assert torch.isnan(value)
                    return
                with pytest.raises(type(err)):
                    _quiet(ours, preds, target)
                return
            # Binned: no host sync; unbinned: forward() reads the host (data-dependent shapes), update() does not.
            with no_host_sync() if thresholds is not None else contextlib.nullcontext():
                value = _quiet(ours, preds, target)
            assert_same(value, expected)
        try:
            expected = _quiet(theirs.compute)
        except Exception as err:
            with pytest.raises(type(err)):
                _quiet(ours.compute)
        else:
            assert_same(_quiet(ours.compute), expected)
        ours.reset()
        theirs.reset()


@pytest.mark.sweep
@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name", NAMES)
def test_binned_update_and_forward_make_no_host_sync(name: str, device: str) -> None:
    for average in _averages(name):
        kwargs = _kwargs(name, 7, -1, **({} if average is None else {"average": average}))
        if name == "BinaryAUROC":
            kwargs["max_fpr"] = 0.5
        metric = getattr(tac, name)(**kwargs).to(device)
        preds, target = _batch(name, torch.Generator().manual_seed(0), 8, True, -1, torch.float32)
        preds, target = preds.to(device), target.to(device)
        with no_host_sync():
            metric.update(preds, target)
            metric(preds, target)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name", NAMES)
def test_unbinned_update_makes_no_host_sync(name: str, device: str) -> None:
    metric = getattr(tac, name)(**_kwargs(name, None, -1)).to(device)
    preds, target = _batch(name, torch.Generator().manual_seed(0), 8, True, -1, torch.float32)
    preds, target = preds.to(device), target.to(device)
    with no_host_sync():
        metric.update(preds, target)


@pytest.mark.parametrize("name", NAMES)
def test_unbinned_forward_reads_the_host_exactly_as_compute_on_the_batch(name: str) -> None:
    """README: forward() with thresholds=None makes the host reads of compute() on the batch, and no other."""
    preds, target = _batch(name, torch.Generator().manual_seed(0), 8, False, -1, torch.float32)
    forwarded = getattr(tac, name)(**_kwargs(name, None, -1))
    with count_host_syncs() as forward_syncs, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        forwarded(preds, target)
    computed = getattr(tac, name)(**_kwargs(name, None, -1))
    computed.update(preds, target)
    with count_host_syncs() as compute_syncs, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        computed.compute()
    # compute() also reads the (clean) deferred-check flags once, which forward() leaves to compute()/reset().
    flag_reads = 1 if computed._deferred_checks_registered() else 0
    assert forward_syncs.total == compute_syncs.total - flag_reads > 0, (
        forward_syncs.summary(),
        compute_syncs.summary(),
    )


@pytest.mark.parametrize("thresholds", [None, 5])
@pytest.mark.parametrize("name", NAMES)
def test_bad_target_values_raise_in_compute_with_torchmetrics_message(name: str, thresholds: Any) -> None:
    preds, target = _batch(name, torch.Generator().manual_seed(0), 4, False, None, torch.float32)
    target = target.clone()
    target.view(-1)[: C + 1] = torch.arange(C + 1) + 3  # 4 distinct labels outside every task's range
    kwargs = _kwargs(name, thresholds, None, validate_args=True)  # BinaryLogAUC's default is False
    theirs, ours = getattr(tmc, name)(**kwargs), getattr(tac, name)(**kwargs)
    with no_host_sync() if thresholds is not None else count_host_syncs():
        ours.update(preds, target)
    with pytest.raises(RuntimeError, match="Detected") as err:
        ours.compute()
    if name != "BinaryAUROC":  # torchmetrics' BinaryAUROC never validates (see its docstring here)
        with pytest.raises(RuntimeError) as expected:
            theirs.update(preds, target)
        # torchmetrics prints the values it found (a host read); the deferred message names the allowed set instead.
        assert str(err.value)[:40] == str(expected.value)[:40]


@pytest.mark.parametrize("name", NAMES)
def test_shape_and_dtype_errors_are_eager_with_torchmetrics_message(name: str) -> None:
    preds, target = _batch(name, torch.Generator().manual_seed(0), 4, False, None, torch.float32)
    for bad_preds, bad_target in [(preds.long(), target), (preds, target.float()), (preds[..., :1], target)]:
        kwargs = _kwargs(name, 5, None, validate_args=True)  # BinaryLogAUC's default is False
        theirs, ours = getattr(tmc, name)(**kwargs), getattr(tac, name)(**kwargs)
        try:
            theirs.update(bad_preds, bad_target)
        except (ValueError, RuntimeError) as expected:
            with pytest.raises(type(expected)) as err:
                ours.update(bad_preds, bad_target)
            if name != "BinaryAUROC":  # unvalidated: a kernel's own error, worded by another kernel
                assert str(err.value) == str(expected)  # noqa: PT017
        else:  # BinaryAUROC: torchmetrics does not validate
            ours.update(bad_preds, bad_target)


def test_binned_micro_fails_alike() -> None:
    """torchmetrics' binned micro-averaged multiclass curves add (T, 2, 2) counts to a (T, C, 2, 2) state."""
    preds, target = torch.rand(4, C).softmax(1), torch.tensor([0, 1, 2, 1])
    for name in ("MulticlassPrecisionRecallCurve", "MulticlassROC"):
        with pytest.raises(RuntimeError) as expected:
            getattr(tmc, name)(num_classes=C, thresholds=5, average="micro").update(preds, target)
        with pytest.raises(RuntimeError) as err:
            getattr(tac, name)(num_classes=C, thresholds=5, average="micro")(preds, target)
        assert str(err.value) == str(expected.value)


@pytest.mark.parametrize("name", ["MulticlassAUROC", "MultilabelAveragePrecision", "BinaryROC"])
def test_metric_collection_and_unbinned_micro_with_ignore_index(name: str) -> None:
    from torchmetrics import MetricCollection

    preds, target = _batch(name, torch.Generator().manual_seed(3), 6, True, 0, torch.float32)
    kwargs = _kwargs(name, None, 0)
    ours = MetricCollection({"a": getattr(tac, name)(**kwargs), "b": getattr(tac, name)(**_kwargs(name, 9, 0))})
    theirs = MetricCollection({"a": getattr(tmc, name)(**kwargs), "b": getattr(tmc, name)(**_kwargs(name, 9, 0))})
    for _ in range(2):
        assert_same(_quiet(ours, preds, target), _quiet(theirs, preds, target))
    assert_same(_quiet(ours.compute), _quiet(theirs.compute))
    micro = {"num_classes": C, "average": "micro", "ignore_index": 0}
    preds, target = _batch("Multiclass", torch.Generator().manual_seed(4), 6, True, 0, torch.float32)
    ours_micro, theirs_micro = tac.MulticlassROC(**micro), tmc.MulticlassROC(**micro)
    assert_same(_quiet(ours_micro, preds, target), _quiet(theirs_micro, preds, target))
    assert_same(_quiet(ours_micro.compute), _quiet(theirs_micro.compute))


def test_binned_max_fpr_auroc_whose_curve_ends_below_max_fpr() -> None:
    # The listed deviation: torchmetrics' forward() raises IndexError; ours gives NaN without a host read, and
    # compute() raises as torchmetrics' does.
    preds, target = torch.tensor([0.6, 0.1, 0.95, 0.7]), torch.tensor([0, 0, 1, 1])
    ours, theirs = (
        tac.BinaryAUROC(thresholds=[0.5, 0.9], max_fpr=0.8),
        tmc.BinaryAUROC(thresholds=[0.5, 0.9], max_fpr=0.8),
    )
    with pytest.raises(IndexError):
        theirs(preds, target)
    with no_host_sync():
        value = ours(preds, target)
    assert torch.isnan(value)
    with pytest.raises(IndexError):
        ours.compute()


def _all_nan(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_all_nan(item) for item in value)
    return bool(torch.isnan(value).all())


_ONE_HOT_MESSAGES = {C: "Class values must be smaller than num_classes.", -1: "Class values must be non-negative."}
_OUT_OF_RANGE_CASES = [
    *(
        (name, average, thresholds)
        for name in ("MulticlassPrecisionRecallCurve", "MulticlassROC")
        for average in ("micro", "macro", None)
        # binned micro: torchmetrics' update fails unless thresholds == num_classes (test_binned_micro_fails_alike)
        for thresholds in (None, C if average == "micro" else 5)
    ),
    *(
        (name, average, thresholds)
        for name in ("MulticlassAUROC", "MulticlassAveragePrecision")
        for average in ("macro", "none")
        for thresholds in (None, 5)
    ),
    *(("MulticlassRecallAtFixedPrecision", None, thresholds) for thresholds in (None, 5)),
]


@pytest.mark.sweep
@pytest.mark.parametrize("bad", [C, -1])
@pytest.mark.parametrize(("name", "average", "thresholds"), _OUT_OF_RANGE_CASES)
def test_multiclass_labels_out_of_range_raise_in_compute_and_reset(
    name: str, average: Any, thresholds: Any, bad: int
) -> None:
    """Issue 19.3: a label C or -1 (no ignore_index) among C distinct values passes torchmetrics' unique count.

    torchmetrics' one_hot then rejects it (binned and micro-averaged curves) with torch's message: here compute() and
    reset() raise that message and forward()'s batch value is NaN. Unbinned macro/per-class curves, which torchmetrics
    computes from such labels (or fails on in bincount), raise the same message (README, Deviations).
    """
    preds = torch.rand(6, C, generator=torch.Generator().manual_seed(0)).softmax(1)
    target = torch.tensor([0, 1, bad, bad, 1, 0])
    kwargs = _kwargs(name, thresholds, None, **({} if average is None else {"average": average}))
    message = _ONE_HOT_MESSAGES[bad]
    if thresholds is not None or average == "micro":
        with pytest.raises(RuntimeError, match=message):
            getattr(tmc, name)(**kwargs).update(preds, target)
    for finish in ("compute", "reset"):
        ours = getattr(tac, name)(**kwargs)
        with no_host_sync() if thresholds is not None else count_host_syncs():
            ours.update(preds, target)
        with pytest.raises(RuntimeError) as err:
            getattr(ours, finish)()
        assert torchmetrics_text(err.value) == message
    if average == "micro" and thresholds is not None:
        return  # torchmetrics' binned micro compute fails on any batch (test_binned_micro_fails_alike)
    ours = getattr(tac, name)(**kwargs)
    assert _all_nan(_quiet(ours, preds, target))
    with pytest.raises(RuntimeError) as err:
        ours.compute()
    assert torchmetrics_text(err.value) == message


_IGNORED_LABEL_CASES = [
    (name, average, thresholds)
    for name in NAMES
    if name.startswith("Multilabel")
    for average in (["micro", "macro"] if name in ("MultilabelAUROC", "MultilabelAveragePrecision") else [None])
    for thresholds in (None, 5)
]


@pytest.mark.parametrize(("name", "average", "thresholds"), _IGNORED_LABEL_CASES)
def test_multilabel_forward_on_invalid_target_with_ignore_index_gives_nan_not_index_error(
    name: str, average: Any, thresholds: Any
) -> None:
    """Issue 19.7: label 2 wholly ignored and a target 2 elsewhere; torchmetrics raises its target-values message.

    torchmetrics' compute on such a batch fails on the empty label (IndexError); forward() must give the NaN batch
    value of a violated batch and leave the target-values message to compute()/reset().
    """
    preds = torch.rand(4, C, generator=torch.Generator().manual_seed(0))
    target = torch.tensor([[0, 1, -1], [1, 2, -1], [0, 0, -1], [1, 1, -1]])
    kwargs = _kwargs(name, thresholds, -1, **({} if average is None else {"average": average}))
    with pytest.raises(RuntimeError) as expected:
        getattr(tmc, name)(**kwargs)(preds, target)
    for finish in ("compute", "reset"):
        ours = getattr(tac, name)(**kwargs)
        assert _all_nan(_quiet(ours, preds, target))
        with pytest.raises(RuntimeError) as err:
            getattr(ours, finish)()
        # torchmetrics prints the values it found (a host read); the deferred message names the allowed set instead.
        assert torchmetrics_text(err.value) == binary_target_values_message(-1)
        assert str(expected.value).startswith("Detected the following values in `target`")


# Batch-size mismatches (issue 19.1): torchmetrics' validation rejects them; unvalidated (validate_args=False, and
# BinaryAUROC, which never validates) it flattens and silently pairs, broadcasts or fails late (IndexError in compute).
_MISMATCHED_SHAPES = {
    "Binary": [((4,), (3,)), ((4,), (1,)), ((1,), (4,)), ((4, 2), (8,)), ((4, 2), (4, 1)), ((4, 2), (2, 4))],
    "Multiclass": [((4, C), (3,)), ((4, C), (1,)), ((1, C), (4,)), ((4, C, 2), (8,)), ((4, C, 2), (4, 1))],
    "Multilabel": [((4, C), (3, C)), ((4, C), (1, C)), ((1, C), (4, C)), ((4, C, 2), (4, C, 1)), ((4, C), (4, 1, C))],
}
# Shapes equal up to size-1 dimensions: torchmetrics' unvalidated path pairs them entry by entry, and so does this one.
_PAIRED_SHAPES = {"Binary": ((4, 1), (4,)), "Multiclass": ((4, C), (4, 1)), "Multilabel": ((4, C, 1), (4, C))}


def _shaped(name: str, preds_shape: tuple, target_shape: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    rng = torch.Generator().manual_seed(1)
    preds = torch.rand(preds_shape, generator=rng)
    high = C if name.startswith("Multiclass") else 2
    return preds, torch.randint(0, high, target_shape, generator=rng)


@pytest.mark.sweep
@pytest.mark.parametrize("validate_args", [True, False])
@pytest.mark.parametrize("ignore_index", [None, -1])
@pytest.mark.parametrize("thresholds", [None, 5])
@pytest.mark.parametrize("name", NAMES)
def test_batch_size_mismatch_raises_at_once(name: str, thresholds: Any, ignore_index: Any, validate_args: bool) -> None:
    """Where torchmetrics' validation raises: the same exception and message; else torchmetrics' validated error."""
    kwargs = _kwargs(name, thresholds, ignore_index, validate_args=validate_args)
    task = next(task for task in TASKS if name.startswith(task))
    for preds_shape, target_shape in _MISMATCHED_SHAPES[task]:
        preds, target = _shaped(name, preds_shape, target_shape)
        validated = getattr(tmc, name)(**{**kwargs, "validate_args": True})
        with pytest.raises((ValueError, RuntimeError)) as expected:
            # BinaryAUROC never validates: its siblings' validation is the reference.
            (tmc.BinaryROC(thresholds=thresholds) if name == "BinaryAUROC" else validated).update(preds, target)
        for call in ("update", "forward"):
            ours = getattr(tac, name)(**kwargs)
            with no_host_sync(), pytest.raises(type(expected.value)) as err:
                (ours.update if call == "update" else ours)(preds, target)
            assert str(err.value) == str(expected.value), (preds_shape, target_shape, call)
            assert isinstance(err.value, ValueError), (preds_shape, target_shape, call)  # ShapeMismatchError too
            states = ours.metric_state.values()  # rejected before anything was accumulated or recorded
            assert not any(len(state) if isinstance(state, list) else state.any() for state in states)


@pytest.mark.parametrize("thresholds", [None, 5])
@pytest.mark.parametrize("name", [*(n for n in NAMES if n.startswith(("Multiclass", "Multilabel"))), "BinaryAUROC"])
def test_unvalidated_shapes_equal_up_to_size_one_dims_pair_as_torchmetrics(name: str, thresholds: Any) -> None:
    kwargs = _kwargs(name, thresholds, None, validate_args=False)
    preds, target = _shaped(name, *_PAIRED_SHAPES[next(task for task in TASKS if name.startswith(task))])
    ours, theirs = getattr(tac, name)(**kwargs), getattr(tmc, name)(**kwargs)
    assert_same(_quiet(ours, preds, target), _quiet(theirs, preds, target))
    assert_same(_quiet(ours.compute), _quiet(theirs.compute))


@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("thresholds", [None, 5])
@pytest.mark.parametrize("name", ["BinaryPrecisionRecallCurve", "BinaryROC", "BinaryAveragePrecision"])
def test_binary_softmax_normalization_accepts_empty_and_probability_batches(
    name: str, thresholds: Any, kind: str
) -> None:
    """torchmetrics' softmax over dim 1 of the flattened binary scores runs only for logits: an empty batch is fine."""
    batches = [
        (torch.empty(0), torch.empty(0, dtype=torch.long)),
        (torch.tensor([0.1, 0.8, 0.4, 0.6]), torch.tensor([0, 1, 1, 0])),
    ]
    if kind == "forward" and thresholds is None:
        # torchmetrics' unbinned forward() of an empty batch fails computing its curve, whatever the normalization.
        for module in (tmc, tac):
            with pytest.raises(IndexError, match="out of bounds"):
                getattr(module, name)(normalization="softmax")(*batches[0])
    steps = [Step("update" if i == 0 and thresholds is None else kind, batch) for i, batch in enumerate(batches)]
    run_side_by_side(
        getattr(tmc, name)(thresholds=thresholds, normalization="softmax"),
        getattr(tac, name)(thresholds=thresholds, normalization="softmax"),
        steps,
    )
    ours = getattr(tac, name)(thresholds=thresholds, normalization="softmax")
    with no_host_sync():
        for preds, target in batches:
            ours.update(preds, target)


@pytest.mark.parametrize("thresholds", [None, 5])
@pytest.mark.parametrize("name", ["BinaryPrecisionRecallCurve", "BinaryROC", "BinaryAveragePrecision"])
def test_binary_softmax_normalization_of_logits_raises_in_compute(name: str, thresholds: Any) -> None:
    """Logits need the softmax torchmetrics cannot apply to ``(N,)`` scores (``IndexError``): a deferred error."""
    preds, target = torch.tensor([2.0, -1.0]), torch.tensor([1, 0])
    with pytest.raises(IndexError):
        getattr(tmc, name)(thresholds=thresholds, normalization="softmax").update(preds, target)
    ours = getattr(tac, name)(thresholds=thresholds, normalization="softmax")
    with no_host_sync():
        ours.update(preds, target)
    with pytest.raises(RuntimeError, match="normalization='softmax'"):
        ours.compute()


BIT_EQUAL_NAMES = [n for n in NAMES if n.startswith(("Multiclass", "Multilabel"))]


@pytest.mark.parametrize("name", BIT_EQUAL_NAMES)
def test_binned_forward_is_torchmetrics_forward_bit_for_bit(name: str) -> None:
    """Issue 29 item 5: the batch's counts are laid out as torchmetrics' state (contiguous), so the curve's reductions
    run in torchmetrics' order: forward() equals torchmetrics' forward() bit for bit, for every average, sync-free."""
    classes = 7  # several reduction lanes: a strided state reduces in another order (1-2 ulp off, before the fix)
    for average in _averages(name):
        extra = {"thresholds": 20} if average is None else {"thresholds": 20, "average": average}
        extra["num_classes" if name.startswith("Multiclass") else "num_labels"] = classes
        kwargs = {**_kwargs(name, 20, None), **extra}
        ours, theirs = getattr(tac, name)(**kwargs), getattr(tmc, name)(**kwargs)
        rng = torch.Generator().manual_seed(29)
        for _ in range(25):
            n = int(torch.randint(1, 40, (), generator=rng))
            if name.startswith("Multiclass"):
                preds = torch.randn(n, classes, generator=rng).softmax(-1)
                target = torch.randint(0, classes, (n,), generator=rng)
            else:
                preds = torch.rand(n, classes, generator=rng)
                target = torch.randint(0, 2, (n, classes), generator=rng)
            with no_host_sync():
                value = _quiet(ours, preds, target)
            assert_same(value, _quiet(theirs, preds, target), exact=True, where=f"{name}({average})")
        assert_same(_quiet(ours.compute), _quiet(theirs.compute), exact=True)
