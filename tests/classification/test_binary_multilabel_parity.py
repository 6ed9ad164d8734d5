"""Parity of the accelerated binary and multilabel metrics with the installed torchmetrics.

Expected values always come from torchmetrics on the same inputs. Value errors are the one intended difference:
torchmetrics raises them in ``update``, ours in ``compute()`` (tested at the end of this module).
"""

import inspect
import io
import math
import pickle

import pytest
import torch
import torchmetrics.classification as tmc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torchmetrics import MetricCollection

import torchmetrics_async.classification as tac
from tests.classification._binary_multilabel import (
    NAMES,
    NUM_LABELS,
    call,
    compute,
    has_average,
    has_zero_division,
    is_confmat,
    is_multilabel,
    make_pair,
    run_side_by_side,
    shape_for,
)
from tests.parity import torchmetrics_text
from torchmetrics_async import _torchmetrics as seam

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
FLOAT_DTYPES = [torch.float32, torch.float32, torch.float16, torch.bfloat16, torch.float64]


# --------------------------------------------------------------------------------------------------------------------
# Property-based: argument combinations x random inputs x update/forward/compute
# --------------------------------------------------------------------------------------------------------------------


@st.composite
def arguments(draw, name: str) -> dict:
    kwargs = {
        "threshold": draw(st.sampled_from([0.5, 0.25, 0.0, 1.0])),
        "ignore_index": draw(st.sampled_from([None, None, -1, 0, 1, 3])),
        "validate_args": draw(st.booleans()),
    }
    if is_confmat(name):
        kwargs["normalize"] = draw(st.sampled_from([None, "none", "true", "pred", "all"]))
    else:
        kwargs["multidim_average"] = draw(st.sampled_from(["global", "global", "samplewise"]))
    if has_average(name):
        kwargs["average"] = draw(st.sampled_from(["micro", "macro", "weighted", "none", None]))
    if has_zero_division(name):
        kwargs["zero_division"] = draw(st.sampled_from([0, 1]))
    if "FBeta" in name:
        kwargs["beta"] = draw(st.sampled_from([0.5, 2.0]))
    return kwargs


@st.composite
def batches(draw, name: str, ignore_index: int | None, samplewise: bool) -> tuple:
    """A valid batch: targets in {0, 1} or ``ignore_index``; preds probabilities, logits, labels or bools."""
    min_extra = 1 if samplewise else 0  # samplewise needs an extra dimension (else both reject it: tested below)
    extra = tuple(draw(st.lists(st.integers(0, 3), min_size=min_extra, max_size=2)))
    shape = shape_for(name, draw(st.integers(1, 5)), extra)
    n = math.prod(shape)
    kind = draw(st.sampled_from(["probs", "probs", "logits", "labels", "bool"]))
    if kind == "probs":  # a 1/8 grid: 0, 1 and every threshold above occur exactly
        values = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
        preds = (torch.tensor(values, dtype=torch.float64) / 8).to(draw(st.sampled_from(FLOAT_DTYPES)))
    elif kind == "logits":
        values = draw(st.lists(st.integers(-16, 16), min_size=n, max_size=n))
        preds = (torch.tensor(values, dtype=torch.float64) / 4).to(draw(st.sampled_from(FLOAT_DTYPES)))
    else:
        preds = torch.tensor(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), dtype=torch.long)
        preds = preds.bool() if kind == "bool" else preds.to(draw(st.sampled_from([torch.long, torch.int32])))
    choices = [0, 1] if ignore_index is None else [0, 1, ignore_index]
    target = torch.tensor(draw(st.lists(st.sampled_from(choices), min_size=n, max_size=n)), dtype=torch.long)
    return preds.reshape(shape), target.reshape(shape).to(draw(st.sampled_from([torch.long, torch.long, torch.int32])))


@pytest.mark.sweep
@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_matches_torchmetrics(name, data):
    kwargs = data.draw(arguments(name))
    samplewise = kwargs.get("multidim_average") == "samplewise"
    steps = []
    for kind in data.draw(st.lists(st.sampled_from(["update", "forward"]), min_size=1, max_size=4)):
        steps.append((kind, *data.draw(batches(name, kwargs["ignore_index"], samplewise))))
    run_side_by_side(*make_pair(name, **kwargs), steps)


# --------------------------------------------------------------------------------------------------------------------
# Deterministic edge tables
# --------------------------------------------------------------------------------------------------------------------

NAN = math.nan
INF = math.inf

