"""Parity of the accelerated multiclass metrics with the installed torchmetrics, on the same inputs.

Property-based runs draw a metric, its arguments (``average``, ``top_k``, ``multidim_average``, ``ignore_index``,
``zero_division``, ``normalize``, ``validate_args``, ``num_classes=None``) and a few ``update``/``forward`` steps on
labels or scores (ties on purpose: scores sit on a coarse grid), with extra dimensions, batches of one and empty extra
dimensions, and compare ``forward``'s batch values, ``compute()`` and the states. Deterministic tables cover the edges
and the eager errors; invalid values must raise ``RuntimeError`` at ``compute()`` instead of in ``update``.
"""

import copy
import inspect
import pickle
import warnings
from typing import Any

import pytest
import torch
import torchmetrics.classification as tmc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchmetrics_async.classification.multiclass as mc
from tests.parity import assert_same
from torchmetrics_async import _torchmetrics as seam
from torchmetrics_async._torchmetrics import dim_zero_cat

NAMES = list(mc.__all__)
STAT_SCORES = [n for n in NAMES if n not in ("MulticlassExactMatch", "MulticlassConfusionMatrix")]
VALUES_MESSAGE = r"^Detected more unique values in `(target|preds)` than expected\. Expected only values in "
# Raised by torchmetrics for malformed inputs (shape-dependent only); ours must raise the same type eagerly.
EAGER = (RuntimeError, ValueError, IndexError)
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def make_pair(name: str, kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """The torchmetrics metric and ours, built with the same arguments (both must accept or reject them alike)."""
    reference_cls, accelerated_cls = getattr(tmc, name), getattr(mc, name)
    try:
        reference = reference_cls(**kwargs)
    except ValueError as err:
        with pytest.raises(type(err)):
            accelerated_cls(**kwargs)
        pytest.skip("both reject the arguments")  # pragma: no cover - strategies only draw accepted arguments
    return reference, accelerated_cls(**kwargs)


def assert_nan_where_floating(value: Any) -> None:
    """A violating batch's forward value: NaN in every floating-point tensor (integer counts have no NaN)."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        assert bool(torch.isnan(value).all()), value


def _call(metric: Any, kind: str, preds: torch.Tensor, target: torch.Tensor) -> tuple[Any, Exception | None]:
    call = metric if kind == "forward" else metric.update
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchmetrics' forward warns about NaNs in a normalized confusion matrix
        try:
            return call(preds, target), None
        except EAGER as err:
            return None, err


def compute(metric: Any) -> tuple[Any, Exception | None, list[str]]:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            value = metric.compute()
        except (RuntimeError, ValueError) as err:
            return None, err, []
    return value, None, [str(w.message) for w in record]


def states(metric: Any) -> dict[str, torch.Tensor]:
    """The count states torchmetrics and ours share the layout of (list states concatenated)."""
    out = {}
    for name in ("tp", "fp", "tn", "fn", "confmat", "correct"):
        value = getattr(metric, name, None)
        if isinstance(value, list):
            value = dim_zero_cat(value) if value else None
        if value is not None:
            out[name] = value
    return out


def invalid_values(kwargs: dict[str, Any], steps: list[tuple[str, torch.Tensor, torch.Tensor]]) -> bool:
    """Whether a counted target (or label prediction) lies outside ``[0, num_classes)``: what ours reports."""
    classes = kwargs.get("num_classes")
    ignore = kwargs.get("ignore_index")
    if classes is None and kwargs.get("multidim_average") == "samplewise":
        # torchmetrics' one-hot form over a single class, with label 1 as its sentinel for an ignore_index not 0
        classes = 1 if ignore in (None, 0) else 2
    if classes is None:
        return False
    for _, preds, target in steps:
        keep = torch.ones_like(target, dtype=torch.bool) if ignore is None else target != ignore
        labels = [target, preds] if preds.shape == target.shape else [target]
        if any(bool((((x < 0) | (x >= classes)) & keep).any()) for x in labels):
            return True
    return False


def run_pair(
    reference: Any,
    accelerated: Any,
    steps: list[tuple[str, torch.Tensor, torch.Tensor]],
    invalid_steps: list[bool] | None = None,
) -> str:
    """Feed both metrics the same steps and compare; returns "rejected", "invalid" or "ok".

    An input torchmetrics rejects must be rejected by ours with the same exception type, in the same call. A
    ``RuntimeError`` torchmetrics raises in ``update`` that ours does not (a value error) must come from ours'
    ``compute()`` instead; so must out-of-range values torchmetrics lets through (``invalid``: ours checks the range,
    torchmetrics counts unique values). Our ``update``/``forward`` must leave their inputs alone, and our ``forward``
    on a batch with out-of-range values returns NaN (the violation is recorded for ``compute()``).
    """
    invalid_steps = invalid_steps or [False] * len(steps)
    invalid = any(invalid_steps)
    deferred = False
    for (kind, preds, target), invalid_step in zip(steps, invalid_steps, strict=True):
        ref_out, ref_exc = _call(reference, kind, preds.clone(), target.clone())
        before = preds.clone(), target.clone()
        acc_out, acc_exc = _call(accelerated, kind, preds, target)
        torch.testing.assert_close((preds, target), before, rtol=0, atol=0)
        if acc_exc is not None:
            assert isinstance(acc_exc, type(ref_exc)), f"torchmetrics: {ref_exc!r}; accelerated: {acc_exc!r}"
            return "rejected"
        if ref_exc is not None:
            assert isinstance(ref_exc, RuntimeError), f"torchmetrics rejected eagerly, ours did not: {ref_exc!r}"
            deferred = True
            continue
        if kind == "forward" and invalid_step and accelerated.validate_args:
            assert_nan_where_floating(acc_out)
        elif kind == "forward" and not deferred:
            assert_same(acc_out, ref_out)
    if deferred or invalid:
        assert invalid, "torchmetrics raised on valid values"
        if accelerated.validate_args:
            with pytest.raises(RuntimeError, match=VALUES_MESSAGE):
                accelerated.compute()
        else:  # unvalidated: ours records nothing and never fails (torchmetrics' kernels may)
            compute(accelerated)
        return "invalid"
    acc_value, acc_exc, acc_warnings = compute(accelerated)
    ref_value, ref_exc, ref_warnings = compute(reference)
    assert type(acc_exc) is type(ref_exc), f"compute: torchmetrics {ref_exc!r}; accelerated {acc_exc!r}"
    if ref_exc is None:
        assert_same(acc_value, ref_value)
        assert acc_warnings == ref_warnings
        assert_same(states(accelerated), states(reference))
    return "ok"


# --------------------------------------------------------------------------------------------------------------------
# Strategies

IGNORE = st.sampled_from(["none", "none", "inside", "minus-one", "num-classes", "large"])


def _ignore_index(kind: str, num_classes: int | None, draw: Any) -> int | None:
    if kind == "none":
        return None
    if kind == "inside":
        return draw(st.integers(0, (num_classes or 1) - 1))
    return {"minus-one": -1, "num-classes": num_classes or 1, "large": 255}[kind]


@st.composite
def configs(draw: Any, name: str) -> dict[str, Any]:
    """Constructor arguments torchmetrics accepts for ``name``."""
    validate_args = draw(st.booleans())
    if name == "MulticlassConfusionMatrix":
        num_classes = draw(st.integers(2, 5))
        normalize = draw(st.sampled_from([None, "none", "true", "pred", "all"]))
        ignore = _ignore_index(draw(IGNORE), num_classes, draw)
        return {
            "num_classes": num_classes,
            "ignore_index": ignore,
            "normalize": normalize,
            "validate_args": validate_args,
        }
    multidim_average = draw(st.sampled_from(["global", "samplewise"]))
    if name == "MulticlassExactMatch":
        num_classes = draw(st.integers(2, 5))
        ignore = _ignore_index(draw(IGNORE), num_classes, draw)
        return {
            "num_classes": num_classes,
            "multidim_average": multidim_average,
            "ignore_index": ignore,
            "validate_args": validate_args,
        }
    average = draw(st.sampled_from(["micro", "macro", "weighted", "none", None]))
    # num_classes=None is allowed with average="micro" (torchmetrics counts it as one class).
    num_classes = draw(st.one_of(st.integers(2, 5), st.just(None))) if average == "micro" else draw(st.integers(2, 5))
    kwargs = {
        "num_classes": num_classes,
        "top_k": draw(st.integers(1, num_classes)) if num_classes else 1,
        "average": average,
        "multidim_average": multidim_average,
        "ignore_index": _ignore_index(draw(IGNORE), num_classes, draw),
        "validate_args": validate_args,
        "zero_division": draw(st.sampled_from([0, 1])),
    }
    if name == "MulticlassFBetaScore":
        kwargs["beta"] = draw(st.sampled_from([0.5, 2.0]))
    return kwargs


@st.composite
def batches(draw: Any, kwargs: dict[str, Any], valid: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``(preds, target)``: labels or scores ``(N, C, ...)``; with ``valid=False`` some labels are out of range."""
    num_classes = kwargs["num_classes"]
    samplewise = kwargs.get("multidim_average") == "samplewise"
    top_k = kwargs.get("top_k", 1)
    ignore = kwargs["ignore_index"]
    # num_classes=None: torchmetrics' samplewise form is one-hot over a single class; its micro form takes any label.
    classes = num_classes or (1 if samplewise else 4)
    n = draw(st.sampled_from([1, 1, 2, 3, 5]))
    extra = tuple(draw(st.lists(st.integers(0, 3), min_size=1 if samplewise else 0, max_size=2)))
    shape = (n, *extra)
    numel = n * int(torch.tensor(extra).prod()) if extra else n

    def labels(allow_ignore: bool) -> torch.Tensor:
        pool = list(range(classes))
        if allow_ignore and ignore is not None:
            pool += [ignore] * 2
        values = draw(st.lists(st.sampled_from(pool), min_size=numel, max_size=numel))
        if not valid:
            bad = st.sampled_from([-2, classes, classes + 3, 300])
            values = [draw(bad) if draw(st.integers(0, 3)) == 0 else v for v in values]
        return torch.tensor(values, dtype=torch.long).reshape(shape)

    target = labels(allow_ignore=True).to(draw(st.sampled_from([torch.long, torch.long, torch.int32])))
    scores = top_k > 1 or draw(st.booleans())
    if not scores:
        return labels(allow_ignore=False), target
    columns = num_classes or (1 if samplewise else draw(st.integers(2, 4)))
    count = numel * columns
    grid = draw(st.lists(st.integers(-4, 4), min_size=count, max_size=count))
    preds = (torch.tensor(grid, dtype=torch.float64) / 4).reshape(n, *extra, columns).movedim(-1, 1)
    return preds.to(draw(st.sampled_from([torch.float32, torch.float64]))).contiguous(), target


@st.composite
def step_lists(draw: Any, kwargs: dict[str, Any], valid: bool = True) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    kinds = draw(st.lists(st.sampled_from(["update", "forward"]), min_size=1, max_size=4))
    return [(kind, *draw(batches(kwargs, valid))) for kind in kinds]


# --------------------------------------------------------------------------------------------------------------------
# Property-based parity


@pytest.mark.sweep
@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_matches_torchmetrics(name: str, data: Any) -> None:
    kwargs = data.draw(configs(name))
    reference, accelerated = make_pair(name, kwargs)
    steps = data.draw(step_lists(kwargs))
    assert not invalid_values(kwargs, steps)
    run_pair(reference, accelerated, steps)


@pytest.mark.sweep
@pytest.mark.parametrize(
    "name", ["MulticlassAccuracy", "MulticlassStatScores", "MulticlassExactMatch", "MulticlassConfusionMatrix"]
)
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_invalid_values_raise_at_compute(name: str, data: Any) -> None:
    """Out-of-range labels: torchmetrics raises in ``update`` (or, counting unique values, lets some through: the
    stricter range check is a documented deviation); ours records them and ``compute()`` raises ``RuntimeError``.
    With ``validate_args=False`` ours never raises on them."""
    kwargs = data.draw(configs(name))
    steps = data.draw(step_lists(kwargs, valid=False))
    accelerated = getattr(mc, name)(**kwargs)
    bad = False
    for kind, preds, target in steps:
        (accelerated if kind == "forward" else accelerated.update)(preds, target)
        keep = (
            torch.ones_like(target, dtype=torch.bool)
            if kwargs["ignore_index"] is None
            else target != kwargs["ignore_index"]
        )
        classes = kwargs["num_classes"] or (1 if kwargs.get("multidim_average") == "samplewise" else None)
        if classes is not None:
            bad |= bool((((target < 0) | (target >= classes)) & keep).any())
            if preds.ndim == target.ndim:
                bad |= bool((((preds < 0) | (preds >= classes)) & keep).any())
    if kwargs["validate_args"] and bad:
        with pytest.raises(RuntimeError, match=r"^Detected more unique values in `(target|preds)`"):
            accelerated.compute()
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            accelerated.compute()


# --------------------------------------------------------------------------------------------------------------------
# Deterministic edge tables


def _scores(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _labels(high: int, *shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


EDGE_BATCHES = {
    "labels": (_labels(4, 8), _labels(4, 8, seed=2)),
    "scores": (_scores(8, 4), _labels(4, 8)),
    "batch-of-one-labels": (torch.tensor([2]), torch.tensor([2])),
    "batch-of-one-scores": (_scores(1, 4), torch.tensor([3])),
    "extra-dims": (_scores(3, 4, 2, 5), _labels(4, 3, 2, 5)),
    "extra-dims-labels": (_labels(4, 3, 5), _labels(4, 3, 5, seed=3)),
    "empty-extra-dim": (torch.zeros(2, 0, dtype=torch.long), torch.zeros(2, 0, dtype=torch.long)),
    "empty-extra-dim-scores": (torch.zeros(2, 4, 0), torch.zeros(2, 0, dtype=torch.long)),
    "absent-classes": (torch.tensor([0, 0, 1]), torch.tensor([0, 1, 1])),
    "all-ignored": (torch.tensor([0, 1, 2]), torch.tensor([-1, -1, -1])),
    "ties": (torch.zeros(5, 4), _labels(4, 5)),
    "fp16-scores": (_scores(6, 4).half(), _labels(4, 6)),
    "bf16-scores": (_scores(6, 4).bfloat16(), _labels(4, 6)),
    "int32-target": (_labels(4, 6), _labels(4, 6, seed=5).int()),
    "uint8-labels": (_labels(4, 6).to(torch.uint8), _labels(4, 6, seed=5).to(torch.uint8)),
    "float-labels": (_labels(4, 6).float(), _labels(4, 6, seed=5)),
    "target-ignore-mix": (_scores(6, 4), torch.tensor([0, -1, 3, -1, 2, 1])),
}

EDGE_CONFIGS = [
    {"average": "macro"},
    {"average": "micro"},
    {"average": "weighted"},
    {"average": None},
    {"average": "none", "ignore_index": -1},
    {"average": "macro", "ignore_index": 2},
    {"average": "micro", "ignore_index": -1},
    {"average": "macro", "multidim_average": "samplewise"},
    {"average": "micro", "multidim_average": "samplewise", "ignore_index": -1},
    {"average": "weighted", "multidim_average": "samplewise", "ignore_index": 0},
    {"average": "macro", "top_k": 2},
    {"average": "micro", "top_k": 3, "ignore_index": -1},
    {"average": None, "top_k": 4, "multidim_average": "samplewise"},
    {"average": "macro", "top_k": 2, "ignore_index": 1, "zero_division": 1},
    {"average": "micro", "num_classes": None},
    {"average": "macro", "validate_args": False},
]


def compare(name: str, kwargs: dict[str, Any], steps: list[tuple[str, torch.Tensor, torch.Tensor]]) -> str:
    reference, accelerated = make_pair(name, kwargs)
    return run_pair(reference, accelerated, steps, [invalid_values(kwargs, [step]) for step in steps])


def _three_steps(preds: torch.Tensor, target: torch.Tensor) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    return [("forward", preds, target), ("update", preds, target), ("forward", preds, target)]


# torchmetrics validates num_classes=None only with average="micro"; unvalidated, it takes every average.
@pytest.mark.parametrize(
    ("average", "validate_args"),
    [("micro", True), ("micro", False), ("macro", False), ("weighted", False), (None, False)],
)
@pytest.mark.parametrize("ignore_index", [-100, 1, 2])
def test_samplewise_without_num_classes_takes_torchmetrics_sentinel_label(
    average: str | None, ignore_index: int, validate_args: bool
) -> None:
    """num_classes=None, samplewise, ignore_index: torchmetrics' one-hot form over classes {0, 1} drops class 1.

    Label 1 is its sentinel (a target there is ignored, a prediction there is no class): torchmetrics returns numbers,
    which ours must give too, not a deferred error (issue 19, 9a).
    """
    kwargs = {"num_classes": None, "average": average, "multidim_average": "samplewise", "ignore_index": ignore_index}
    kwargs["validate_args"] = validate_args
    labels = torch.tensor([[1, 1, 0, 1], [0, 1, 1, 0], [1, 1, 1, 1]])
    target = torch.tensor([[0, ignore_index, 1, 0], [0, 0, ignore_index, 1], [1, 1, 1, 1]])
    scores = torch.stack([1 - labels.float(), labels.float()], dim=1)  # argmax: the labels
    for preds in (labels, scores):
        assert compare("MulticlassStatScores", kwargs, _three_steps(preds, target)) == "ok"


@pytest.mark.parametrize("multidim_average", ["global", "samplewise"])
def test_sentinel_label_unvalidated_matches_torchmetrics(multidim_average: str) -> None:
    """With num_classes given, label C is the same sentinel (top_k > 1 or samplewise, ignore_index outside [0, C)).

    Validated, ours reports it as out of range (a listed deviation); unvalidated, it counts as torchmetrics counts it.
    """
    kwargs = {"num_classes": 3, "top_k": 2, "multidim_average": multidim_average, "ignore_index": -1}
    target = torch.tensor([[0, 3, 1, -1], [2, 3, 3, 0]])
    scores = torch.rand(2, 3, 4, generator=torch.Generator().manual_seed(3))
    compare_kwargs = {**kwargs, "validate_args": False, "average": None}
    assert compare("MulticlassStatScores", compare_kwargs, _three_steps(scores, target)) == "invalid"
    reference, accelerated = make_pair("MulticlassStatScores", compare_kwargs)
    for metric in (reference, accelerated):
        metric.update(scores, target)
    assert_same(accelerated.compute(), reference.compute())


@pytest.mark.parametrize("config", EDGE_CONFIGS, ids=str)
def test_stat_scores_edge_table(config: dict[str, Any]) -> None:
    """The shared kernel: ``MulticlassStatScores`` returns every count, per class and sample where asked."""
    for batch in EDGE_BATCHES.values():
        compare("MulticlassStatScores", {"num_classes": 4, **config}, _three_steps(*batch))


# What differs between the stat-score metrics is their reduction: every average, top_k (macro weights), samplewise.
REDUCTION_CONFIGS = [
    {"average": "macro"},
    {"average": "micro"},
    {"average": "weighted"},
    {"average": None},
    {"average": "macro", "top_k": 2},
    {"average": "macro", "multidim_average": "samplewise", "ignore_index": 2},
    {"average": "weighted", "top_k": 3, "ignore_index": -1, "zero_division": 1},
]
REDUCTION_BATCHES = ["scores", "absent-classes", "all-ignored", "extra-dims", "ties", "batch-of-one-scores"]


@pytest.mark.sweep
@pytest.mark.parametrize("config", REDUCTION_CONFIGS, ids=str)
@pytest.mark.parametrize("name", [n for n in STAT_SCORES if n != "MulticlassStatScores"])
def test_reductions_edge_table(name: str, config: dict[str, Any]) -> None:
    kwargs = {"num_classes": 4, **config, **({"beta": 2.0} if name == "MulticlassFBetaScore" else {})}
    for batch in REDUCTION_BATCHES:
        preds, target = EDGE_BATCHES[batch]
        if kwargs.get("top_k", 1) > 1 and preds.ndim == target.ndim:
            continue
        compare(name, kwargs, _three_steps(preds, target))


@pytest.mark.parametrize(
    "config",
    [{}, {"ignore_index": -1}, {"ignore_index": 0}, {"multidim_average": "samplewise"}, {"validate_args": False}],
    ids=str,
)
def test_exact_match_edge_table(config: dict[str, Any]) -> None:
    for batch in EDGE_BATCHES.values():
        compare("MulticlassExactMatch", {"num_classes": 4, **config}, _three_steps(*batch))


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"normalize": "true"},
        {"normalize": "pred"},
        {"normalize": "all"},
        {"normalize": "none", "ignore_index": -1},
        {"ignore_index": 3, "normalize": "true"},
        {"validate_args": False, "normalize": "all"},
    ],
    ids=str,
)
def test_confusion_matrix_edge_table(config: dict[str, Any]) -> None:
    for batch in EDGE_BATCHES.values():
        compare("MulticlassConfusionMatrix", {"num_classes": 4, **config}, _three_steps(*batch))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("MulticlassStatScores", {"average": None}),
        ("MulticlassStatScores", {"average": "micro", "multidim_average": "samplewise"}),
        ("MulticlassAccuracy", {"top_k": 2}),
        ("MulticlassExactMatch", {}),
        ("MulticlassConfusionMatrix", {}),
        ("MulticlassConfusionMatrix", {"normalize": "all"}),
    ],
)
def test_set_dtype_matches_torchmetrics(name: str, kwargs: dict[str, Any], dtype: torch.dtype) -> None:
    reference, accelerated = make_pair(name, {"num_classes": 4, **kwargs})
    reference.set_dtype(dtype)
    accelerated.set_dtype(dtype)
    assert run_pair(reference, accelerated, _three_steps(*EDGE_BATCHES["extra-dims"])) == "ok"


