"""The torcheval comparison's cases: each accelerated class beside its torcheval (0.0.7) counterpart, same batch.

A :class:`Pair` is one (metric, call, variant): a factory for the torchmetrics class, one for the accelerated class and
one for the torcheval class configured to compute the same quantity (torcheval's defaults differ: its
``MulticlassAccuracy`` averages ``"micro"``, torchmetrics' ``"macro"``), the batch, and how each is called. Variants:

- ``default``: torchmetrics' default arguments (``nan_strategy="warn"``, ``validate_args=True``), the drop-in case;
- ``checks off``: ``nan_strategy="disable"`` / ``validate_args=False``, what torcheval does (no NaN strategy, no
  value validation).

torcheval is a benchmark-only dependency (the ``bench`` extra): :func:`pairs` builds the torcheval side lazily, so the
accelerated and torchmetrics sides (and the op-count tests, which compare against :data:`TORCHEVAL_OPS`, the counts
recorded from torcheval 0.0.7) work without it.

Classes that land later join through :data:`PENDING`: a pair there is included as soon as ``torchmetrics_async``
exports the accelerated class it names (the binned AUROC / average precision, being written now).

Example:
    >>> [p.key for p in pairs() if p.metric == "MeanMetric" and p.variant == "default"]
    [('MeanMetric', 'update(0-dim)', 'default'), ('MeanMetric', 'update(128)', 'default')]
"""

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torchmetrics

import torchmetrics_async

__all__ = ["PENDING", "TORCHEVAL_OPS", "Pair", "batch", "pairs"]

VARIANTS = ("default", "checks off")


def batch() -> dict[str, torch.Tensor]:
    """The inputs every pair draws from (fixed seed; no NaN, valid labels)."""
    gen = torch.Generator().manual_seed(0)
    return {
        "scalar": torch.tensor(0.5),
        "vector": torch.rand(128, generator=gen),
        "probs": torch.rand(128, generator=gen),
        "binary": torch.randint(0, 2, (128,), generator=gen),
        "logits": torch.randn(128, 1000, generator=gen),
        "labels": torch.randint(0, 1000, (128,), generator=gen),
        "ml_probs": torch.rand(128, 10, generator=gen),
        "ml_target": torch.randint(0, 2, (128, 10), generator=gen),
    }


@dataclass(frozen=True)
class Pair:
    """One comparison: the same update of a torchmetrics class, its accelerated class and torcheval's counterpart.

    Attributes:
        metric: the torchmetrics / accelerated class name (with its size, e.g. ``MulticlassAccuracy(1000)``).
        call: what is called, e.g. ``update(0-dim)``.
        variant: ``"default"`` or ``"checks off"``.
        cls: the class name in ``torchmetrics`` / ``torchmetrics_async`` (module path below them, dotted).
        kwargs: constructor arguments of the torchmetrics and accelerated classes.
        torcheval: the torcheval class (path below ``torcheval.metrics``) and its constructor arguments.
        inputs: names in :func:`batch` passed positionally to ``update``.
    """

    metric: str
    call: str
    variant: str
    cls: str
    kwargs: dict[str, Any]
    torcheval: tuple[str, dict[str, Any]]
    inputs: tuple[str, ...]
    note: str = field(default="", compare=False)

    @property
    def key(self) -> tuple[str, str, str]:
        """``(metric, call, variant)``: the row of the tables and of :data:`TORCHEVAL_OPS`."""
        return self.metric, self.call, self.variant

    def make_torchmetrics(self) -> Any:
        """A fresh torchmetrics metric."""
        return _resolve(torchmetrics, self.cls)(**self.kwargs)

    def make_accelerated(self) -> Any:
        """A fresh accelerated metric (the ``torchmetrics_async`` class of the same name)."""
        return _resolve(torchmetrics_async, self.cls)(**self.kwargs)

    def make_torcheval(self) -> Any:
        """A fresh torcheval metric (imports torcheval: the ``bench`` extra)."""
        name, kwargs = self.torcheval
        return _resolve(importlib.import_module("torcheval.metrics"), name)(**kwargs)

    def call_of(self, metric: Any, data: dict[str, torch.Tensor] | None = None) -> Callable[[], Any]:
        """A no-argument callable doing this pair's update on ``metric``."""
        args = tuple((data or batch())[name] for name in self.inputs)
        update = metric.update
        return lambda: update(*args)