# (id, preds, target, extra kwargs); binary shapes, lifted to (N, NUM_LABELS) for multilabel by `_lift`.
EDGES = [
    ("probs-inside", [0.0, 0.2, 0.5, 1.0], [0, 1, 0, 1], {}),
    ("probs-exactly-at-threshold", [0.5, 0.5, 0.25, 0.75], [1, 0, 1, 0], {}),
    ("threshold-0-and-1", [0.0, 1.0, 0.0, 1.0], [0, 1, 1, 0], {"threshold": 0.0}),
    ("one-pred-just-above-1", [0.2, 0.4, 0.6, 1.0001], [0, 1, 0, 1], {}),
    ("one-pred-just-below-0", [-1e-4, 0.4, 0.6, 0.9], [0, 1, 0, 1], {}),
    ("negative-zero", [-0.0, 0.4, 0.6, 0.9], [0, 1, 0, 1], {}),
    ("logits", [-3.0, -0.1, 0.1, 3.0], [0, 1, 0, 1], {}),
    ("infinite-logits", [-INF, INF, 0.3, 0.7], [0, 1, 1, 0], {}),
    ("nan-among-probs", [0.3, NAN, 0.7, 0.9], [1, 0, 1, 0], {}),
    ("all-nan", [NAN, NAN, NAN, NAN], [1, 0, 1, 0], {}),
    ("nan-among-logits", [-2.0, NAN, 2.0, 0.4], [1, 0, 1, 0], {}),
    ("logit-only-where-ignored", [0.2, 0.7, 5.0, 0.4], [0, 1, -1, 1], {"ignore_index": -1}),
    ("ignore-everything", [0.2, 0.7, 0.9, 0.4], [-1, -1, -1, -1], {"ignore_index": -1}),
    ("ignore-index-0", [0.2, 0.7, 0.9, 0.4], [0, 1, 0, 1], {"ignore_index": 0}),
    ("ignore-index-1", [0.2, 0.7, 0.9, 0.4], [0, 1, 0, 1], {"ignore_index": 1}),
    ("int-labels", [0, 1, 1, 0], [0, 1, 0, 1], {}),
    ("bool-labels", [False, True, True, False], [0, 1, 0, 1], {}),
    ("batch-of-one", [0.7], [1], {}),
    ("all-negative", [0.1, 0.2, 0.3, 0.4], [0, 0, 0, 0], {}),
    ("all-positive", [0.6, 0.7, 0.8, 0.9], [1, 1, 1, 1], {}),
]
DTYPES = [torch.float16, torch.bfloat16, torch.float64]


def _lift(name, values, dtype=None):
    """A binary row becomes NUM_LABELS columns (shifted copies) for multilabel metrics."""
    tensor = torch.tensor(values) if dtype is None else torch.tensor(values, dtype=dtype)
    if not is_multilabel(name):
        return tensor
    return torch.stack([tensor.roll(shift) for shift in range(NUM_LABELS)], dim=1)


def _edge_kwargs(name, extra, validate_args):
    kwargs = {"validate_args": validate_args, **extra}
    if is_confmat(name):
        kwargs["normalize"] = "true"
    elif has_average(name):
        kwargs["average"] = "none"
    return kwargs