def test_confusion_matrix_0_dim_inputs() -> None:
    assert (
        compare("MulticlassConfusionMatrix", {"num_classes": 3}, [("forward", torch.tensor(1), torch.tensor(2))])
        == "ok"
    )


SHAPE_ERRORS = {
    "different-shapes": (torch.tensor([0, 1, 2]), torch.tensor([0, 1])),
    "scores-wrong-classes": (_scores(4, 5), _labels(4, 4)),
    "int-scores": (_labels(4, 4, 4), _labels(4, 4)),
    "scores-extra-dims-mismatch": (_scores(2, 4, 3), _labels(4, 2, 2)),
    "target-two-dims-more": (_labels(4, 2), _labels(4, 2, 2, 2)),
    "preds-two-dims-more": (_scores(2, 4, 3, 3), _labels(4, 2)),
    "0-dim": (torch.tensor(1), torch.tensor(1)),
    "empty-batch-labels": (torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)),
    "empty-batch-scores": (torch.zeros(0, 4), torch.zeros(0, dtype=torch.long)),
    "samplewise-1d-labels": (_labels(4, 4), _labels(4, 4)),
    "samplewise-2d-scores": (_scores(4, 4), _labels(4, 4)),
}
# Without validation torchmetrics still rejects these by shape (reshape/index errors) or handles them as ours does;
# the others have no defined unvalidated behaviour to compare.
UNVALIDATED_SHAPE_CASES = ("0-dim", "empty-batch-labels", "empty-batch-scores", "samplewise-1d-labels", "int-scores")


