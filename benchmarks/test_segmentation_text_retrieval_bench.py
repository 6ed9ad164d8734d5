"""Host time per ``update()`` of the segmentation, Perplexity and retrieval metrics, torchmetrics and accelerated side
by side in one run.

Cases (``benchmark.group`` is ``f"{metric}.{call}[default]"``; ``extra_info`` as in the classification suite):

- ``MeanIoU(21)``, ``GeneralizedDiceScore(21)``, ``DiceScore(21)``: ``update`` on index masks ``(8, 64, 64)``
  (``input_format="index"``: torchmetrics one-hot encodes with ``F.one_hot``, which reads the labels' range);
- ``Perplexity(ignore_index=-100)``: ``update`` on logits ``(8, 32, 1000)``;
- ``RetrievalMRR(ignore_index=-1)``, ``RetrievalNormalizedDCG()``: ``update`` on 1024 entries over 64 queries.

Accelerated objects are the torchmetrics objects converted with :func:`torchmetrics_async.accelerate`. Method:
:func:`benchmarks.timing.time_call`.
"""

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torchmetrics.retrieval as tmr
import torchmetrics.segmentation as tms
import torchmetrics.text as tmt

import torchmetrics_async
from benchmarks.timing import count_aten_ops, time_call

IMPLS: dict[str, Callable[[Any], Any]] = {"torchmetrics": lambda m: m, "accelerated": torchmetrics_async.accelerate}


def _batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    target = torch.randint(0, 2, (1024,), generator=gen)
    target[::17] = -1
    return {
        "masks": torch.randint(0, 21, (8, 64, 64), generator=gen),
        "masks_target": torch.randint(0, 21, (8, 64, 64), generator=gen),
        "logits": torch.randn(8, 32, 1000, generator=gen),
        "tokens": torch.randint(0, 1000, (8, 32), generator=gen).masked_fill(
            torch.rand(8, 32, generator=gen) < 0.1, -100
        ),
        "scores": torch.rand(1024, generator=gen),
        "relevance": target,
        "graded": torch.randint(0, 4, (1024,), generator=gen),
        "queries": torch.randint(0, 64, (1024,), generator=gen),
    }


def _segmentation(cls: type) -> tuple[Any, Callable]:
    return cls(num_classes=21, input_format="index"), lambda m, b: lambda: m.update(b["masks"], b["masks_target"])


CASES: dict[tuple[str, str], Callable[[], tuple[Any, Callable[[Any, dict], Callable[[], Any]]]]] = {
    ("MeanIoU(21)", "update(index 8x64x64)"): lambda: _segmentation(tms.MeanIoU),
    ("GeneralizedDiceScore(21)", "update(index 8x64x64)"): lambda: _segmentation(tms.GeneralizedDiceScore),
    ("DiceScore(21)", "update(index 8x64x64)"): lambda: _segmentation(tms.DiceScore),
    ("Perplexity(ignore_index)", "update(logits 8x32x1000)"): lambda: (
        tmt.Perplexity(ignore_index=-100),
        lambda m, b: lambda: m.update(b["logits"], b["tokens"]),
    ),
    ("RetrievalMRR(ignore_index)", "update(1024 entries)"): lambda: (
        tmr.RetrievalMRR(ignore_index=-1),
        lambda m, b: lambda: m.update(b["scores"], b["relevance"], b["queries"]),
    ),
    ("RetrievalNormalizedDCG", "update(1024 entries)"): lambda: (
        tmr.RetrievalNormalizedDCG(),
        lambda m, b: lambda: m.update(b["scores"], b["graded"], b["queries"]),
    ),
}


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize(("metric_name", "call"), list(CASES), ids=lambda v: str(v).replace(" ", "_"))
def test_segmentation_text_retrieval(benchmark: Any, metric_name: str, call: str, impl: str) -> None:
    built, make_call = CASES[(metric_name, call)]()
    call_once = make_call(IMPLS[impl](built), _batch())
    info = {"impl": impl, "metric": metric_name, "call": call, "variant": "default"}
    benchmark.extra_info.update(info, aten_ops=count_aten_ops(call_once))
    benchmark.group = f"{metric_name}.{call}[default]"
    time_call(benchmark, call_once)
