"""Host time per call of the regression metrics, torchmetrics and accelerated side by side in one run.

Cases (``benchmark.group`` is ``f"{metric}.{call}[default]"``; ``extra_info`` has impl/metric/call/variant and
``aten_ops``): ``update`` and ``forward`` on ``(128,)`` float predictions and targets of ``MeanSquaredError``,
``R2Score``, ``PearsonCorrCoef`` (whose torchmetrics ``forward`` reads the host 5 and 10 times) and
``TweedieDevianceScore(power=1.5)`` (whose torchmetrics ``update`` reads it twice), and ``KLDivergence`` on
``(128, 10)`` distributions (a boolean-mask write per ``update`` in torchmetrics). Accelerated objects are the
torchmetrics objects converted with :func:`torchmetrics_async.accelerate`. Method: :func:`benchmarks.timing.time_call`.
"""

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torchmetrics import regression as tmr

import torchmetrics_async
from benchmarks.timing import run_case

IMPLS: dict[str, Callable[[Any], Any]] = {"torchmetrics": lambda m: m, "accelerated": torchmetrics_async.accelerate}


def _batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    p, q = torch.rand(128, 10, generator=gen) + 0.1, torch.rand(128, 10, generator=gen) + 0.1
    return {
        "preds": torch.rand(128, generator=gen) + 0.1,
        "target": torch.rand(128, generator=gen) + 0.1,
        "p": p,
        "q": q,
    }


def _cases() -> dict[tuple[str, str], Callable[[], tuple[Any, Callable[[Any, dict], Callable[[], Any]]]]]:
    cases: dict = {}
    for name, build in {
        "MeanSquaredError": tmr.MeanSquaredError,
        "R2Score": tmr.R2Score,
        "PearsonCorrCoef": tmr.PearsonCorrCoef,
        "TweedieDevianceScore(1.5)": lambda: tmr.TweedieDevianceScore(power=1.5),
    }.items():
        cases[(name, "update(128)")] = lambda build=build: (
            build(),
            lambda m, b: lambda: m.update(b["preds"], b["target"]),
        )
        cases[(name, "forward(128)")] = lambda build=build: (build(), lambda m, b: lambda: m(b["preds"], b["target"]))
    cases[("KLDivergence", "update(128x10)")] = lambda: (
        tmr.KLDivergence(),
        lambda m, b: lambda: m.update(b["p"], b["q"]),
    )
    return cases


CASES = _cases()


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize(("metric_name", "call"), list(CASES), ids=lambda v: str(v).replace(" ", "_"))
def test_regression(benchmark: Any, metric_name: str, call: str, impl: str) -> None:
    obj, make_call = CASES[(metric_name, call)]()
    fn = make_call(IMPLS[impl](obj), _batch())
    run_case(benchmark, metric_name, call, impl, fn)