@pytest.mark.parametrize("validate_args", [True, False])
@pytest.mark.parametrize("multidim_average", ["global", "samplewise"])
@pytest.mark.parametrize("case", list(SHAPE_ERRORS))
@pytest.mark.parametrize("name", ["MulticlassAccuracy", "MulticlassStatScores", "MulticlassExactMatch"])
def test_malformed_inputs_rejected_like_torchmetrics(name: str, case: str, multidim_average: str, validate_args: bool):
    """Same exception type, eagerly, wherever torchmetrics rejects the shapes (or the same values where it does not)."""
    if not validate_args and case not in UNVALIDATED_SHAPE_CASES:
        return
    kwargs = {"num_classes": 4, "multidim_average": multidim_average, "validate_args": validate_args}
    compare(name, kwargs, [("update", *SHAPE_ERRORS[case])])


@pytest.mark.parametrize("case", list(SHAPE_ERRORS))
def test_confusion_matrix_malformed_inputs_rejected_like_torchmetrics(case: str) -> None:
    compare("MulticlassConfusionMatrix", {"num_classes": 4}, [("update", *SHAPE_ERRORS[case])])


@pytest.mark.parametrize("preds", [_labels(4, 6), _labels(4, 6, 3), _labels(4, 6, 1), _scores(6, 4)])
def test_top_k_on_label_preds_fails_eagerly_like_torchmetrics(preds: torch.Tensor) -> None:
    """torchmetrics fails in a kernel (always, by shape); ours raises RuntimeError with a message that says why."""
    target = _labels(4, *preds.shape)
    reference, accelerated = make_pair("MulticlassAccuracy", {"num_classes": 4, "top_k": 2})
    with pytest.raises(RuntimeError):
        reference.update(preds, target)
    with pytest.raises(RuntimeError, match=r"^`top_k` > 1 needs `preds` of shape"):
        accelerated.update(preds, target)


