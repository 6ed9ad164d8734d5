"""Shared by the tests of the confusion-matrix-derived, calibration and hinge metrics: strategies, a side-by-side
runner against the installed torchmetrics, and the sync checks.

Batches are drawn per task: binary ``(N, ...)``, multiclass ``(N, C, ...)`` scores or ``(N, ...)`` labels, multilabel
``(N, L, ...)``; scores sit on a coarse grid (ties on purpose), inside [0, 1] (probabilities) or not (logits), with an
occasional NaN; targets mix in ``ignore_index``; batches may be empty.
"""

import itertools
import re
import warnings
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import torchmetrics_async.classification as tac
from tests.parity import assert_same
from torchmetrics_async._torchmetrics import dim_zero_cat
from torchmetrics_async.testing import HostSyncError, count_host_syncs, no_host_sync

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
EAGER = (RuntimeError, ValueError, IndexError)
VALUES_MESSAGE = r"^Detected (the following values|more unique values) in `target`"


def task(name: str) -> str:
    return "binary" if name.startswith("Binary") else "multilabel" if name.startswith("Multilabel") else "multiclass"


def ignore_indices(classes: int) -> st.SearchStrategy:
    return st.sampled_from([None, None, -1, 0, classes - 1, classes, 255])


@st.composite
def batches(draw: Any, name: str, kwargs: dict[str, Any], labels: bool, valid: bool = True) -> tuple:
    """``(preds, target)`` for ``name``; ``labels``: label ``preds`` may be drawn; ``valid=False``: bad targets."""
    kind = task(name)
    classes = kwargs.get("num_classes") or kwargs.get("num_labels") or 2
    ignore = kwargs.get("ignore_index")
    n = draw(st.sampled_from([0, 1, 2, 3, 5, 8]))
    extra = tuple(draw(st.lists(st.integers(1, 3), max_size=1)))
    target_shape = (n, classes, *extra) if kind == "multilabel" else (n, *extra)
    numel = int(torch.Size(target_shape).numel())
    pool = list(range(classes if kind == "multiclass" else 2))
    if ignore is not None:
        pool += [ignore] * 2
    values = draw(st.lists(st.sampled_from(pool), min_size=numel, max_size=numel))
    if not valid and numel:
        bad = draw(st.sampled_from([-2, classes + 3, 300]))
        values[draw(st.integers(0, numel - 1))] = bad
    target = torch.tensor(values, dtype=torch.long).reshape(target_shape)
    target = target.to(draw(st.sampled_from([torch.long, torch.long, torch.int32])))
    if labels and draw(st.booleans()):
        high = classes if kind == "multiclass" else 2
        preds = torch.tensor(draw(st.lists(st.integers(0, high - 1), min_size=numel, max_size=numel)))
        return preds.reshape(target_shape), target
    preds_shape = (n, classes, *extra) if kind != "binary" else target_shape
    count = int(torch.Size(preds_shape).numel())
    scale = draw(st.sampled_from([4.0, 4.0, 1.0]))  # [0, 1] probabilities, or logits in [-4, 4]
    low = 0 if scale == 4.0 and draw(st.booleans()) else -4
    grid = torch.tensor(draw(st.lists(st.integers(low, 4), min_size=count, max_size=count)), dtype=torch.float64)
    preds = (grid / scale).reshape(preds_shape)
    if count and draw(st.integers(0, 9)) == 0:
        preds.view(-1)[draw(st.integers(0, count - 1))] = float("nan")
    return preds.to(draw(st.sampled_from([torch.float32, torch.float32, torch.float64]))), target


@st.composite
def step_lists(draw: Any, name: str, kwargs: dict[str, Any], labels: bool) -> list[tuple[str, Any, Any]]:
    kinds = draw(st.lists(st.sampled_from(["update", "forward"]), min_size=1, max_size=4))
    return [(kind, *draw(batches(name, kwargs, labels))) for kind in kinds]


