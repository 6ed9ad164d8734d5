"""Run a torchmetrics metric and its accelerated twin side by side on the same inputs and compare everything."""

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from torchmetrics_async.errors import ShapeMismatchError
from torchmetrics_async.testing import no_host_sync

NAN_ERROR = "Encountered `nan` values in tensor"


def torchmetrics_text(message: object) -> str:
    """The text of a deferred error or warning: torchmetrics' message as it is (nothing appended)."""
    text = str(message)
    assert "torchmetrics-async" not in text, text
    return text


NAN_WARNING = "Encountered `nan` values in tensor. Will be removed."


@dataclass
class Step:
    """One call: ``kind`` is "update" or "forward"; ``reference_args`` override what torchmetrics is given."""

    kind: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    reference_args: tuple | None = None
    reference_kwargs: dict | None = None


def _clone(x: Any) -> Any:
    return x.clone() if isinstance(x, Tensor) else copy.deepcopy(x)


def _nan_warnings(record: list) -> int:
    return sum(NAN_WARNING in str(w.message) for w in record)


def assert_same(
    actual: Any,
    expected: Any,
    *,
    exact: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
    where: str = "value",
) -> None:
    """``actual`` equals ``expected``: the one comparison of values in the test suite.

    - Structure, recursively: dicts with the same keys in the same order; lists and tuples of the same type and length.
    - Tensors (detached): the same dtype, device and shape; NaN equal to NaN; values within
      ``torch.testing.assert_close``'s default tolerance for their dtype, or bit for bit with ``exact=True``, or within
      ``rtol``/``atol`` where given (both).
    - Python numbers: the same type (``bool``, ``int``, ``float``), then as tensors.
    - Anything else: ``==``.

    ``where`` names the compared value in failure messages (paths into it are appended).
    """
    if exact:
        assert (rtol, atol) == (None, None), "exact=True is rtol=atol=0"
        rtol = atol = 0.0
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: {type(actual).__name__} instead of a dict"
        assert list(actual) == list(expected), f"{where}: keys {list(actual)} != {list(expected)}"
        for key, value in expected.items():
            assert_same(actual[key], value, rtol=rtol, atol=atol, where=f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected), f"{where}: {type(actual).__name__} instead of {type(expected).__name__}"
        assert len(actual) == len(expected), f"{where}: length {len(actual)} != {len(expected)}"
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, rtol=rtol, atol=atol, where=f"{where}[{index}]")
    elif isinstance(expected, (Tensor, bool, int, float)):
        if isinstance(expected, Tensor):
            assert isinstance(actual, Tensor), f"{where}: {type(actual).__name__} instead of a tensor"
            actual, expected = actual.detach(), expected.detach()
        else:
            assert type(actual) is type(expected), f"{where}: {actual!r} ({type(actual).__name__}) != {expected!r}"
        torch.testing.assert_close(
            actual, expected, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{where}: {m}"
        )
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def run_side_by_side(reference: Any, accelerated: Any, steps: list[Step], compare_forward: bool = True) -> None:
    """Feed both metrics the same steps; compare forward values, deferred errors/warnings and ``compute()``.

    torchmetrics raises NaN errors and warns in ``update``; the accelerated metric must defer both to ``compute``
    and must never raise or warn about NaNs in ``update``/``forward``, nor mutate its inputs.
    """
    reference_error = False
    reference_warned = False
    for step in steps:
        ref_args = step.reference_args if step.reference_args is not None else step.args
        ref_kwargs = step.reference_kwargs if step.reference_kwargs is not None else step.kwargs
        ref_call: Callable = reference if step.kind == "forward" else reference.update
        acc_call: Callable = accelerated if step.kind == "forward" else accelerated.update
        ref_exc = acc_exc = None
        with warnings.catch_warnings(record=True) as ref_record:
            warnings.simplefilter("always")
            try:
                ref_out = ref_call(*map(_clone, ref_args), **{k: _clone(v) for k, v in ref_kwargs.items()})
            except (RuntimeError, ValueError) as err:
                ref_exc = err
        reference_warned |= _nan_warnings(ref_record) > 0
        before = [_clone(a) for a in step.args]
        with warnings.catch_warnings(record=True) as acc_record:
            warnings.simplefilter("always")
            try:
                acc_out = acc_call(*step.args, **step.kwargs)
            except (RuntimeError, ValueError) as err:
                acc_exc = err
        assert _nan_warnings(acc_record) == 0, "NaN warnings are deferred to compute()"
        for original, now in zip(before, step.args, strict=True):
            if isinstance(now, Tensor):
                torch.testing.assert_close(now, original, equal_nan=True, rtol=0, atol=0)
        if ref_exc is not None and str(ref_exc) == NAN_ERROR:
            assert acc_exc is None, f"deferred error raised eagerly: {acc_exc}"
            reference_error = True
            continue
        if ref_exc is not None or acc_exc is not None:
            assert isinstance(acc_exc, type(ref_exc)), f"torchmetrics: {ref_exc!r}; accelerated: {acc_exc!r}"
            if ref_exc is not None:
                return  # both rejected the input eagerly; the metrics' states are no longer comparable
        if step.kind == "forward" and compare_forward and not reference_error:
            assert_same(acc_out, ref_out)
    if reference_error:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, err = _compute(accelerated)
        assert err is not None, "deferred NaN error was not raised by compute()"
        assert str(err) == NAN_ERROR, str(err)
        return
    acc_value, acc_exc = _compute(accelerated)
    ref_value, ref_exc = _compute(reference)
    assert type(acc_exc) is type(ref_exc), f"compute: torchmetrics {ref_exc!r}; accelerated {acc_exc!r}"
    if ref_exc is not None:
        return
    acc_warnings = _nan_warnings(acc_value[1])
    assert (acc_warnings > 0) == reference_warned, "deferred NaN warning mismatch"
    assert acc_warnings <= 1, "warn once per window"
    assert_same(acc_value[0], ref_value[0])