def _resolve(root: Any, dotted: str) -> Any:
    obj = root
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _variants(
    metric: str, call: str, cls: str, default: dict, off: dict, te: tuple[str, dict], inputs: tuple[str, ...]
) -> list[Pair]:
    return [
        Pair(metric, call, "default", cls, default, te, inputs),
        Pair(metric, call, "checks off", cls, {**default, **off}, te, inputs),
    ]


def _all_pairs() -> list[Pair]:
    out: list[Pair] = []
    nan_off = {"nan_strategy": "disable"}
    for name, te in (("MeanMetric", "Mean"), ("SumMetric", "Sum"), ("MaxMetric", "Max"), ("MinMetric", "Min")):
        for call, inputs in (("update(0-dim)", ("scalar",)), ("update(128)", ("vector",))):
            out += _variants(name, call, name, {}, nan_off, (te, {}), inputs)
    checks_off = {"validate_args": False}
    binary = ("probs", "binary")
    for name, te in (
        ("BinaryAccuracy", "BinaryAccuracy"),
        ("BinaryPrecision", "BinaryPrecision"),
        ("BinaryRecall", "BinaryRecall"),
        ("BinaryF1Score", "BinaryF1Score"),
        ("BinaryConfusionMatrix", "BinaryConfusionMatrix"),
    ):
        out += _variants(name, "update(128 probs)", f"classification.{name}", {}, checks_off, (te, {}), binary)
    multiclass = ("logits", "labels")
    for name, te in (
        ("MulticlassAccuracy", "MulticlassAccuracy"),
        ("MulticlassPrecision", "MulticlassPrecision"),
        ("MulticlassRecall", "MulticlassRecall"),
        ("MulticlassF1Score", "MulticlassF1Score"),
    ):
        # torchmetrics' default average is "macro" (torcheval's is "micro"): both compute the macro average here.
        out += _variants(
            f"{name}(1000)",
            "update(logits 128x1000)",
            f"classification.{name}",
            {"num_classes": 1000},
            checks_off,
            (te, {"num_classes": 1000, "average": "macro"}),
            multiclass,
        )
    out += _variants(
        "MulticlassConfusionMatrix(1000)",
        "update(logits 128x1000)",
        "classification.MulticlassConfusionMatrix",
        {"num_classes": 1000},
        checks_off,
        ("MulticlassConfusionMatrix", {"num_classes": 1000}),
        multiclass,
    )
    # torchmetrics' default (macro over labels) equals torcheval's "hamming" criterion: every label has N entries.
    out += _variants(
        "MultilabelAccuracy(10)",
        "update(128x10 probs)",
        "classification.MultilabelAccuracy",
        {"num_labels": 10},
        checks_off,
        ("MultilabelAccuracy", {"criteria": "hamming"}),
        ("ml_probs", "ml_target"),
    )
    return out


#: Pairs whose accelerated class is not in ``torchmetrics_async`` yet: each is included by :func:`pairs` as soon as
#: ``torchmetrics_async.<cls>`` exists (add the binned curves' rows here when they land; record their torcheval op
#: counts in :data:`TORCHEVAL_OPS` with ``python -m benchmarks.torcheval_bench --ops``).
PENDING: tuple[Pair, ...] = (
    *_variants(
        "BinaryAUROC(thresholds=200)",
        "update(128 probs)",
        "classification.BinaryAUROC",
        {"thresholds": 200},
        {"validate_args": False},
        ("BinaryBinnedAUROC", {"threshold": 200}),
        ("probs", "binary"),
    ),
    *_variants(
        "BinaryAveragePrecision(thresholds=200)",
        "update(128 probs)",
        "classification.BinaryAveragePrecision",
        {"thresholds": 200},
        {"validate_args": False},
        ("BinaryBinnedAUPRC", {"threshold": 200}),
        ("probs", "binary"),
    ),
)


def _accelerated(pair: Pair) -> bool:
    """Whether ``torchmetrics_async`` exports the pair's class as an accelerated class."""
    from torchmetrics_async.metric import SyncFreeMixin

    try:
        cls = _resolve(torchmetrics_async, pair.cls)
    except AttributeError:
        return False
    return isinstance(cls, type) and issubclass(cls, SyncFreeMixin)