def _call(metric: Any, kind: str, preds: torch.Tensor, target: torch.Tensor) -> tuple[Any, Exception | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return (metric if kind == "forward" else metric.update)(preds, target), None
        except EAGER as err:
            return None, err


def assert_same_value(ours: Any, theirs: Any, name: str) -> None:
    """Equal values; the dtype differences allowed (documented): torchmetrics' int64 ``1``/``-1`` Matthews coefficient
    and its int64 CPU ``0`` for a zero l2 calibration error, where ours are floats."""
    if isinstance(theirs, torch.Tensor) and not theirs.is_floating_point():
        allowed = (1, -1) if "MatthewsCorrCoef" in name else (0,) if "CalibrationError" in name else ()
        assert ours.is_floating_point(), (ours, theirs)
        assert theirs.item() in allowed, (ours, theirs)
        theirs = theirs.to(ours.dtype)
    assert_same(ours, theirs, where=name)


def states(metric: Any) -> dict[str, torch.Tensor]:
    out = {}
    for name in ("confmat", "measures", "total", "confidences", "accuracies"):
        value = getattr(metric, name, None)
        if isinstance(value, list):
            value = dim_zero_cat(value) if value else None
        if value is not None:
            out[name] = value
    return out


def run_pair(name: str, kwargs: dict[str, Any], steps: list, tolerated: Any = None) -> str:
    """Feed torchmetrics' and our ``name`` the same steps; compare batch values, ``compute()`` and the states.

    ``tolerated(kind, preds, target, error)`` says whether torchmetrics' ``RuntimeError`` on a valid batch is a
    documented deviation (ours then goes on; the comparison stops there). Returns "rejected", "deviation" or "ok".
    """
    import torchmetrics.classification as tmc

    reference, ours = getattr(tmc, name)(**kwargs), getattr(tac, name)(**kwargs)
    for kind, preds, target in steps:
        ref_out, ref_exc = _call(reference, kind, preds.clone(), target.clone())
        before = preds.clone(), target.clone()
        out, exc = _call(ours, kind, preds, target)
        torch.testing.assert_close((preds, target), before, rtol=0, atol=0, equal_nan=True)
        if ref_exc is not None and exc is None and tolerated is not None and tolerated(kind, preds, target, ref_exc):
            return "deviation"
        assert isinstance(exc, type(ref_exc)), f"torchmetrics: {ref_exc!r}; accelerated: {exc!r}"
        if exc is not None:
            return "rejected"
        if kind == "forward":
            assert_same_value(out, ref_out, name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value, ref_value = ours.compute(), reference.compute()
    assert_same_value(value, ref_value, name)
    if kwargs.get("ignore_index") is None or "CalibrationError" not in name:  # ours keeps ignored entries there
        ours_states, ref_states = states(ours), states(reference)
        assert ours_states.keys() == ref_states.keys()
        for key, state in ours_states.items():
            torch.testing.assert_close(state, ref_states[key], equal_nan=True)
    return "ok"


def run_invalid(name: str, kwargs: dict[str, Any], good: tuple, bad: tuple, torchmetrics_raises: bool = True) -> None:
    """A bad target: torchmetrics raises in ``update``; ours returns NaN from ``forward`` and raises in ``compute()``.

    ``torchmetrics_raises=False``: torchmetrics lets the target through (its multiclass check skips targets when
    ``preds`` are scores, an operator-precedence bug; a documented deviation: ours checks the range always).
    """
    import torchmetrics.classification as tmc

    if torchmetrics_raises:
        with pytest.raises(RuntimeError):
            getattr(tmc, name)(**kwargs).update(*bad)
    else:
        getattr(tmc, name)(**kwargs).update(*bad)
    ours = getattr(tac, name)(**kwargs)
    ours.update(*good)
    value = ours(*bad)
    assert torch.isnan(value).all(), value
    with pytest.raises(RuntimeError, match=VALUES_MESSAGE):
        ours.compute()


def grid(base: dict[str, Any], options: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of ``options`` on top of ``base``."""
    keys = list(options)
    return [{**base, **dict(zip(keys, values, strict=True))} for values in itertools.product(*options.values())]


def check_sync_free(name: str, configs: list[dict[str, Any]], inputs: Any, kind: str, device: str) -> None:
    """``update``/``forward`` of ``name`` under every config (every 3rd on meta), every batch of ``inputs(device)``."""
    cases = []
    for kwargs in configs if device == "cpu" else configs[::3]:
        metric = getattr(tac, name)(**kwargs).to(device)  # moving the states is a copy: outside the context
        cases += [(f"{name}({kwargs}) {label}", metric, kind, batch) for label, batch in inputs(device).items()]
    assert_no_host_sync(cases)


def check_compute_reads(name: str, configs: list[dict[str, Any]], batch: tuple) -> None:
    """``compute()`` reads the host once (the deferred flags) with ``validate_args``, else never."""
    for kwargs in configs:
        metric = getattr(tac, name)(**kwargs)
        metric.update(*batch)
        with count_host_syncs() as syncs:
            metric.compute()
        assert syncs.total == int(kwargs["validate_args"]), syncs.summary()


def assert_no_host_sync(cases: list[tuple[str, Any, str, tuple]]) -> None:
    """``(label, metric, kind, batch)``: every call inside one ``no_host_sync()``; each ``reset()`` reads its own flags
    once."""
    step = ""
    try:
        with no_host_sync():
            for label, metric, kind, batch in cases:
                step = label
                (metric if kind == "forward" else metric.update)(*batch)
    except HostSyncError as err:
        raise AssertionError(f"{step}: {err}") from err
    unique = list({id(metric): metric for _, metric, _, _ in cases}.values())
    errors = []
    with count_host_syncs() as syncs:
        for metric in unique:
            try:
                metric.reset()
            except RuntimeError as err:  # invalid inputs among the cases: reported here
                errors.append(str(err))
    assert all(re.match(VALUES_MESSAGE, error) for error in errors), errors
    on_meta = unique[0].device.type == "meta"
    # Each metric's reset() reads its own flags (one read each); on meta there is nothing to read.
    expected = 0 if on_meta else sum(1 for m in unique if m._deferred_checks_registered())
    assert syncs.total == expected, syncs.summary()