# --------------------------------------------------------------------------------------------------------------------
# Messages, signatures, deferred errors


def test_shape_messages_are_torchmetrics_own() -> None:
    preds, target = _scores(4, 5), _labels(4, 4)
    for name in ("MulticlassAccuracy", "MulticlassConfusionMatrix", "MulticlassExactMatch"):
        reference, accelerated = make_pair(name, {"num_classes": 4})
        with pytest.raises(ValueError, match="equal to number of classes") as expected:
            reference.update(preds, target)
        with pytest.raises(ValueError, match="equal to number of classes") as actual:
            accelerated.update(preds, target)
        assert str(actual.value) == str(expected.value) == seam.MULTICLASS_NUM_CLASSES_SHAPE_MESSAGE
    reference, accelerated = make_pair("MulticlassConfusionMatrix", {"num_classes": 4})
    with pytest.raises(ValueError, match="same shape") as expected:
        reference.update(torch.tensor([0, 1]), torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="same shape") as actual:
        accelerated.update(torch.tensor([0, 1]), torch.tensor([0, 1, 2]))
    assert actual.value.args == expected.value.args


def test_confusion_matrix_nan_warning_is_torchmetrics_own() -> None:
    reference, accelerated = make_pair("MulticlassConfusionMatrix", {"num_classes": 3, "normalize": "true"})
    for metric in (reference, accelerated):
        metric.update(torch.tensor([0, 1]), torch.tensor([0, 1]))
    _, _, ref_warnings = compute(reference)
    _, _, acc_warnings = compute(accelerated)
    assert acc_warnings == ref_warnings == [seam.confusion_matrix_nan_message(3)]