def pairs() -> list[Pair]:
    """Every pair to measure: the fixed ones and those of :data:`PENDING` whose accelerated class exists.

    Returns:
        The pairs, in table order.
    """
    return _all_pairs() + [pair for pair in PENDING if _accelerated(pair)]


#: ATen ops one torcheval 0.0.7 ``update`` dispatches, per pair key, counted with
#: ``python -m benchmarks.torcheval_bench --ops`` (torch 2.13, CPU). Deterministic: the op-count tests compare the
#: accelerated classes against these without importing torcheval, and check them against torcheval where it is
#: installed.
TORCHEVAL_OPS: dict[tuple[str, str, str], int] = {
    ("MeanMetric", "update(0-dim)", "default"): 6,
    ("MeanMetric", "update(0-dim)", "checks off"): 6,
    ("MeanMetric", "update(128)", "default"): 6,
    ("MeanMetric", "update(128)", "checks off"): 6,
    ("SumMetric", "update(0-dim)", "default"): 3,
    ("SumMetric", "update(0-dim)", "checks off"): 3,
    ("SumMetric", "update(128)", "default"): 3,
    ("SumMetric", "update(128)", "checks off"): 3,
    ("MaxMetric", "update(0-dim)", "default"): 2,
    ("MaxMetric", "update(0-dim)", "checks off"): 2,
    ("MaxMetric", "update(128)", "default"): 2,
    ("MaxMetric", "update(128)", "checks off"): 2,
    ("MinMetric", "update(0-dim)", "default"): 2,
    ("MinMetric", "update(0-dim)", "checks off"): 2,
    ("MinMetric", "update(128)", "default"): 2,
    ("MinMetric", "update(128)", "checks off"): 2,
    ("BinaryAccuracy", "update(128 probs)", "default"): 10,
    ("BinaryAccuracy", "update(128 probs)", "checks off"): 10,
    ("BinaryPrecision", "update(128 probs)", "default"): 13,
    ("BinaryPrecision", "update(128 probs)", "checks off"): 13,
    ("BinaryRecall", "update(128 probs)", "default"): 9,
    ("BinaryRecall", "update(128 probs)", "checks off"): 9,
    ("BinaryF1Score", "update(128 probs)", "default"): 11,
    ("BinaryF1Score", "update(128 probs)", "checks off"): 11,
    ("BinaryConfusionMatrix", "update(128 probs)", "default"): 9,
    ("BinaryConfusionMatrix", "update(128 probs)", "checks off"): 9,
    ("MulticlassAccuracy(1000)", "update(logits 128x1000)", "default"): 11,
    ("MulticlassAccuracy(1000)", "update(logits 128x1000)", "checks off"): 11,
    ("MulticlassPrecision(1000)", "update(logits 128x1000)", "default"): 16,
    ("MulticlassPrecision(1000)", "update(logits 128x1000)", "checks off"): 16,
    ("MulticlassRecall(1000)", "update(logits 128x1000)", "default"): 14,
    ("MulticlassRecall(1000)", "update(logits 128x1000)", "checks off"): 14,
    ("MulticlassF1Score(1000)", "update(logits 128x1000)", "default"): 14,
    ("MulticlassF1Score(1000)", "update(logits 128x1000)", "checks off"): 14,
    ("MulticlassConfusionMatrix(1000)", "update(logits 128x1000)", "default"): 11,
    ("MulticlassConfusionMatrix(1000)", "update(logits 128x1000)", "checks off"): 11,
    ("MultilabelAccuracy(10)", "update(128x10 probs)", "default"): 9,
    ("MultilabelAccuracy(10)", "update(128x10 probs)", "checks off"): 9,
    ("BinaryAUROC(thresholds=200)", "update(128 probs)", "default"): 2,
    ("BinaryAUROC(thresholds=200)", "update(128 probs)", "checks off"): 2,
    ("BinaryAveragePrecision(thresholds=200)", "update(128 probs)", "default"): 37,
    ("BinaryAveragePrecision(thresholds=200)", "update(128 probs)", "checks off"): 37,
}
