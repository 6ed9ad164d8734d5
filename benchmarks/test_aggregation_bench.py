"""Host time per call of the aggregators, torchmetrics and accelerated side by side in one pytest-benchmark run.

Run (``scripts/bench`` does this and prints the ratio table)::

    python -m pytest benchmarks -n 0 --benchmark-enable --benchmark-json=benchmarks/results/latest.json \
        -p no:cacheprovider -q

Without ``--benchmark-enable`` (``--benchmark-disable`` is in the project's addopts) every case runs its call once, so
the suite doubles as a smoke test. There are no timing assertions: the numbers are read by ``benchmarks/report.py``.

Each case is one (metric, call, variant, impl):

- ``metric``: ``MeanMetric``, ``SumMetric``, ``MaxMetric``, ``MinMetric``, ``CatMetric``, ``RunningMean``,
  ``RunningSum``;
- ``call``: see :data:`CALLS` (``MeanMetric`` also gets the two weighted updates);
- ``variant``: ``default`` (default constructor, so ``nan_strategy="warn"``; ``RunningMean``/``RunningSum`` use
  their default window) or ``disable`` (``nan_strategy="disable"``, for Mean/Sum/Max/Min ``update(0-dim)`` and
  ``forward(0-dim)``: the difference to ``default`` is the cost of the NaN handling);
- ``impl``: ``torchmetrics`` (the installed class) or ``accelerated`` (the ``torchmetrics_async`` class).

``benchmark.group`` is ``f"{metric}.{call}[{variant}]"``, so a group holds exactly one pair, and ``extra_info`` holds
the four fields. The two cases of a pair are generated next to each other so they run back to back.

Method: :func:`benchmarks.timing.time_call`, identical for both implementations; ``extra_info["aten_ops"]`` holds the
ATen ops one call dispatches. Inputs are created once, outside the timed region, and never contain NaN.
"""

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torchmetrics

import torchmetrics_async
from benchmarks.timing import ITERATIONS, count_aten_ops, time_call

#: Implementations, in the order they run within a pair.
IMPLS = {"torchmetrics": torchmetrics, "accelerated": torchmetrics_async}

METRICS = ("MeanMetric", "SumMetric", "MaxMetric", "MinMetric", "CatMetric", "RunningMean", "RunningSum")

#: call name -> (test id slug, whether it is a forward, positional inputs by name).
CALLS: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    "update(0-dim)": ("update_0dim", False, ("scalar",)),
    "update(float)": ("update_float", False, ("number",)),
    "update(128)": ("update_128", False, ("vector",)),
    "forward(0-dim)": ("forward_0dim", True, ("scalar",)),
    "forward(float)": ("forward_float", True, ("number",)),
    "update(0-dim, weight=0-dim)": ("update_0dim_w0dim", False, ("scalar", "scalar_weight")),
    "update(128, weight=128)": ("update_128_w128", False, ("vector", "vector_weight")),
}
COMMON_CALLS = ("update(0-dim)", "update(float)", "update(128)", "forward(0-dim)", "forward(float)")
WEIGHTED_CALLS = ("update(0-dim, weight=0-dim)", "update(128, weight=128)")
DISABLE_METRICS = ("MeanMetric", "SumMetric", "MaxMetric", "MinMetric")
DISABLE_CALLS = ("update(0-dim)", "forward(0-dim)")

#: Constructor kwargs per variant.
VARIANTS: dict[str, dict[str, Any]] = {"default": {}, "disable": {"nan_strategy": "disable"}}

#: CatMetric keeps every update, so its state (and torchmetrics' forward, which concatenates the state lists) grows
#: with the number of calls. Both implementations are reset every RESET_EVERY timed calls, in the pedantic
#: ``teardown`` (run after each round, outside the timed region; ``setup`` would force ``iterations=1``): each timed
#: call sees a state of 0..RESET_EVERY-1 earlier updates, identically for torchmetrics and accelerated, and the
#: reset itself is never timed. Must be a multiple of ITERATIONS.
RESET_EVERY = 100
GROWING = ("CatMetric",)


def _cases() -> list[Any]:
    combos = [(m, c, "default") for m in METRICS for c in COMMON_CALLS]
    combos += [("MeanMetric", c, "default") for c in WEIGHTED_CALLS]
    combos += [(m, c, "disable") for m in DISABLE_METRICS for c in DISABLE_CALLS]
    return [
        pytest.param(metric, call, variant, impl, id=f"{metric}-{CALLS[call][0]}-{variant}-{impl}")
        for metric, call, variant in combos
        for impl in IMPLS
    ]


def _inputs() -> dict[str, Any]:
    gen = torch.Generator().manual_seed(0)
    return {
        "scalar": torch.tensor(0.5),
        "number": 0.5,
        "vector": torch.rand(128, generator=gen),
        "scalar_weight": torch.tensor(2.0),
        "vector_weight": torch.rand(128, generator=gen) + 0.5,
    }


def _make_call(metric: torchmetrics.Metric, call: str) -> Callable[[], Any]:
    _, is_forward, names = CALLS[call]
    inputs = _inputs()
    args = tuple(inputs[name] for name in names)
    target = metric if is_forward else metric.update
    if len(args) == 1:
        (arg,) = args
        return lambda: target(arg)
    value, weight = args
    return lambda: target(value, weight)


def _periodic_reset(metric: torchmetrics.Metric, every_rounds: int) -> Callable[[], None]:
    """A pedantic ``teardown`` (run after each round, untimed) that resets ``metric`` after every ``every_rounds``."""
    rounds = 0

    def teardown() -> None:
        nonlocal rounds
        rounds += 1
        if rounds % every_rounds == 0:
            metric.reset()

    return teardown


@pytest.mark.parametrize(("metric_name", "call", "variant", "impl"), _cases())
def test_aggregation(benchmark: Any, metric_name: str, call: str, variant: str, impl: str) -> None:
    metric = getattr(IMPLS[impl], metric_name)(**VARIANTS[variant])
    fn = _make_call(metric, call)

    benchmark.group = f"{metric_name}.{call}[{variant}]"
    benchmark.extra_info.update({"impl": impl, "metric": metric_name, "call": call, "variant": variant})

    benchmark.extra_info["aten_ops"] = count_aten_ops(fn)
    teardown = _periodic_reset(metric, RESET_EVERY // ITERATIONS) if metric_name in GROWING else None
    time_call(benchmark, fn, teardown)
    if metric_name in GROWING:
        metric.reset()