@pytest.mark.parametrize("name", NAMES)
def test_signatures_are_torchmetrics(name: str) -> None:
    for method in ("__init__", "update"):
        ours = inspect.signature(getattr(getattr(mc, name), method))
        theirs = inspect.signature(getattr(getattr(tmc, name), method))
        assert [(p.name, p.default, p.kind) for p in ours.parameters.values()] == [
            (p.name, p.default, p.kind) for p in theirs.parameters.values()
        ]
    assert issubclass(getattr(mc, name), getattr(tmc, name))


@pytest.mark.parametrize(
    ("ignore_index", "name", "expected"),
    [
        (None, "target", "Expected only values in {0, ..., 2} but found other values in `target`."),
        (
            -1,
            "target",
            "Expected only values in {0, ..., 2} or the `ignore_index` -1 but found other values in `target`.",
        ),
        (1, "target", "Expected only values in {0, ..., 2} but found other values in `target`."),
        (
            -1,
            "preds",
            "Expected only values in {0, ..., 2} where `target` is not `ignore_index` but found other values",
        ),
    ],
)
def test_deferred_messages(ignore_index: int | None, name: str, expected: str) -> None:
    metric = mc.MulticlassAccuracy(num_classes=3, ignore_index=ignore_index)
    target = torch.tensor([0, 5]) if name == "target" else torch.tensor([0, 1])
    preds = torch.tensor([0, 1]) if name == "target" else torch.tensor([0, 7])
    metric.update(preds, target)
    with pytest.raises(RuntimeError) as err:
        metric.compute()
    assert f"Detected more unique values in `{name}` than expected. {expected}" in str(err.value)