@pytest.mark.sweep
@pytest.mark.parametrize("validate_args", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_edge_cases_match_torchmetrics(name, validate_args):
    for case, preds_row, target_row, extra in EDGES:  # one test per class: pytest's per-test overhead dominates
        preds, target = _lift(name, preds_row), _lift(name, target_row)
        steps = [("forward", preds, target), ("update", preds, target)]
        try:
            run_side_by_side(*make_pair(name, **_edge_kwargs(name, extra, validate_args)), steps)
        except AssertionError as err:
            raise AssertionError(case) from err


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_float_dtypes_match_torchmetrics(name, dtype):
    for values in ([0.1, 0.5, 0.51, 1.0], [-1.5, 0.0, 0.5, 2.0], [0.3, NAN, 0.7, 0.2]):
        preds, target = _lift(name, values, dtype), _lift(name, [0, 1, 1, 0])
        run_side_by_side(*make_pair(name), [("forward", preds, target), ("update", preds, target)])


@pytest.mark.parametrize("name", NAMES)
def test_other_target_dtypes_match_torchmetrics(name):
    preds = _lift(name, [0.2, 0.7, 0.9, 0.4])
    for target in (_lift(name, [0.0, 1.0, 0.0, 1.0]), _lift(name, [0, 1, 0, 1]).to(torch.uint8)):
        steps = [("forward", preds, target), ("update", preds, target)]
        if name == "MultilabelConfusionMatrix" and target.is_floating_point():
            # torchmetrics' bincount rejects float targets here (NotImplementedError); ours counts them as their
            # integer values (README deviations), which the reference gets as integers.
            reference, ours = make_pair(name)
            for kind, p, t in steps:
                torch.testing.assert_close(call(ours, kind, p, t)[0], call(reference, kind, p, t.long())[0])
            torch.testing.assert_close(ours.compute(), reference.compute())
            continue
        run_side_by_side(*make_pair(name), steps)


@pytest.mark.parametrize("name", NAMES)
def test_bool_targets_match_torchmetrics(name):
    # The outcome code 2 * target + label must not be computed in bool (an OR there).
    preds = _lift(name, [0.2, 0.7, 0.9, 0.4])
    for target in (_lift(name, [0, 1, 0, 1]).bool(), _lift(name, [1, 1, 0, 0]).bool()):
        run_side_by_side(*make_pair(name), [("forward", preds, target), ("update", preds, target)])


@pytest.mark.sweep
@pytest.mark.parametrize("ignore_index", [0, 1])
@pytest.mark.parametrize("name", NAMES)
def test_bool_targets_with_ignore_index_match_torchmetrics(name, ignore_index):
    """An ignored bool target is valid (torchmetrics writes its -1 into the bool target: True, and counts it)."""
    # The deferred message's allowed set lists each value once (not "{0, 1, 0}").
    assert "values outside {0, 1} but" in seam.binary_target_values_message(ignore_index)
    for preds in (_lift(name, [0.2, 0.7, 0.9, 0.4]), _lift(name, [4.1, -2.0, 0.0, 3.0]), _lift(name, [0, 1, 1, 0])):
        for target in (_lift(name, [0, 1, 0, 1]).bool(), _lift(name, [0, 0, 0, 0]).bool()):
            run_side_by_side(
                *make_pair(name, ignore_index=ignore_index), [("forward", preds, target), ("update", preds, target)]
            )


@pytest.mark.parametrize("name", [n for n in NAMES if not is_confmat(n)])
def test_unvalidated_targets_that_wrap_when_doubled_count_nowhere(name):
    # 2 * target wraps to 0 or 2 for these values; torchmetrics counts them in no outcome, and so must the codes.
    preds = _lift(name, [0.2, 0.7, 0.9, 0.4])
    targets = (
        _lift(name, [0, 1, 128, 129]).to(torch.uint8),
        _lift(name, [-128, 1, -127, 0]).to(torch.int8),
        _lift(name, [-(2**63), 1, -(2**63) + 1, 0]),
    )
    for target in targets:
        reference, ours = make_pair(name, validate_args=False)
        run_side_by_side(reference, ours, [("forward", preds, target), ("update", preds, target)])


@pytest.mark.parametrize("name", [n for n in NAMES if not is_confmat(n)])
def test_samplewise_extra_dimensions_match_torchmetrics(name):
    g = torch.Generator().manual_seed(0)
    steps = []
    for batch in (3, 1, 2):
        shape = shape_for(name, batch, (4, 2))
        steps.append(("forward", torch.rand(shape, generator=g), torch.randint(0, 2, shape, generator=g)))
    run_side_by_side(*make_pair(name, multidim_average="samplewise"), steps)


@pytest.mark.parametrize("name", NAMES)
def test_empty_extra_dimension_matches_torchmetrics(name):
    shape = shape_for(name, 3, (0,))
    run_side_by_side(*make_pair(name), [("forward", torch.rand(shape), torch.randint(0, 2, shape))])


def _unusual_shapes(name):
    """Empty batches, mismatched shapes, 0-dim, missing dimensions: torchmetrics rejects most of them eagerly (ours
    must raise the same type with the same message) and accepts some (confusion matrices take empty batches)."""
    ok = shape_for(name, 4)
    cases = [
        ("empty-batch", {}, torch.rand(shape_for(name, 0)), shape_for(name, 0)),
        ("shape-mismatch", {}, torch.rand(ok), shape_for(name, 5)),
        ("0-dim", {}, torch.tensor(0.5), ()),
    ]
    if not is_confmat(name):
        cases.append(("samplewise-without-extra-dim", {"multidim_average": "samplewise"}, torch.rand(ok), ok))
    if is_multilabel(name):
        cases.append(("wrong-num-labels", {}, torch.rand(4, NUM_LABELS + 1), (4, NUM_LABELS + 1)))
        cases.append(("1-d-multilabel", {}, torch.rand(4), (4,)))
    return [(case, kwargs, preds, torch.zeros(shape, dtype=torch.long)) for case, kwargs, preds, shape in cases]


# How preds and target fit together (and the multilabel label dimension) is checked whatever validate_args: shapes
# are free.
ALWAYS_CHECKED = ("shape-mismatch", "wrong-num-labels")


@pytest.mark.sweep
@pytest.mark.parametrize("validate_args", [True, False])
@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("name", NAMES)
def test_unusual_shapes_like_torchmetrics(name, kind, validate_args):
    rejected = 0
    for case, kwargs, preds, target in _unusual_shapes(name):
        reference, ours = make_pair(name, validate_args=validate_args, **kwargs)
        if case in ALWAYS_CHECKED or (is_multilabel(name) and case in ("0-dim", "1-d-multilabel")):
            # Unvalidated, torchmetrics fails in a kernel or broadcasts; ours raises its validated error all the same.
            reference = make_pair(name, validate_args=True, **kwargs)[0]
        try:
            run_side_by_side(reference, ours, [(kind, preds, target)])
        except AssertionError as err:
            raise AssertionError(case) from err
        rejected += reference._update_count > 0 and call(reference, kind, preds, target)[1] is not None
    if validate_args:
        assert rejected >= 1  # the test does exercise eager rejection


def test_compute_groups_share_states_without_aliasing():
    """A MetricCollection compute group shares state tensors; our in-place updates must not double count."""
    names = ["BinaryAccuracy", "BinaryPrecision", "BinaryRecall", "BinaryF1Score"]
    ours = MetricCollection({n: getattr(tac, n)() for n in names}, compute_groups=True)
    reference = MetricCollection({n: getattr(tmc, n)() for n in names}, compute_groups=True)
    g = torch.Generator().manual_seed(1)
    for step in range(4):
        preds, target = torch.rand(16, generator=g), torch.randint(0, 2, (16,), generator=g)
        if step % 2:
            torch.testing.assert_close(ours(preds, target), reference(preds, target))
        else:
            ours.update(preds, target)
            reference.update(preds, target)
    torch.testing.assert_close(ours.compute(), reference.compute())


# --------------------------------------------------------------------------------------------------------------------
# Value checks: raised by compute() instead of update(), with torchmetrics' wording
# --------------------------------------------------------------------------------------------------------------------


def _invalid_inputs(name, ignore_index=None):
    """(what, preds, target): torchmetrics raises RuntimeError in update for each."""
    preds = _lift(name, [0.2, 0.7, 0.9, 0.4])
    return [
        ("target-2", preds, _lift(name, [0, 1, 2, 1])),
        ("target-minus-1", preds, _lift(name, [0, 1, -1, 1])),
        ("target-nan", preds, _lift(name, [0.0, 1.0, NAN, 1.0])),
        ("target-0.5", preds, _lift(name, [0.0, 1.0, 0.5, 1.0])),
        ("int-preds-2", _lift(name, [0, 1, 2, 1]), _lift(name, [0, 1, 0, 1])),
    ]


@pytest.mark.parametrize("name", NAMES)
def test_invalid_values_raise_in_compute_not_update(name):
    for what, preds, target in _invalid_inputs(name):
        reference, ours = make_pair(name)
        _, ref_err = call(reference, "update", preds.clone(), target.clone())
        assert isinstance(ref_err, RuntimeError), what
        for kind in ("update", "forward"):
            _, err = call(ours, kind, preds, target)
            assert err is None, f"{what} {kind}: {err!r}"
        _, err = compute(ours)
        assert isinstance(err, RuntimeError), what
        ref_text, text = str(ref_err), torchmetrics_text(err)
        # Same wording; only the data-dependent part (torchmetrics' torch.unique listing) is replaced.
        assert text.split(": ", 1)[0] == ref_text.split(": ", 1)[0], (text, ref_text)
        assert text.split(" but expected only")[1] == ref_text.split(" but expected only")[1], (text, ref_text)


@pytest.mark.parametrize("name", NAMES)
def test_invalid_targets_next_to_ignore_index(name):
    """ignore_index is allowed; anything else outside {0, 1} is not (message names the allowed set)."""
    preds = _lift(name, [0.2, 0.7, 0.9, 0.4])
    reference, ours = make_pair(name, ignore_index=-1)
    run_side_by_side(reference, ours, [("update", preds, _lift(name, [0, -1, 1, -1]))])
    ours.update(preds, _lift(name, [0, -1, 3, 1]))
    with pytest.raises(RuntimeError) as err:
        ours.compute()
    assert torchmetrics_text(err.value) == seam.binary_target_values_message(-1)
    assert "values outside {0, 1, -1}" in str(err.value)


@pytest.mark.parametrize("name", NAMES)
def test_no_value_checks_without_validation(name):
    """validate_args=False records nothing and never crashes, whatever the values."""
    _, ours = make_pair(name, validate_args=False)
    for _, preds, target in _invalid_inputs(name):
        for kind in ("update", "forward"):
            _, err = call(ours, kind, preds, target)
            assert err is None, err
    value, err = compute(ours)
    assert err is None, err
    assert isinstance(value, torch.Tensor)
    assert not [key for key in ours._defaults if key.startswith("invalid_")]


SURVIVAL = ["BinaryAccuracy", "BinaryConfusionMatrix", "MultilabelF1Score", "MultilabelExactMatch"]


@pytest.mark.parametrize("name", SURVIVAL)
def test_deferred_error_survives_forward_state_dict_pickle_and_reset_clears_it(name):
    _, ours = make_pair(name)
    good = _lift(name, [0.2, 0.7, 0.9, 0.4]), _lift(name, [0, 1, 1, 0])
    bad = good[0], _lift(name, [0, 1, 2, 0])
    ours(*bad)  # forward
    ours(*good)
    with pytest.raises(RuntimeError):
        ours.compute()

    ours.persistent(True)
    buffer = io.BytesIO()
    torch.save(ours.state_dict(), buffer)
    buffer.seek(0)
    _, restored = make_pair(name)
    restored.load_state_dict(torch.load(buffer))
    with pytest.raises(RuntimeError):
        restored.compute()

    with pytest.raises(RuntimeError):
        pickle.loads(pickle.dumps(ours)).compute()

    ours.reset()
    ours.update(*good)
    ours.compute()


def test_deferred_messages_are_torchmetrics_wording():
    """Each restated message against the one torchmetrics raises, outside the replaced data-dependent part."""
    cases = [
        (tmc.BinaryAccuracy(), torch.tensor([0, 1]), torch.tensor([0, 2]), seam.binary_target_values_message(None)),
        (tmc.BinaryAccuracy(ignore_index=-1), torch.tensor([0, 1]), torch.tensor([3, 1]),
         seam.binary_target_values_message(-1)),
        (tmc.BinaryAccuracy(), torch.tensor([0, 2]), torch.tensor([0, 1]), seam.label_preds_values_message(True)),
        (tmc.MultilabelAccuracy(num_labels=2), torch.tensor([[0, 2]]), torch.tensor([[0, 1]]),
         seam.label_preds_values_message(False)),
        (tmc.BinaryConfusionMatrix(), torch.tensor([0, 2]), torch.tensor([0, 1]),
         seam.label_preds_values_message(False)),
    ]  # fmt: skip
    for metric, preds, target, ours in cases:
        with pytest.raises(RuntimeError) as err:
            metric.update(preds, target)
        theirs = str(err.value)
        assert ours.split(": ", 1)[0] == theirs.split(": ", 1)[0]
        assert ours.split(" but expected only")[1] == theirs.split(" but expected only")[1]


def test_eager_shape_messages_are_torchmetrics_own():
    for metric, preds, target, message in [
        (tmc.BinaryAccuracy(multidim_average="samplewise"), torch.rand(3), torch.ones(3, dtype=torch.long),
         seam.BINARY_SAMPLEWISE_NDIM_MESSAGE),
        (tmc.MultilabelAccuracy(num_labels=2, multidim_average="samplewise"), torch.rand(3, 2),
         torch.ones(3, 2, dtype=torch.long), seam.MULTILABEL_SAMPLEWISE_NDIM_MESSAGE),
        (tmc.MultilabelAccuracy(num_labels=3), torch.rand(3, 2), torch.ones(3, 2, dtype=torch.long),
         seam.num_labels_mismatch_message(2, 3)),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match="Expected") as err:
            metric.update(preds, target)
        assert str(err.value) == message


@pytest.mark.parametrize("name", NAMES)
def test_same_name_base_and_constructor_arguments(name):
    cls, reference = getattr(tac, name), getattr(tmc, name)
    assert issubclass(cls, reference)
    assert cls.__name__ == name
    assert inspect.signature(cls) == inspect.signature(reference)