def _compute(metric: Any) -> tuple[Any, Exception | None]:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            return (metric.compute(), record), None
        except RuntimeError as err:
            return None, err


def batch_mismatches(inputs: tuple[Tensor, ...]) -> list[tuple[Tensor, ...]]:
    """``inputs`` with one of them cut to its first row, or to all rows but its last: every batch-size mismatch."""
    return [(*inputs[:i], cut, *inputs[i + 1 :]) for i, x in enumerate(inputs) for cut in (x[:1], x[:-1])]


def _raised(call: Callable[[], Any]) -> Exception | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            call()
        except Exception as err:
            return err
    return None


def assert_rejected_alike(
    reference: Callable[[], Any], accelerated: Callable[[], Any], good: tuple, bad: tuple
) -> None:
    """After a ``good`` batch, torchmetrics rejects ``bad``; the accelerated metric rejects it at once too.

    In ``update`` and in ``forward``: the same exception type and message, and nothing accumulated (its ``compute()``
    is torchmetrics' after the ``good`` batch alone). ``reference`` and ``accelerated`` build fresh metrics.
    """
    expected = reference()
    expected.update(*good)
    for kind in ("update", "forward"):
        ref, ours = reference(), accelerated()
        ours.update(*good)
        ref.update(*good)
        ref_err = _raised(lambda m=ref, k=kind: (m.update if k == "update" else m)(*bad))
        assert ref_err is not None, f"torchmetrics accepts {[tuple(x.shape) for x in bad]}: a listed deviation?"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with no_host_sync():  # shapes are metadata: rejected without a read
                our_err = _raised(lambda m=ours, k=kind: (m.update if k == "update" else m)(*bad))
        # torchmetrics' type (ours may be a subclass: ShapeMismatchError is a ValueError and a RuntimeError) and its
        # message (a ShapeMismatchError may name the shapes first).
        assert isinstance(our_err, type(ref_err)), (kind, our_err, ref_err)
        if isinstance(our_err, ShapeMismatchError):
            assert str(our_err).endswith(str(ref_err)), (kind, our_err, ref_err)
        else:
            assert (type(our_err), str(our_err)) == (type(ref_err), str(ref_err)), kind
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert_same(ours.compute(), expected.compute())