BAD_TARGET = (torch.tensor([0, 1, 2]), torch.tensor([0, 1, 7]))


def _gather_from_bad_rank(result: torch.Tensor, group: Any = None) -> list[torch.Tensor]:
    """dist_sync_fn of two ranks: this one, and one whose states (check flags included) are all ones."""
    return [result, torch.ones_like(result)]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("carry", ["forward", "sync", "state_dict", "pickle", "deepcopy", "merge_state"])
def test_deferred_error_travels_with_the_state(name: str, carry: str) -> None:
    kwargs = {"num_classes": 3, **({"beta": 2.0} if name == "MulticlassFBetaScore" else {})}
    if carry == "sync":
        target = getattr(mc, name)(**kwargs, dist_sync_fn=_gather_from_bad_rank, distributed_available_fn=lambda: True)
        target.update(torch.tensor([0, 1]), torch.tensor([0, 2]))  # clean here: the violation is on the other rank
        with pytest.raises(RuntimeError, match=r"^Detected more unique values in `target`"):
            target.compute()
        return
    source = getattr(mc, name)(**kwargs)
    if carry == "forward":
        source(*BAD_TARGET)
        target = source
    else:
        source.update(*BAD_TARGET)
    if carry == "state_dict":
        source.persistent(True)
        target = getattr(mc, name)(**kwargs)
        target.persistent(True)
        target.load_state_dict(source.state_dict())
    elif carry == "pickle":
        target = pickle.loads(pickle.dumps(source))
    elif carry == "deepcopy":
        target = copy.deepcopy(source)
    elif carry == "merge_state":
        target = getattr(mc, name)(**kwargs)
        target.update(torch.tensor([0]), torch.tensor([0]))
        target.merge_state(source)
    with pytest.raises(RuntimeError, match=r"^Detected more unique values in `target`"):
        target.compute()
    target.reset()
    target.update(torch.tensor([0, 1]), torch.tensor([0, 2]))
    target.compute()


@pytest.mark.parametrize("name", NAMES)
def test_unvalidated_metrics_have_no_check_states_and_never_raise(name: str) -> None:
    kwargs = {"num_classes": 3, "validate_args": False, **({"beta": 2.0} if name == "MulticlassFBetaScore" else {})}
    metric = getattr(mc, name)(**kwargs)
    assert not [state for state in metric._defaults if state.startswith("invalid_")]
    metric.update(torch.tensor([-5, 1, 300]), torch.tensor([0, 1000, -7]))
    metric(torch.tensor([[0.1, 0.2, 0.7]]), torch.tensor([99]))
    metric(torch.tensor([[0.1, 0.2, 0.3, 0.9, 0.0]]), torch.tensor([1]))  # more score columns than classes
    metric.compute()


def test_forward_does_not_raise_but_compute_does() -> None:
    metric = mc.MulticlassAccuracy(num_classes=3)
    metric(*BAD_TARGET)
    metric(torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(RuntimeError):
        metric.compute()
