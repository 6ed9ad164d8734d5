"""Differential fuzzer: every registered accelerated class against its torchmetrics twin, in lockstep.

``scripts/fuzz --seconds N --seed S [--classes REGEX]`` (or ``--cases N`` instead of a time budget) draws cases: a
registered class, constructor arguments from its documented options (the ``Literal``/``bool`` annotations of its
``__init__`` and the value lists of :data:`NAMED_SPACES`), a construction path (:data:`PATHS`: direct, the task
wrapper, ``accelerate()`` of an instance, ``patch()``) and a random sequence of operations (:data:`OP_WEIGHTS`) on
edge-case inputs (:func:`draw_batch`). :class:`Lockstep` runs each operation on the accelerated metric and on a plain
torchmetrics twin and judges the outcomes:

- values (``compute()`` and ``forward()``): equal, NaNs equal, same dtype and shape;
- errors: where torchmetrics raises in ``update()``/``forward()``, ours raises at once or at the next ``compute()`` or
  ``reset()``, whatever operations (pickle, clone, state_dict -> load, merge_state) the state went through between;
  ours may raise ``ValueError`` at once on a batch whose shapes torchmetrics rejects or broadcasts across the batch;
- warnings: what torchmetrics warns in ``update()`` is warned by the next ``compute()`` at the latest;
- host syncs: every ``update()``/``forward()`` of ours runs under ``no_host_sync()``, but for the caveats of
  ``tools.coverage.FORWARD_CAVEATS``.

Detection (``MeanAveragePrecision``, the IoU family) draws its batches from
:func:`tools.detection_scenes.edge_scenes` (score ties, duplicate and zero-area boxes, crowds, empty images, classes
only in the predictions, more than 100 detections in an image, masks for ``segm``). Where torchvision is missing,
torchmetrics' ``MeanAveragePrecision`` cannot be built: ours is judged against
:class:`tools.detection_scenes.CocoReference` (torchmetrics' own code and COCO dicts, evaluated by pycocotools or
faster-coco-eval), and the IoU family is skipped.

The README's deviation table is the only allow-list (:data:`ALLOWED`: each entry quotes the "what" cell of the row it
relies on; ``tests/test_fuzz.py`` checks every quote is in README.md). A finding is shrunk (operations dropped, batches
cut) and printed as a self-contained Python snippet that reproduces it.
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib
import inspect
import math
import pathlib
import random
import re
import sys
import time
import types
import typing
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from tests.examples import example_for
from tools import detection_scenes
from tools.coverage import FORWARD_CAVEATS
from torchmetrics_async.accelerate import patch
from torchmetrics_async.classification.curves import CURVE_ORIGINS
from torchmetrics_async.deferred import recorded_checks
from torchmetrics_async.registry import registry
from torchmetrics_async.testing import HostSyncError, no_host_sync

__all__ = [
    "ALLOWED",
    "BASE_METRICS",
    "NAMED_SPACES",
    "OP_WEIGHTS",
    "PATHS",
    "Allowance",
    "Case",
    "Code",
    "Finding",
    "Lockstep",
    "argument_space",
    "draw_batch",
    "draw_case",
    "fuzz",
    "main",
    "reproducer",
    "run_case",
    "shrink",
    "targets",
]

_TASKS = ("Binary", "Multiclass", "Multilabel")
_AMI = importlib.import_module("torchmetrics.functional.clustering.adjusted_mutual_info_score")
_DEFAULT_CLASSES = 3

# ---------------------------------------------------------------------------------------------------------------------
# The allow-list: the README's deviation rows, each quoted by its "what" cell.


@dataclass(frozen=True)
class Allowance:
    """A difference the README's deviation table accepts.

    Attributes:
        what: the "what" cell of the README row, verbatim (``tests/test_fuzz.py`` checks it is in README.md).
        applies: ``(case, situation) -> bool``: whether this row covers the situation (a dict the runner fills:
            ``kind`` of difference, ``op``, ``batch`` tags, ``theirs``/``ours`` outcomes or warning texts).
    """

    what: str
    applies: Callable[[Case, dict[str, Any]], bool]


def _init(case: Case, name: str, default: Any = None) -> Any:
    return case.init.get(name, default)


def _validates(case: Case) -> bool:
    """The ``validate_args`` it was built with: drawn, the wrapper's (True), else the default (BinaryLogAUC: False)."""
    if "validate_args" in case.init or "wrapper" in case.path:
        return bool(case.init.get("validate_args", True))
    parameter = inspect.signature(case.origin.__init__).parameters.get("validate_args")
    return True if parameter is None else bool(parameter.default)


def _name(case: Case) -> str:
    return case.origin.__name__


def _is_nan_warning(text: str) -> bool:
    """Torchmetrics' ``nan_strategy="warn"`` message."""
    return text.startswith("Encountered `nan` values in tensor")


def _torchmetrics_class(module: str, name: str) -> type:
    return getattr(importlib.import_module(f"torchmetrics.{module}"), name)


def _tensors(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return _tensors(list(value.values()))
    return []


def _reductions(case: Case) -> list[Any]:
    """The ``dist_reduce_fx`` of every state of the case's torchmetrics class, built with the case's arguments."""
    try:
        return list(case.origin(**case.init)._reductions.values())
    except Exception:  # arguments torchmetrics rejects: no state to judge by
        return []


def _is_category_error(outcome: Any) -> bool:
    """The nominal metrics' deferred category errors (see ``torchmetrics_async.nominal``)."""
    text = str(outcome)
    return isinstance(outcome, RuntimeError) and ("categories in [0," in text or "non-negative integral" in text)


def _nominal_out_of_range(case: Case, tags: Any) -> bool:
    """A category out of range may have reached a nominal metric: drawn so, or an infinity cast to an integer."""
    return bool(tags & {"range", "nan"})  # the NaN edge also writes infinities, which no strategy drops


def _categories_out_of_range(args: Sequence[Arg], classes: int) -> bool:
    """Whether a nominal batch has a category outside ``[0, classes)`` as torchmetrics reads it (argmax, ``long()``)."""
    for arg in args:
        x = arg.make()
        if isinstance(x, Tensor) and x.ndim in (1, 2) and x.numel() and x.dtype != torch.bool:
            x = x.argmax(1) if x.ndim == 2 else x
            x = x[x.isfinite()] if x.is_floating_point() else x
            if bool(((x.long() < 0) | (x.long() >= classes)).any()):
                return True
    return False


def _ami_degenerate(case: Case, args: Any) -> bool:
    """Torchmetrics' AMI denominator (normalizer - expected MI) is within rounding of 0: its value is rounding / eps."""
    if len(args) != 2:
        return False
    preds, target = (x.reshape(-1) for x in args)
    emi = _AMI.expected_mutual_info_score(_AMI._mutual_info_score_update(preds, target), target.numel())
    entropies = torch.stack([_AMI.calculate_entropy(preds), _AMI.calculate_entropy(target)])
    return bool(
        (_AMI.calculate_generalized_mean(entropies, _init(case, "average_method", "arithmetic")) - emi).abs() <= 1e-5
    )


def _int_one(outcome: Any) -> bool:
    return isinstance(outcome, Tensor) and outcome.dtype == torch.int64 and outcome.numel() == 1


ALLOWED: tuple[Allowance, ...] = (
    Allowance(
        '`nan_strategy="warn"`',
        lambda case, s: s["kind"] == "warning" and _is_nan_warning(s["text"]) and s["op"] in ("update", "forward"),
    ),
    Allowance(
        "invalid values with `validate_args=False`",
        lambda case, s: (
            not _validates(case)
            and (
                bool(s["tags"] & {"range", "shape", "dtype", "label_preds"})
                or (s["kind"] == "error" and s["ours"] is None)
            )
        ),
    ),
    Allowance(
        "confusion matrix `forward()` with `normalize`",
        lambda case, s: s["kind"] == "warning" and s["op"] == "forward" and "confusion matrix" in s["text"],
    ),
    Allowance(
        "`PearsonCorrCoef`/`ConcordanceCorrCoef` batch with (near-)zero variance",
        lambda case, s: s["kind"] == "warning" and s["op"] == "forward" and "variance" in s["text"],
    ),
    Allowance(
        "binned curves' `forward()` batch value (and `compute()` under `AsyncMetricCollector`)",
        lambda case, s: (
            s["kind"] == "warning"
            and s["op"] == "forward"
            and case.origin in CURVE_ORIGINS
            and _init(case, "thresholds") is not None
        ),
    ),
    Allowance(
        "`MatthewsCorrCoef` on all-right or all-wrong binary/multilabel predictions",
        lambda case, s: (
            s["kind"] == "value"
            and "MatthewsCorrCoef" in _name(case)
            and _int_one(s["theirs"])
            and isinstance(s["ours"], Tensor)
            and s["ours"].is_floating_point()
            and float(s["ours"]) == float(s["theirs"])
        ),
    ),
    Allowance(
        '`CalibrationError(norm="l2")` with a zero (or empty) error',
        lambda case, s: (
            s["kind"] == "value"
            and "CalibrationError" in _name(case)
            and _int_one(s["theirs"])
            and float(s["theirs"]) == 0
            and isinstance(s["ours"], Tensor)
            and float(s["ours"]) == 0
        ),
    ),
    Allowance(
        '`MulticlassHingeLoss(multiclass_mode="crammer-singer")` on a batch without (kept) entries',
        lambda case, s: (
            "HingeLoss" in _name(case) and s["kind"] == "error" and s["ours"] is None and "reshape" in str(s["theirs"])
        ),
    ),
    Allowance(
        "unbinned binary/multiclass curves with `ignore_index`",
        lambda case, s: (
            s["kind"] == "plain takes ours"
            and case.origin in CURVE_ORIGINS
            and _init(case, "ignore_index") is not None
            and _init(case, "thresholds") is None
        ),
    ),
    Allowance(
        "`CalibrationError` with `ignore_index`",
        lambda case, s: (
            s["kind"] == "plain takes ours"
            and "CalibrationError" in _name(case)
            and _init(case, "ignore_index") is not None
        ),
    ),
    Allowance(
        "`bool` scores to an unbinned binary/multilabel curve (`BinaryAUROC`, or `validate_args=False`)",
        lambda case, s: (
            s["kind"] == "error"
            and s["ours"] is None
            and case.origin in CURVE_ORIGINS
            and not _name(case).startswith("Multiclass")
            and _init(case, "thresholds") is None
            and "bool_preds" in s["history"]
            and "with two bool tensors is not supported" in str(s["theirs"])
        ),
    ),
    Allowance(
        "`PanopticQuality`, `ModifiedPanopticQuality`: `preds` or `target` not an integer tensor; a `preds` category in"
        " neither `things` nor `stuffs` (`allow_unknown_preds_category=False`)",
        lambda case, s: (
            s["kind"] == "error" and "PanopticQuality" in _name(case) and "integer tensor of ids" in str(s["ours"])
        ),
    ),
    Allowance("an `update()` that raises", lambda case, s: s["kind"] == "partial update" and s["op"] == "update"),
    Allowance(
        "IoU family: `class_metrics=True` with an image with detections and no ground truth; predicted labels not one"
        " per box",
        lambda case, s: (
            s["kind"] == "error"
            and _name(case).endswith("IntersectionOverUnion")
            and (
                (isinstance(s["theirs"], IndexError) and "shape of the mask" in str(s["theirs"]) and s["ours"] is None)
                or (isinstance(s["ours"], IndexError) and "labels in `preds`" in str(s["ours"]))
            )
        ),
    ),
    Allowance(  # without class_metrics, forward() reads no host: float64 boxes give float64 (torchmetrics: float32
        # where no float64 entry is kept or the mean is NaN, its dtype the data's)
        "IoU family per-class values, and `forward()`'s value",
        lambda case, s: (
            s["kind"] == "value"
            and s["op"] == "forward"
            and _name(case).endswith("IntersectionOverUnion")
            and not _init(case, "class_metrics", False)
            and isinstance(s["ours"], dict)
            and isinstance(s["theirs"], dict)
            and list(s["ours"]) == list(s["theirs"])
            and all(
                o.dtype == torch.float64
                and t.dtype == torch.float32
                and torch.allclose(o, t.double(), rtol=1e-4, atol=1e-6, equal_nan=True)
                for o, t in zip(s["ours"].values(), s["theirs"].values(), strict=True)
            )
        ),
    ),
    Allowance(
        "`MeanAveragePrecision`: NaN in `boxes` or `scores`; masks of another size than the image's other masks; float"
        " labels, integer scores, boxes not `(N, 4)`",
        lambda case, s: (
            _name(case) == "MeanAveragePrecision"
            and (
                (
                    s["kind"] == "error"
                    and any(
                        text in str(s["ours"])
                        for text in ("Encountered NaN", "same size", "Invalid input", "(num_boxes, 4)")
                    )
                )
                or (
                    s["kind"] == "value"
                    and s["op"] == "forward"
                    and any(bool(x.isnan().any()) for x in _tensors(s["ours"]) if x.is_floating_point())
                )
            )
        ),
    ),
    Allowance(
        "`MeanAveragePrecision` with masks: state dict and `tm_to_coco()`",
        lambda case, s: (
            s["kind"] == "plain takes ours"
            and _name(case) == "MeanAveragePrecision"
            and "segm" in str(_init(case, "iou_type", "bbox"))
        ),
    ),
    Allowance(
        "multiclass target check",
        lambda case, s: (
            s["kind"] == "error"
            and s["op"] in ("compute", "reset")
            and _name(case).startswith("Multiclass")
            and s["theirs"] is None
            and "range" in s["history"]
            and ("values in `target`" in str(s["ours"]) or "values in `preds`" in str(s["ours"]))
        ),
    ),
    Allowance(
        "multiclass target check",
        lambda case, s: (
            s["kind"] == "value"
            and s["op"] == "forward"
            and _name(case).startswith("Multiclass")
            and "range" in s["tags"]
            and isinstance(s["ours"], Tensor)
            and (bool(s["ours"].isnan().all()) or not s["ours"].is_floating_point())
        ),
    ),
    Allowance(
        "multiclass target check",  # "label `preds` at ignored positions are not checked"
        lambda case, s: s["kind"] == "error" and s["ours"] is None and s["ignored_bad_preds"],
    ),
    Allowance(
        "`BinaryAUROC(validate_args=True)`",
        lambda case, s: (
            s["kind"] == "value"
            and s["op"] == "forward"
            and _name(case) == "BinaryAUROC"
            and "range" in s["tags"]
            and isinstance(s["ours"], Tensor)
            and bool(s["ours"].isnan().all())
        ),
    ),
    Allowance(
        "`BinaryAUROC(validate_args=True)`",
        lambda case, s: (
            s["kind"] == "error"
            and s["op"] in ("compute", "reset")
            and _name(case) == "BinaryAUROC"
            and s["theirs"] is None
            and "range" in s["history"]
            and "values in `target`" in str(s["ours"])
        ),
    ),
    Allowance(
        "group fairness (`BinaryFairness`, `BinaryGroupStatRates`) on a batch without some group",
        lambda case, s: (
            _name(case) in ("BinaryFairness", "BinaryGroupStatRates")
            and (
                (s["kind"] == "value" and "missing_group" in s["history"] | s["tags"])
                # "an id outside `[0, num_groups)` raises at `compute()`/`reset()`"
                or (s["kind"] == "error" and "Expected group identifiers" in str(s.get("ours")))
            )
        ),
    ),
    Allowance(
        "`RelativeAverageSpectralError` with `preds`/`target` of different shapes",
        lambda case, s: (
            _name(case) in ("RelativeAverageSpectralError", "PeakSignalNoiseRatioWithBlockedEffect")
            and s["kind"] == "error"
            and "expected to have the same shape" in str(s["ours"])
        ),
    ),
    Allowance(
        "nominal metrics' category check",
        lambda case, s: (
            _public(case.origin) == "torchmetrics.nominal"
            and _nominal_out_of_range(case, s["history"] | s["tags"])
            and (
                (s["kind"] == "error" and s["op"] in ("compute", "reset") and _is_category_error(s["ours"]))
                or (s["kind"] == "value" and isinstance(s["ours"], Tensor) and bool(s["ours"].isnan().all()))
            )
        ),
    ),
    Allowance(
        "nominal metrics' `forward()` on a degenerate batch",
        lambda case, s: (
            _public(case.origin) == "torchmetrics.nominal"
            and s["op"] == "forward"
            and (
                (s["kind"] == "warning" and "using bias correction" in s["text"])
                or (
                    s["kind"] == "value"
                    and _int_one(s["theirs"])
                    and isinstance(s["ours"], Tensor)
                    and s["ours"].is_floating_point()
                    and float(s["ours"]) == float(s["theirs"])
                )
            )
        ),
    ),
    Allowance(
        "clustering metrics' dtype and shape checks",
        lambda case, s: (
            _public(case.origin) == "torchmetrics.clustering"
            and s["kind"] == "error"
            and s["op"] in ("update", "forward")  # torchmetrics' DunnIndex takes embeddings of any rank in forward()
            and isinstance(s["ours"], (ValueError, RuntimeError))
            and s["theirs"] is None
        ),
    ),
    Allowance(
        "clustering metrics' `forward()` on a batch without a sparse tensor",
        lambda case, s: (
            _public(case.origin) == "torchmetrics.clustering"
            and s["kind"] == "warning"
            and s["text"].startswith("Sparse invariant checks are implicitly disabled")
        ),
    ),
    Allowance(
        "`AdjustedMutualInfoScore.forward()` where the normalizer equals the expected mutual information",
        lambda case, s: (
            _name(case) == "AdjustedMutualInfoScore"
            and s["kind"] == "value"
            and s["op"] == "forward"
            and _ami_degenerate(case, s.get("args", ()))
        ),
    ),
    Allowance(
        "`merge_state()` / `load_state_dict()` after `compute()`",
        lambda case, s: False,  # applied by the runner: the twin's cached result is dropped after merge_state()
    ),
    Allowance(
        "unbinned multiclass curves, `average` macro/None, `validate_args=True`, a label `< 0` or `>= num_classes`"
        " among at most C distinct values",
        lambda case, s: (
            s["kind"] == "error"
            and s["op"] in ("compute", "reset")
            and case.origin in CURVE_ORIGINS
            and _name(case).startswith("Multiclass")
            and "range" in s["history"]
            and "Class values must be" in str(s["ours"])
        ),
    ),
    Allowance(
        "unbinned multiclass curves, `average` macro/None, `validate_args=True`, a label `< 0` or `>= num_classes`"
        " among at most C distinct values",
        lambda case, s: (
            s["kind"] == "value"
            and s["op"] == "forward"
            and case.origin in CURVE_ORIGINS
            and _name(case).startswith("Multiclass")
            and "range" in s["tags"]
            and all(bool(x.isnan().all()) for x in _tensors(s["ours"]) if x.is_floating_point())
        ),
    ),
    Allowance(
        "`merge_state()` / `load_state_dict()` after `compute()`",  # ours warns the merged or loaded NaN flags again
        lambda case, s: (
            s["kind"] == "warning" and _is_nan_warning(s["text"]) and ("merged" in s["history"] or s["loaded"])
        ),
    ),
    Allowance(
        "`accelerate(torchmetrics.classification.BinaryAUROC(validate_args=False))`",
        lambda case, s: (
            s["kind"] == "error"
            and s["op"] in ("compute", "reset")
            and case.path == "accelerate"
            and _name(case) == "BinaryAUROC"
            and s["theirs"] is None
            and "values in `target`" in str(s["ours"])
        ),
    ),
    Allowance(
        "`preds`/`target` shapes that do not fit, with `validate_args=False` (every classification class)",
        lambda case, s: (
            s["kind"] == "error"
            and s["op"] in ("update", "forward")
            and not _validates(case)
            and "shape" in s["tags"]
            and s["ours"] is not None
        ),
    ),
    Allowance(
        "`MeanIoU(num_classes=None)`: `update()` after `load_state_dict`/`merge_state` into an instance not yet"
        " updated",
        lambda case, s: (
            _name(case) == "MeanIoU"
            and _init(case, "num_classes", 0) is None
            and (s["loaded"] or "merged" in s["history"])
            and s["kind"] in ("value", "error")
        ),
    ),
    Allowance(
        "extra states",  # ours carries ``_update_count`` through a state_dict: no "compute before update" warning
        lambda case, s: s["kind"] == "warning" and "was called before the ``update``" in s["text"] and s["loaded"],
    ),
    Allowance(
        "binned `BinaryAUROC(max_fpr=...)` `forward()` on a batch whose ROC curve ends below `max_fpr` (thresholds that"
        " leave out 0)",
        lambda case, s: (
            s["kind"] == "error"
            and s["op"] == "forward"
            and isinstance(s["theirs"], IndexError)
            and _init(case, "max_fpr") is not None
        ),
    ),
    Allowance(
        "`MulticlassRecallAtFixedPrecision` & co. with `min_precision=0` and a class without positives",
        lambda case, s: (
            s["kind"] == "error"
            and s["op"] == "forward"
            and isinstance(s["theirs"], IndexError)
            and any(_init(case, f"min_{name}") == 0 for name in ("precision", "recall", "sensitivity", "specificity"))
        ),
    ),
    Allowance(
        "`MultilabelConfusionMatrix` with float targets / `uint8` targets + `ignore_index`",
        lambda case, s: (
            s["kind"] == "error"
            # its subclasses (MultilabelJaccardIndex, MultilabelMatthewsCorrCoef) count through the same kernel
            and issubclass(case.origin, _torchmetrics_class("classification", "MultilabelConfusionMatrix"))
            and s["ours"] is None
            and isinstance(s["theirs"], (NotImplementedError, RuntimeError, IndexError))
        ),
    ),
    Allowance(
        "`top_k > 1` with label `preds`",
        lambda case, s: s["kind"] == "error" and (_init(case, "top_k") or 1) > 1 and s["ours"] is not None,
    ),
    Allowance(
        '`nan_strategy="disable"` in `MeanMetric`',
        lambda case, s: (
            s["kind"] == "value"
            and _name(case) in ("MeanMetric", "RunningMean")
            and s["weighted"]
            and _init(case, "nan_strategy") == "disable"
        ),
    ),
    Allowance(
        "float `nan_strategy` with a broadcast weight (`weight=2.0`, or a `(1,)` tensor)",
        lambda case, s: (
            s["kind"] == "value"
            and s["weighted"]
            and isinstance(_init(case, "nan_strategy"), float)
            and "layout" in s["history"]
        ),
    ),
    Allowance(
        "float `nan_strategy`",  # torchmetrics writes the fill into an expanded input: torch warns about that write
        lambda case, s: (
            s["kind"] == "warning"
            and isinstance(_init(case, "nan_strategy"), float)
            and "on expanded tensors is deprecated" in s["text"]  # index_put_, masked_fill_
        ),
    ),
    Allowance(
        "`MatthewsCorrCoef` (multiclass, more than 2 classes)",
        lambda case, s: s["kind"] == "value" and "MatthewsCorrCoef" in _name(case) and s["close"],
    ),
    Allowance(
        "`HingeLoss` with `ignore_index`",
        lambda case, s: s["kind"] == "value" and "HingeLoss" in _name(case) and s["close"],
    ),
    Allowance(
        "extra states",  # `_update_count` travels in a persistent state_dict(): `mean` states keep their average
        lambda case, s: (
            s["kind"] == "value"
            and s["loaded"]
            and any("mean" in getattr(fx, "__name__", str(fx)) for fx in _reductions(case))
        ),
    ),
    Allowance(
        "binned or micro-averaged multiclass curves with an integer target that is not int64"
        " (`int16`, `uint8`, `bool`)",
        lambda case, s: (
            s["kind"] == "error"
            and s["ours"] is None
            and case.origin in CURVE_ORIGINS
            and _name(case).startswith("Multiclass")
            and (_init(case, "thresholds") is not None or _init(case, "average") == "micro")
            and "one_hot is only applicable to index tensor of type LongTensor" in str(s["theirs"])
        ),
    ),
    Allowance(
        "`Perplexity` targets outside the vocabulary (not `ignore_index`)",  # a negative target: torchmetrics wraps
        lambda case, s: (
            _name(case) == "Perplexity"
            and (
                (
                    s["kind"] == "value"
                    and s["op"] == "forward"
                    and "range" in s["tags"]
                    and isinstance(s["ours"], Tensor)
                    and bool(s["ours"].isnan().all())
                )
                or (
                    s["kind"] == "error"
                    and s["op"] in ("compute", "reset")
                    and s["theirs"] is None
                    and "range" in s["history"]
                    and "outside the vocabulary" in str(s["ours"])
                )
            )
        ),
    ),
    Allowance(
        "binned multilabel curves with a `bool` target and `ignore_index`",
        lambda case, s: (
            s["kind"] == "value"
            and case.origin in CURVE_ORIGINS
            and _name(case).startswith("Multilabel")
            and _init(case, "thresholds") is not None
            and _init(case, "ignore_index") is not None
            and "bool_target" in s["history"]
        ),
    ),
    Allowance(
        "a `uint8` target and a negative `ignore_index` (`-1` stored as `255`)",
        lambda case, s: (
            (_init(case, "ignore_index") is not None)
            and "dtype" in s["history"] | s["tags"]
            and (
                ((_init(case, "ignore_index") or 0) < 0 and s["kind"] == "value")  # the stored sentinel counted
                or (  # binned multilabel curves: the -1 sentinel written into a uint8 target wraps, a view fails
                    s["kind"] == "error"
                    and s["ours"] is None
                    and case.origin in CURVE_ORIGINS
                    and _name(case).startswith("Multilabel")
                    and "is invalid for input of size" in str(s["theirs"])
                )
            )
        ),
    ),
    Allowance(
        "`preds`/`target` shapes that do not fit, with `validate_args=False` (every classification class)",
        lambda case, s: (
            s["kind"] == "error"
            and s["theirs"] is None
            and not _validates(case)
            and _family(case.origin) == "classification"
            and _clear_shape_error(s["ours"])
            and "shape" in str(s["ours"])
        ),
    ),
    Allowance(
        '`MulticlassExactMatch(multidim_average="samplewise")` after `merge_state()` of an empty state',
        lambda case, s: (
            s["kind"] == "value"
            and _name(case) == "MulticlassExactMatch"
            and _init(case, "multidim_average") == "samplewise"
            and "merged" in s["history"]  # torchmetrics merges its int64 `total` with `mean`
            and not any(bool(t.isnan().any()) for t in _tensors(s["ours"]))
        ),
    ),
)


def allowed(case: Case, situation: dict[str, Any]) -> Allowance | None:
    """The README row that accepts ``situation``, or ``None``."""
    situation = {
        "tags": frozenset(),
        "text": "",
        "ours": None,
        "theirs": None,
        "loaded": False,
        "weighted": False,
        "history": frozenset(),
        "close": False,
        "ignored_bad_preds": False,
        **situation,
    }
    for allowance in ALLOWED:
        try:
            if allowance.applies(case, situation):
                return allowance
        except Exception:  # a predicate reading a value it does not expect: not this row
            continue
    return None


# ---------------------------------------------------------------------------------------------------------------------
# Classes, construction paths and argument spaces.


def _is_task_wrapper(cls: type) -> bool:
    return "task" in inspect.signature(cls.__new__).parameters


def targets(pattern: str | None = None) -> list[type]:
    """The torchmetrics origins of the registry to fuzz (task wrappers are reached as a construction path)."""
    found = [origin for origin in registry() if not _is_task_wrapper(origin)]
    if pattern:
        found = [origin for origin in found if re.search(pattern, origin.__name__)]
    return sorted(found, key=lambda origin: (origin.__module__, origin.__name__))


def _public(origin: type) -> str:
    """``torchmetrics.classification`` for ``BinaryAccuracy``: the module that exports it (and its mirror's suffix)."""
    return ".".join(origin.__module__.split(".")[:2])


def _wrapper(origin: type) -> tuple[type, str] | None:
    """The torchmetrics task wrapper that builds ``origin`` and its ``task``, e.g. ``(Accuracy, "binary")``."""
    for prefix in _TASKS:
        if origin.__name__.startswith(prefix):
            import torchmetrics

            wrapper = getattr(torchmetrics, origin.__name__.removeprefix(prefix), None)
            if wrapper is not None and _is_task_wrapper(wrapper) and wrapper in registry():
                return wrapper, prefix.lower()
    return None


def _wrapper_accepts(origin: type, init: dict[str, Any]) -> bool:
    found = _wrapper(origin)
    return found is not None and set(init) <= set(inspect.signature(found[0].__new__).parameters)


#: Construction paths: how ``ours`` is built (``theirs`` is always the plain torchmetrics class or wrapper).
PATHS = ("direct", "wrapper", "accelerate", "patch", "patch-wrapper")


class Code(str):
    """A constructor argument given as Python code (evaluated afresh for every metric built), e.g. a base metric."""

    def __repr__(self) -> str:
        return str(self)


#: Base metrics for a wrapper's ``base_metric`` argument (``Running``).
BASE_METRICS = (
    Code("torchmetrics.MeanMetric()"),
    Code("torchmetrics.SumMetric()"),
    Code("torchmetrics.MaxMetric()"),
    Code("torchmetrics.MeanMetric(nan_strategy='error')"),
    Code("torchmetrics.SumMetric(nan_strategy='ignore')"),
)


# Values for options the annotations do not enumerate (ints, floats, strings): each class's documented ranges.
NAMED_SPACES: dict[str, list[Any]] = {
    "ignore_index": [None, -1, 0, 1, -100],
    "threshold": [0.5, 0.3, 0.0, 1.0],
    "thresholds": [None, None, 5, 1, [0.0, 0.3, 0.7, 1.0], "linspace"],
    "top_k": [1, 2, None],
    "zero_division": [0, 1, float("nan")],
    "nan_strategy": ["error", "warn", "ignore", "disable", 0.0, 2.5],
    "min_precision": [0.0, 0.5, 1.0],
    "min_recall": [0.0, 0.5, 1.0],
    "min_specificity": [0.0, 0.5, 1.0],
    "min_sensitivity": [0.0, 0.5, 1.0],
    "max_fpr": [None, 0.5, 1.0],
    "fpr_range": [(0.001, 0.1), (0.0, 1.0), (0.1, 0.5), (0.5, 0.1)],
    "n_bins": [15, 3, 1],
    "window": [1, 3, 5],
    "adjusted": [0, 1, 2],
    "power": [0.0, 1.0, 1.5, 2.0, 3.0, -1.0],
    "p": [1, 2, 3.5],
    "beta": [0.5, 1.0, 2.0],
    "num_classes": ["keep", "keep", None],
    "empty_target_action": ["neg", "pos", "skip", "error"],
    "multioutput": ["uniform_average", "raw_values", "variance_weighted"],
    "max_k": [None, 1, 3],
    "validate_args": [True, True, True, True, False],
    "log_prob": [False, False, True],
    "base_metric": list(BASE_METRICS),
    "nan_replace_value": [0.0, 1.0, 2.7, -1.0, 100.0],
    "data_range": [None, None, 1.0, (0.0, 1.0), (0.2, 0.8)],
    # detection: MeanAveragePrecision and the IoU family
    "box_format": ["xyxy", "xywh", "cxcywh"],
    "iou_type": ["bbox", "bbox", "segm", ("bbox", "segm")],
    "iou_thresholds": [None, None, [0.5], [0.5, 0.75], [0.1, 0.5, 0.55, 0.95]],
    "rec_thresholds": [None, None, [0.0, 0.5, 1.0], [0.25, 0.3]],
    "max_detection_thresholds": [None, None, [1, 10, 50], [5, 2, 200], [1, 3, 7]],  # unsorted, 100 absent
    "iou_threshold": [None, 0.5, 0.0, 0.9],
}
# Options left at the example's value: they change what a valid batch looks like.
_KEPT = frozenset(
    {"num_labels", "num_outputs", "keep_sequence_dim", "input_format", "compute_on_cpu", "sync_on_compute"}
)
_KEPT_BASE = frozenset(inspect.signature(torch.nn.Module.__init__).parameters) | {
    "compute_with_cache",
    "dist_sync_on_step",
    "process_group",
    "dist_sync_fn",
    "distributed_available_fn",
    "compute_on_cpu",
    "sync_on_compute",
}


def _literal_values(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        values: list[Any] = []
        for arg in typing.get_args(annotation):
            values += [None] if arg is type(None) else _literal_values(arg)
        return values if any(v is not None for v in values) else []
    return []


def argument_space(origin: type) -> dict[str, list[Any]]:
    """Each constructor option of ``origin`` and the values to draw for it (from annotations and :data:`NAMED_SPACES`).

    Example:
        >>> import torchmetrics
        >>> argument_space(torchmetrics.classification.MulticlassAccuracy)["average"]
        ['micro', 'macro', 'weighted', 'none', None]
    """
    space: dict[str, list[Any]] = {}
    for name, parameter in inspect.signature(origin.__init__).parameters.items():
        if name in ("self", "args", "kwargs") or name in _KEPT or name in _KEPT_BASE:
            continue
        literal = _literal_values(parameter.annotation)
        # A named space sharing no value with the class's own Literal is another family's option of the same name
        # (the aggregators' nan_strategy is not the nominal metrics').
        if name in NAMED_SPACES and (not literal or set(map(repr, literal)) & set(map(repr, NAMED_SPACES[name]))):
            space[name] = NAMED_SPACES[name]
        elif values := literal:
            space[name] = values
        elif parameter.annotation in (bool, "bool"):
            space[name] = [True, False]
    return space


def _example_init(origin: type) -> dict[str, Any]:
    """The arguments of the class's example, or none where the family has no example (detection, for now)."""
    try:
        return example_for(origin).init
    except LookupError:
        return {}


def _draw_init(rng: random.Random, origin: type) -> dict[str, Any]:
    example = _example_init(origin)
    # a wrapper's base metric is code, built afresh for each metric (the examples build one per ``**init``)
    init = {k: (BASE_METRICS[0] if k == "base_metric" else example[k]) for k in example}
    for name, values in argument_space(origin).items():
        if rng.random() < 0.5:
            value = rng.choice(values)
            if value == "keep":
                continue
            init[name] = torch.linspace(0, 1, 5) if value == "linspace" else value
    if init.get("top_k") is not None and "Multiclass" not in origin.__name__ and "Retrieval" not in origin.__name__:
        init.pop("top_k")
    return init


# ---------------------------------------------------------------------------------------------------------------------
# Inputs.


@dataclass(frozen=True)
class Arg:
    """One input of a batch: a contiguous base tensor and the layout it is passed in.

    Attributes:
        base: the tensor (or a Python number).
        layout: ``"plain"``, ``"noncontig"`` (every second element of a doubled tensor) or ``"expand"`` (``base`` has
            a leading dimension of 1, expanded to ``size``).
        size: the expanded leading size, for ``"expand"``.
    """

    base: Any
    layout: str = "plain"
    size: int = 0

    def make(self) -> Any:
        if isinstance(self.base, list):  # detection's list of dicts: each side gets its own tensors
            return copy.deepcopy(self.base)
        if not isinstance(self.base, Tensor):
            return self.base
        if self.layout == "noncontig":
            return _noncontig(self.base.clone())
        if self.layout == "expand":
            return self.base.clone().expand(self.size, *self.base.shape[1:])
        return self.base.clone()

    def code(self) -> str:
        if not isinstance(self.base, Tensor):
            return _value_code(self.base)
        text = _value_code(self.base)
        if self.layout == "noncontig":
            return f"noncontig({text})"
        if self.layout == "expand":
            return f"{text}.expand({self.size}, *{tuple(self.base.shape[1:])})"
        return text

    def rows(self) -> int:
        return self.size if self.layout == "expand" else (self.base.shape[0] if _batched(self.base) else -1)


def _value_code(value: Any) -> str:
    """Python code that builds ``value``: a tensor (its dtype and shape kept), or lists and dicts of them."""
    if isinstance(value, Tensor):
        if value.numel() == 0:
            return f"torch.empty({tuple(value.shape)}, dtype={value.dtype})"
        return f"torch.tensor({value.tolist()!r}, dtype={value.dtype})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key!r}: {_value_code(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_value_code(item) for item in value) + "]"
    return repr(value)


def _noncontig(x: Tensor) -> Tensor:
    return torch.stack([x, x], -1)[..., 0]


def _batched(x: Any) -> bool:
    return isinstance(x, Tensor) and x.ndim > 0


@dataclass(frozen=True)
class Batch:
    """The positional arguments of one ``update``/``forward`` call and what was done to them (``tags``)."""

    args: tuple[Arg, ...]
    tags: frozenset[str] = frozenset()

    def make(self) -> tuple[Any, ...]:
        return tuple(arg.make() for arg in self.args)

    def code(self) -> str:
        return ", ".join(arg.code() for arg in self.args)

    def cut(self, rows: int) -> Batch | None:
        """The batch with only its first ``rows`` rows (``None`` when that changes nothing or is not possible)."""
        sizes = {arg.base.shape[0] for arg in self.args if _batched(arg.base) and arg.layout != "expand"}
        if len(sizes) != 1 or rows >= next(iter(sizes)):
            return None
        return replace(
            self,
            args=tuple(
                replace(arg, base=arg.base[:rows]) if _batched(arg.base) and arg.layout != "expand" else arg
                for arg in self.args
            ),
        )


_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float64)
_INT_DTYPES = (torch.int32, torch.int64, torch.uint8, torch.int16, torch.bool)


@dataclass
class _Roles:
    """A valid batch as named tensors, and what each is (the edge cases need to know)."""

    order: list[str]
    tensors: dict[str, Any]
    labels: dict[str, int]  # name -> number of valid label values (targets, label preds, indexes)
    floats: list[str]
    target: str | None = "target"
    ignore_index: int | None = None
    tags: set[str] = field(default_factory=set)
    #: The family's own invalid inputs (the "invalid" edge): changes ``tensors`` and returns the tag naming what it did.
    invalid: Callable[[random.Random, torch.Generator], str] | None = None


def _family(origin: type) -> str:
    module = _public(origin)
    if module in ("torchmetrics.aggregation", "torchmetrics") and "aggregation" in origin.__module__:
        return "aggregation"
    return "panoptic" if "PanopticQuality" in origin.__name__ else module.split(".")[-1]


def _classification(origin: type, init: dict[str, Any], g: torch.Generator, rng: random.Random, b: int) -> _Roles:
    name = origin.__name__
    task = next((t for t in _TASKS if name.startswith(t)), "Multiclass")
    classes = init.get("num_classes") or _DEFAULT_CLASSES
    labels = init.get("num_labels") or _DEFAULT_CLASSES
    extra = (rng.randint(1, 3),) if init.get("multidim_average") == "samplewise" or rng.random() < 0.2 else ()
    kind = rng.choice(["logits", "probs", "probs", "labels"])
    scored = (
        "Curve",
        "ROC",
        "AveragePrecision",
        "Calibration",
        "Hinge",
        "At",
        "Fixed",
        "EER",
        "LogAUC",
        "Ranking",
        "Coverage",
    )
    float_preds = any(k in name for k in scored)
    if float_preds:  # label preds are invalid input here (torchmetrics' validation asks for floats)
        kind = rng.choice(["logits", "probs", "probs", "probs", "labels"])
    if task == "Multiclass":
        target = torch.randint(0, classes, (b, *extra), generator=g)
        if kind == "labels":
            preds = torch.randint(0, classes, (b, *extra), generator=g)
        else:
            preds = torch.randn(b, classes, *extra, generator=g) * 3
            preds = preds.softmax(1) if kind == "probs" else preds
        n_target, n_preds = classes, (classes if kind == "labels" else 0)
    else:
        shape = (b, *extra) if task == "Binary" else (b, labels, *extra)
        target = torch.randint(0, 2, shape, generator=g)
        if kind == "labels":
            preds = torch.randint(0, 2, shape, generator=g)
        else:
            preds = torch.randn(shape, generator=g) * 3
            preds = preds.sigmoid() if kind == "probs" else preds
        n_target, n_preds = 2, (2 if kind == "labels" else 0)
    found = _Roles(["preds", "target"], {"preds": preds, "target": target}, {"target": n_target}, [], "target")
    if n_preds:
        found.labels["preds"] = n_preds
    else:
        found.floats.append("preds")
    found.ignore_index = init.get("ignore_index")
    found.tags = {"label_preds"} if float_preds and kind == "labels" else set()
    if "num_groups" in init:  # group fairness: one group per sample, ids 0 .. num_groups - 1
        found.order.append("groups")
        found.tensors["groups"] = torch.randint(0, init["num_groups"], (b,), generator=g)
        found.labels["groups"] = init["num_groups"]  # the "range" edge: group ids out of range
    return found


def _regression(origin: type, init: dict[str, Any], g: torch.Generator, rng: random.Random, b: int) -> _Roles:
    example = example_for(origin).inputs
    tensors = {}
    for name, x in zip(("preds", "target"), example, strict=True):
        shape = (b, *x.shape[1:])
        if rng.random() < 0.25:
            tensors[name] = torch.randn(shape, generator=g)
        else:
            tensors[name] = torch.rand(shape, generator=g) + 0.1
    return _Roles(["preds", "target"], tensors, {}, ["preds", "target"], None)


def _retrieval(origin: type, init: dict[str, Any], g: torch.Generator, rng: random.Random, b: int) -> _Roles:
    grades = 4 if origin.__name__ == "RetrievalNormalizedDCG" else 2
    tensors = {
        "preds": torch.rand(b, generator=g),
        "target": torch.randint(0, grades, (b,), generator=g),
        "indexes": torch.randint(0, 3, (b,), generator=g),
    }
    found = _Roles(["preds", "target", "indexes"], tensors, {"target": grades, "indexes": 1 << 30}, ["preds"])
    found.ignore_index = init.get("ignore_index")
    return found


def _segmentation(origin: type, init: dict[str, Any], g: torch.Generator, rng: random.Random, b: int) -> _Roles:
    classes = init.get("num_classes") or _DEFAULT_CLASSES
    h, w = rng.randint(1, 4), rng.randint(1, 3)
    preds = torch.randint(0, classes, (b, h, w), generator=g)
    target = torch.randint(0, classes, (b, h, w), generator=g)
    fmt = init.get("input_format", "one-hot")

    def one_hot(x: Tensor) -> Tensor:
        return torch.nn.functional.one_hot(x, classes).movedim(-1, 1)

    if fmt == "one-hot":
        preds, target = one_hot(preds), one_hot(target)
    elif fmt == "mixed":
        preds = one_hot(preds)
    found = _Roles(["preds", "target"], {"preds": preds, "target": target}, {}, [], "target")
    if fmt in ("index", "mixed"):
        found.labels["target"] = classes
    if fmt == "index":
        found.labels["preds"] = classes
    return found


def _image(origin: type, init: dict[str, Any], g: torch.Generator, rng: random.Random, b: int) -> _Roles:
    """Images shaped like the example's; SCC/VIF ``(N, C, H, W)`` of random sizes, some with flat halves or constant.

    Its invalid inputs: another channel count, a rank of 3 or 5, sides too small for the kernel, scales or block size.
    """
    flat = origin.__name__ in ("SpatialCorrelationCoefficient", "VisualInformationFidelity")
    if flat:
        size = 41 if origin.__name__ == "VisualInformationFidelity" else rng.randint(8, 12)
        shape: tuple[int, ...] = (b, rng.randint(1, 3), size, size)
    else:
        shape = (b, *example_for(origin).inputs[0].shape[1:])
    tensors = {name: torch.rand(shape, generator=g) for name in ("preds", "target")}
    if flat and rng.random() < 0.3:
        tensors[rng.choice(["preds", "target"])][..., : shape[-1] // 2] = 0.5
    found = _Roles(["preds", "target"], tensors, {}, ["preds", "target"], None)
    if rng.random() < 0.15:  # constant images: one, or both (the same constant or not)
        for name in rng.choice([["preds"], ["target"], ["preds", "target"]]):
            tensors[name] = torch.full(shape, rng.choice([0.0, 0.5, 1.0]))
        found.tags.add("constant")

    def invalid(rng: random.Random, g: torch.Generator) -> str:
        how = rng.choice(["channels", "rank", "small"])
        new = list(shape)
        if how == "channels" and len(new) > 2:
            new[1] = rng.choice([c for c in (1, 2, 3, 4) if c != new[1]])
        elif how == "rank":
            new = new[:1] + new[2:] if len(new) > 3 and rng.random() < 0.5 else [*new[:2], 1, *new[2:]]
        else:
            how = "small"
            side = rng.randint(1, 12)
            new[-2:] = [side, rng.choice([side, new[-1]])] if rng.random() < 0.5 else [new[-2], side]
        for name in found.order:
            found.tensors[name] = torch.rand(new, generator=g)
        return f"image_{how}"

    found.invalid = invalid
    return found


def _text(origin: type, init: dict[str, Any], g: torch.Generator, rng: random.Random, b: int) -> _Roles:
    seq = rng.randint(1, 4)
    preds = torch.randn(b, seq, _DEFAULT_CLASSES, generator=g)
    target = torch.randint(0, _DEFAULT_CLASSES, (b, seq), generator=g)
    found = _Roles(["preds", "target"], {"preds": preds, "target": target}, {"target": _DEFAULT_CLASSES}, ["preds"])
    found.ignore_index = init.get("ignore_index")
    return found


def _aggregation(origin: type, init: dict[str, Any], g: torch.Generator, rng: random.Random, b: int) -> _Roles:
    shape = (b,) if rng.random() < 0.8 else (b, 2)
    found = _Roles(["value"], {"value": torch.randn(shape, generator=g) * 10}, {}, ["value"], None)
    if "weight" in inspect.signature(origin.update).parameters and rng.random() < 0.6:
        weight = rng.choice(["tensor", "tensor", "number", "one"])
        found.order.append("weight")
        if weight == "tensor":
            found.tensors["weight"] = torch.rand(shape, generator=g) * 3
            found.floats.append("weight")
        elif weight == "one":
            found.tensors["weight"] = torch.rand(1, generator=g) + 0.5
            found.floats.append("weight")
        else:
            found.tensors["weight"] = rng.choice([2.0, 0.5, 0.0])
    if rng.random() < 0.1:
        found.tensors["value"] = rng.choice([1.5, -2.0, float("nan")])
    return found


def _nominal(origin: type, init: dict[str, Any], g: torch.Generator, rng: random.Random, b: int) -> _Roles:
    """Categories as integers, as floats (the NaN edge reaches them) or as scores ``(N, C)`` (argmaxed)."""
    if origin.__name__ == "FleissKappa":  # counts (N, C) or scores (N, C, raters)
        categories = rng.randint(1, 4)
        if init.get("mode", "counts") == "probs":
            raters = rng.randint(1, 5)
            found = _Roles(["ratings"], {"ratings": torch.randn(b, categories, raters, generator=g)}, {}, ["ratings"])
            found.tags = {"range"} if raters < categories else set()  # torchmetrics one-hot encodes with raters
            return found
        found = _Roles(["ratings"], {"ratings": torch.randint(0, 4, (b, categories), generator=g)}, {}, [], None)
        found.invalid = functools.partial(_wrong_rank, found)
        return found
    classes = init.get("num_classes") or _DEFAULT_CLASSES
    found = _Roles(["preds", "target"], {}, {}, [], None)
    for name in found.order:
        kind = rng.choice(["ints", "floats", "floats", "scores"])
        if kind == "scores":
            columns = rng.randint(1, classes + 1)
            found.tensors[name] = torch.randn(b, columns, generator=g)
            if columns > classes:  # its argmax may be a category out of range
                found.tags.add("range")
            continue
        x = torch.randint(0, classes, (b,), generator=g)
        found.tensors[name] = x.float() if kind == "floats" else x
        found.labels[name] = classes
        if kind == "floats":
            found.floats.append(name)
    found.invalid = functools.partial(_wrong_rank, found)
    return found


def _wrong_rank(roles: _Roles, rng: random.Random, g: torch.Generator) -> str:
    """One input with a dimension more or fewer (its values kept, or a scalar from a 1-D input)."""
    name = rng.choice([n for n in roles.order if isinstance(roles.tensors[n], Tensor)])
    x = roles.tensors[name]
    roles.tensors[name] = x[..., 0] if x.ndim > 1 and rng.random() < 0.5 else torch.stack([x, x], -1)
    return "rank"


def _clustering(origin: type, init: dict[str, Any], g: torch.Generator, rng: random.Random, b: int) -> _Roles:
    """Cluster labels (any integers: ranked as torch.unique does), or embeddings ``(N, d)`` and their labels.

    Degenerate data: one cluster, or clusters of identical points (torchmetrics' exact cases: CH 1.0, Dunn inf).
    """
    labels = torch.randint(-2, rng.randint(-1, 5), (b,), generator=g)
    tags = set()
    if rng.random() < 0.1:
        labels, tags = torch.full((b,), rng.randint(-2, 3)), {"one_cluster"}
    if origin.__name__ in ("CalinskiHarabaszScore", "DaviesBouldinScore", "DunnIndex"):
        dims = rng.randint(1, 3)
        if rng.random() < 0.3:  # every cluster one point, repeated
            data = (torch.randn(7, dims, generator=g) * rng.choice([1.0, 10.0]))[labels + 2]
            tags.add("identical_points")
        else:
            data = torch.randn(b, dims, generator=g) + labels[:, None] * rng.choice([0.0, 1.0, 3.0])
        found = _Roles(["data", "labels"], {"data": data, "labels": labels}, {}, ["data"], None)
    else:
        preds = torch.randint(-2, rng.randint(-1, 5), (b,), generator=g)
        found = _Roles(["preds", "target"], {"preds": preds, "target": labels}, {}, [], None)
    found.invalid, found.tags = functools.partial(_wrong_rank, found), tags
    return found


def _detection(origin: type, init: dict[str, Any], g: torch.Generator, rng: random.Random, b: int) -> _Roles:
    """``b`` images of :func:`tools.detection_scenes.edge_scenes` (masks for ``segm``), boxes in a random dtype.

    Its invalid inputs: a box of 3 values, a missing key, labels shorter than boxes, ``preds`` and ``target`` of
    different lengths, masks that do not fit the boxes, NaN boxes or scores.
    """
    iou_type = init.get("iou_type", "bbox")
    masks = "segm" in iou_type
    dtype = rng.choice([torch.float32, torch.float32, torch.float32, torch.float64, torch.float16])
    size = (rng.choice([8, 16]), rng.choice([8, 16])) if masks else (16, 16)
    preds, target = detection_scenes.edge_scenes(
        int(torch.randint(0, 1 << 30, (), generator=g)),
        b,
        box_format=init.get("box_format", "xyxy"),
        masks=masks,
        image_size=size,
        classes=rng.choice([1, 2, 3, 5]),
        dtype=dtype,
    )
    found = _Roles(["preds", "target"], {"preds": preds, "target": target}, {}, [], None)

    def invalid(rng: random.Random, g: torch.Generator) -> str:
        side = rng.choice(["preds", "target"])
        items = found.tensors[side]
        how = rng.choice(["box_shape", "missing_key", "lengths", "images", "masks", "nan"])
        if how == "images" or not items:
            found.tensors[side] = items[:-1] if items else [copy.deepcopy(x) for x in found.tensors["preds"][:1]]
            return "det_images"
        item = items[rng.randrange(len(items))]
        if how == "box_shape":
            item["boxes"] = item["boxes"][:, :3] if rng.random() < 0.5 else item["boxes"].reshape(-1)
        elif how == "missing_key":
            item.pop(rng.choice([k for k in item if k in ("boxes", "labels", "scores", "masks")]))
        elif how == "lengths":
            item["labels"] = (
                torch.cat([item["labels"], item["labels"][:1]]) if len(item["labels"]) else item["labels"][1:]
            )
            if not len(item["boxes"]):
                item["labels"] = torch.zeros(1, dtype=torch.long)
        elif how == "masks" and masks:
            item["masks"] = item["masks"][1:] if len(item["masks"]) else item["masks"].new_zeros((1, *size))
        else:
            how = "nan"
            key = "scores" if side == "preds" and rng.random() < 0.5 else "boxes"
            if item[key].numel():
                item[key] = item[key].clone()
                item[key].view(-1)[rng.randrange(item[key].numel())] = rng.choice([float("nan"), float("inf")])
        return f"det_{how}"

    found.invalid = invalid
    return found


def _panoptic(origin: type, init: dict[str, Any], g: torch.Generator, rng: random.Random, b: int) -> _Roles:
    """``b`` scenes of (category, instance) points, 1-D to 3-D, large and negative instance ids.

    The predictions keep some target points (so segments match); a category in neither ``things`` nor ``stuffs`` is
    void in the target, and now and then in ``preds`` too (an error unless ``allow_unknown_preds_category``).
    """
    known = sorted({*init["things"], *init["stuffs"]})
    drawn = torch.tensor([*known, known[-1] + 1, -5])
    spatial = rng.choice([(7,), (4, 5), (2, 3, 3)])

    def colors(categories: Tensor) -> Tensor:
        category = categories[torch.randint(0, len(categories), (b, *spatial), generator=g)]
        instance = torch.tensor([-(2**40), -1, 0, 1, 2**33])[torch.randint(0, 5, (b, *spatial), generator=g)]
        return torch.stack([category, instance], -1)

    target, allowed = colors(drawn), drawn if rng.random() < 0.3 else torch.tensor(known)
    other = colors(allowed)
    kept = (torch.rand(b, *spatial, 1, generator=g) < rng.random()) & torch.isin(target[..., :1], allowed)
    found = _Roles(["preds", "target"], {"preds": torch.where(kept, target, other), "target": target}, {}, [], None)
    found.invalid = functools.partial(_wrong_rank, found)
    return found


_FAMILIES: dict[str, Callable[..., _Roles]] = {
    "nominal": _nominal,
    "clustering": _clustering,
    "classification": _classification,
    "image": _image,
    "regression": _regression,
    "retrieval": _retrieval,
    "segmentation": _segmentation,
    "text": _text,
    "aggregation": _aggregation,
    "wrappers": _aggregation,  # Running(base_metric=an aggregator): the aggregators' inputs
    "detection": _detection,
    "panoptic": _panoptic,
}

#: Edge cases a batch may get (several may combine), with their weights.
EDGES = {
    "nan": 2,
    "dtype": 2,
    "layout": 2,
    "zero_dim": 1,
    "ignored": 1,
    "all_ignored": 1,
    "range": 2,
    "shape": 1,
    "invalid": 2,
}


def draw_batch(rng: random.Random, origin: type, init: dict[str, Any], edge: bool = True) -> Batch:
    """A batch for ``origin`` built with ``init``: valid, or with edge cases (:data:`EDGES`) when ``edge``.

    Raises:
        LookupError: for a class of a family without an input generator.
    """
    family = _family(origin)
    if family not in _FAMILIES:
        raise LookupError(f"no input generator for {origin.__name__} (family {family!r}): add one to tools/fuzz.py")
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    size = rng.choice([0, 1, 1, 2, 3, 4, 5, 8]) if edge else rng.randint(2, 6)
    roles = _FAMILIES[family](origin, init, g, rng, size)
    tags = {"empty"} if size == 0 else ({"single"} if size == 1 else set())
    layouts = dict.fromkeys(roles.order, "plain")
    if edge:
        picked = {name for name in EDGES if rng.random() < EDGES[name] / 12}
        for edge_name in sorted(picked):
            try:
                applied = _apply_edge(edge_name, roles, layouts, rng, g, size)
            except (RuntimeError, IndexError, ValueError):  # an edge that does not fit this batch's dtypes or shapes
                applied = False
            if applied:
                tags.add(edge_name)
    tags |= roles.tags
    args = []
    for name in roles.order:
        value = roles.tensors[name]
        if layouts[name] == "expand" and _batched(value) and value.shape[0] >= 1:
            args.append(Arg(value[:1].clone(), "expand", value.shape[0]))
        else:
            args.append(Arg(value, layouts[name] if _batched(value) else "plain"))
    classes = init.get("num_classes") or _DEFAULT_CLASSES
    if family == "nominal" and origin.__name__ != "FleissKappa" and _categories_out_of_range(args, classes):
        tags.add("range")  # an edge case (a shape, a dtype) may have made one: as torchmetrics casts them
    if "num_groups" in init and "groups" in roles.order:  # as passed: an edge case may have changed the groups
        groups = args[roles.order.index("groups")].make()
        groups = groups[(groups >= 0) & (groups < init["num_groups"])]  # an id out of range stands for no group
        if groups.unique().numel() < init["num_groups"]:
            tags.add("missing_group")  # torchmetrics counts the later groups in the wrong rows
    return Batch(tuple(args), frozenset(tags))


def _apply_edge(  # noqa: PLR0911 - one return per edge case
    edge: str, roles: _Roles, layouts: dict[str, str], rng: random.Random, g: torch.Generator, size: int
) -> bool:
    tensors = roles.tensors
    floats = [
        n
        for n in roles.floats
        if isinstance(tensors[n], Tensor) and tensors[n].numel() and tensors[n].is_floating_point()
    ]
    if edge == "nan" and floats:
        name = rng.choice(floats)
        x = tensors[name].clone().reshape(-1)
        x[rng.randrange(x.numel())] = rng.choice([float("nan"), float("inf"), -float("inf"), float("nan")])
        tensors[name] = x.reshape(tensors[name].shape)
        return True
    if edge == "dtype":
        name = rng.choice([n for n in roles.order if isinstance(tensors[n], Tensor)])
        x = tensors[name]
        dtype = rng.choice(_FLOAT_DTYPES + _INT_DTYPES)
        if x.is_floating_point() and dtype in _INT_DTYPES and name in roles.floats:
            x = x.round()
        tensors[name] = x.to(dtype)
        return True
    if edge == "layout":
        name = rng.choice(roles.order)
        if _batched(tensors[name]):
            layouts[name] = rng.choice(["noncontig", "expand"])
            return True
        return False
    if edge == "zero_dim" and size == 1:
        for name in roles.order:
            if _batched(tensors[name]) and tensors[name].ndim == 1:
                tensors[name] = tensors[name].reshape(())
        return True
    if edge in ("ignored", "all_ignored") and roles.ignore_index is not None and roles.target:
        x = tensors[roles.target].clone()
        if edge == "all_ignored":
            x.fill_(roles.ignore_index)
        elif x.numel():
            x.view(-1)[rng.randrange(x.numel())] = roles.ignore_index
        tensors[roles.target] = x
        return True
    if edge == "range" and roles.labels:
        name = rng.choice(sorted(roles.labels))
        x = tensors[name].clone()
        if x.numel() and name != "indexes":
            x.view(-1)[rng.randrange(x.numel())] = rng.choice([roles.labels[name], roles.labels[name] + 3, -1, -2])
            tensors[name] = x
            return True
        if x.numel():  # indexes: negative query ids
            x.view(-1)[0] = -1
            tensors[name] = x
            return True
        return False
    if edge == "invalid" and roles.invalid is not None:
        roles.tags.add(roles.invalid(rng, g))
        return True
    if edge == "shape":
        name = rng.choice(roles.order)
        x = tensors[name]
        if not _batched(x):
            return False
        how = rng.choice(["drop", "extra", "trailing"])
        if how == "drop" and x.shape[0] >= 1:
            tensors[name] = x[:-1]
        elif how == "extra":
            tensors[name] = torch.cat([x, x[:1]]) if x.shape[0] else x.new_zeros((1, *x.shape[1:]))
        else:
            tensors[name] = x.unsqueeze(-1)
        return True
    return False


# ---------------------------------------------------------------------------------------------------------------------
# Cases and operations.

#: Operations of a sequence and their weights.
OP_WEIGHTS = {
    "update": 6,
    "forward": 3,
    "compute": 3,
    "reset": 1,
    "pickle": 1,
    "clone": 1,
    "load": 1,
    "load_plain": 1,
    "load_into_plain": 1,
    "merge": 1,
    "merge_plain": 1,
    "merge_into_plain": 1,
    "merge_into_fresh": 1,
}


@dataclass(frozen=True)
class Op:
    """One operation of a sequence (``batches``: the batch of update/forward, or the updates of a merged state)."""

    kind: str
    batches: tuple[Batch, ...] = ()


@dataclass(frozen=True)
class Case:
    """A class, its arguments, how ours is built, and the operations to run."""

    origin: type
    init: dict[str, Any]
    path: str
    ops: tuple[Op, ...]


def draw_case(rng: random.Random, origin: type) -> Case:
    """A random case for ``origin``: arguments, a construction path and 3 to 12 operations ending in ``compute``."""
    init = _draw_init(rng, origin)
    paths = [p for p in PATHS if "wrapper" not in p or _wrapper_accepts(origin, init)]
    if _reference(origin) is not None:  # no torchmetrics class to accelerate or patch
        paths = ["direct"]
    path = rng.choice(paths)
    kinds, weights = zip(*OP_WEIGHTS.items(), strict=True)
    ops = []
    for _ in range(rng.randint(2, 11)):
        kind = rng.choices(kinds, weights)[0]
        if kind in ("update", "forward"):
            ops.append(Op(kind, (draw_batch(rng, origin, init, edge=rng.random() < 0.5),)))
        elif kind.startswith("merge"):
            count = rng.randint(0, 2)
            ops.append(Op(kind, tuple(draw_batch(rng, origin, init, edge=rng.random() < 0.3) for _ in range(count))))
        else:
            ops.append(Op(kind))
    ops.append(Op("compute"))
    return Case(origin, init, path, tuple(ops))


# ---------------------------------------------------------------------------------------------------------------------
# Building both sides.


def _ours_code(case: Case) -> str:
    """The expression that builds ours, with ``init`` and the classes named as in the reproducer's preamble."""
    public, name = _public(case.origin), case.origin.__name__
    mirror = registry()[case.origin].__module__  # where the accelerated class is defined (imported by _imports)
    if case.path == "direct":
        return f"{mirror}.{name}(**init())"
    if case.path == "accelerate":
        return f"torchmetrics_async.accelerate({public}.{name}(**init()))"
    wrapper = _wrapper(case.origin)
    if case.path == "wrapper":
        assert wrapper is not None
        return f"torchmetrics_async.{wrapper[0].__name__}(task={wrapper[1]!r}, **init())"
    if case.path == "patch":
        return f"_patched(lambda: {public}.{name}(**init()))"
    assert wrapper is not None
    return f"_patched(lambda: torchmetrics.{wrapper[0].__name__}(task={wrapper[1]!r}, **init()))"


def _reference(origin: type) -> str | None:
    """The stand-in, as code, for a torchmetrics class that cannot be built here (``None``: the class itself).

    ``MeanAveragePrecision`` without torchvision: :class:`tools.detection_scenes.CocoReference`, torchmetrics' own code
    with our box conversion (its COCO dicts evaluated by pycocotools or faster-coco-eval). The IoU family has none:
    without torchvision its cases are skipped.
    """
    if origin.__name__ == "MeanAveragePrecision" and not detection_scenes.torchvision_available():
        return "tools.detection_scenes.CocoReference"
    return None


def _theirs_code(case: Case) -> str:
    public, name = _public(case.origin), case.origin.__name__
    if (reference := _reference(case.origin)) is not None:
        return f"{reference}(**init())"
    if "wrapper" in case.path:
        wrapper = _wrapper(case.origin)
        assert wrapper is not None
        return f"torchmetrics.{wrapper[0].__name__}(task={wrapper[1]!r}, **init())"
    return f"{public}.{name}(**init())"


def _patched(build: Callable[[], Any]) -> Any:
    with patch():
        return build()


_PREAMBLE = """\
import copy
import pickle
import warnings

import torch
import torchmetrics
import torchmetrics.aggregation
import torchmetrics.classification
import torchmetrics.clustering
import torchmetrics.image
import torchmetrics.nominal
import torchmetrics.regression
import torchmetrics.retrieval
import torchmetrics.segmentation
import torchmetrics.text
from torch import tensor

import torchmetrics_async
import torchmetrics_async.aggregation
import torchmetrics_async.classification
import torchmetrics_async.clustering
import torchmetrics_async.image
import torchmetrics_async.nominal
import torchmetrics_async.regression
import torchmetrics_async.retrieval
import torchmetrics_async.segmentation
import torchmetrics_async.text
from torchmetrics_async.testing import no_host_sync

nan, inf = float("nan"), float("inf")


def persistent(metric):
    # A wrapper's held metrics too: torchmetrics' persistent() sets the metric's own states only.
    for module in metric.modules():
        if isinstance(module, torchmetrics.Metric):
            module.persistent(True)
"""


def _imports(case: Case) -> str:
    reference = "import tools.detection_scenes\n" if _reference(case.origin) else ""
    return f"import {_public(case.origin)}\nimport {registry()[case.origin].__module__}\n{reference}"


def _namespace(case: Case) -> dict[str, Any]:
    namespace: dict[str, Any] = {"_patched": _patched, "noncontig": _noncontig}
    exec(_PREAMBLE + _imports(case), namespace)
    init_code = repr(case.init)
    namespace["init"] = lambda: eval(init_code, namespace)  # fresh objects (a wrapper's base metric) at every build
    ours_code, theirs_code = _ours_code(case), _theirs_code(case)
    namespace["make_ours"] = lambda: eval(ours_code, namespace)
    namespace["make_theirs"] = lambda: eval(theirs_code, namespace)
    return namespace


# ---------------------------------------------------------------------------------------------------------------------
# Running: outcomes, the comparator and the lockstep runner.


@dataclass
class Outcome:
    """What one call did: its value or its error, and the warnings it gave."""

    value: Any = None
    error: BaseException | None = None
    warnings: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if self.error is not None:
            return f"raises {type(self.error).__name__}: {_short(str(self.error))}"
        return f"returns {_short(repr(self.value))}"


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _warning_text(message: Any) -> str:
    text = str(message).split(" (torchmetrics-async:")[0]
    return " ".join(text.split())


def _call(fn: Callable[[], Any], guard: bool = False) -> Outcome:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if guard:
                with no_host_sync():
                    value = fn()
            else:
                value = fn()
        except Exception as error:
            return Outcome(error=error, warnings=[_warning_text(w.message) for w in caught])
    return Outcome(value, None, [_warning_text(w.message) for w in caught])


def compare_values(ours: Any, theirs: Any, path: str = "value") -> tuple[str, bool] | None:  # noqa: PLR0911
    """The first difference of two results (structure, dtype, shape, values with NaNs equal), or ``None``.

    With the difference comes whether the values are close (for the documented last-bits deviations).

    Example:
        >>> compare_values(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")])) is None
        True
        >>> compare_values(torch.tensor(1), torch.tensor(1.0))[0]
        'value: dtype torch.int64 != torch.float32'
    """
    if isinstance(theirs, Tensor) or isinstance(ours, Tensor):
        if not (isinstance(theirs, Tensor) and isinstance(ours, Tensor)):
            return f"{path}: {type(ours).__name__} != {type(theirs).__name__}", False
        if ours.dtype != theirs.dtype:
            return f"{path}: dtype {ours.dtype} != {theirs.dtype}", False
        if ours.shape != theirs.shape:
            return f"{path}: shape {tuple(ours.shape)} != {tuple(theirs.shape)}", False
        if ours.device != theirs.device:
            return f"{path}: device {ours.device} != {theirs.device}", False
        a, b = ours.detach(), theirs.detach()
        try:
            torch.testing.assert_close(a, b, equal_nan=True, check_dtype=False)
        except AssertionError:
            try:
                torch.testing.assert_close(a.double(), b.double(), equal_nan=True, rtol=1e-4, atol=1e-6)
                close = True
            except (AssertionError, RuntimeError):
                close = False
            return f"{path}: {_short(repr(a))} != {_short(repr(b))}", close
        return None
    if isinstance(theirs, dict) and isinstance(ours, dict):
        if set(ours) != set(theirs):
            return f"{path}: keys {sorted(ours)} != {sorted(theirs)}", False
        for key in theirs:
            if found := compare_values(ours[key], theirs[key], f"{path}[{key!r}]"):
                return found
        return None
    if isinstance(theirs, (list, tuple)) and isinstance(ours, (list, tuple)):
        if type(ours) is not type(theirs) or len(ours) != len(theirs):
            return f"{path}: {type(ours).__name__}[{len(ours)}] != {type(theirs).__name__}[{len(theirs)}]", False
        for i, (x, y) in enumerate(zip(ours, theirs, strict=True)):
            if found := compare_values(x, y, f"{path}[{i}]"):
                return found
        return None
    if isinstance(theirs, float) and isinstance(ours, float) and math.isnan(theirs) and math.isnan(ours):
        return None
    if type(ours) is not type(theirs) or ours != theirs:
        return f"{path}: {ours!r} != {theirs!r}", False
    return None


class Finding(Exception):
    """A difference no README deviation accepts: ``kind`` (a short key the shrinker keeps), ``detail``, ``step``."""

    def __init__(self, kind: str, detail: str, step: int = -1) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail, self.step = kind, detail, step


def _forward_may_sync(case: Case) -> bool:
    """Whether ``forward()`` is a listed caveat under ``case.init`` (coverage.FORWARD_CAVEATS)."""
    if case.origin not in FORWARD_CAVEATS:
        return False
    if case.origin in CURVE_ORIGINS:
        return case.init.get("thresholds") is None
    if case.origin.__name__ == "CatMetric":
        return case.init.get("nan_strategy", "warn") in ("warn", "ignore")
    return True


def _clear_shape_error(ours: BaseException | None) -> bool:
    """Whether ours rejected a batch-size mismatch at once with a clear error (issue 19).

    A ``ValueError``, or torchmetrics' validated shape error (README: "`preds`/`target` shapes that do not fit, with
    `validate_args=False`").
    """
    if ours is None or isinstance(ours, HostSyncError):
        return False
    # a TypeError is a validation error too (e.g. a dtype check that comes before the shape check)
    return isinstance(ours, (ValueError, TypeError)) or "expected to have the same shape" in str(ours)


def _bad_preds_only_ignored(case: Case, args: tuple[Any, ...]) -> bool:
    """Multiclass label ``preds`` whose out-of-range values all sit where ``target`` is ``ignore_index``."""
    ignore, classes = case.init.get("ignore_index"), case.init.get("num_classes")
    if classes is None and ignore is not None and case.init.get("multidim_average") == "samplewise":
        classes = 1 + (not 0 <= ignore < 1)  # torchmetrics' one-hot form counts num_classes=None as 1 (+ its sentinel)
    if ignore is None or not classes or not case.origin.__name__.startswith("Multiclass") or len(args) != 2:
        return False
    preds, target = args
    if not (isinstance(preds, Tensor) and isinstance(target, Tensor)) or preds.shape != target.shape:
        return False
    bad = (preds < 0) | (preds >= classes)
    return bool(bad.any()) and bool((target[bad] == ignore).all())


def _state_values(metric: Any) -> list[Any]:
    """The metric's states as comparable values: a tensor's bits (``None`` while unset), a list's length and ids.

    A state set from ``None`` to zeros counts as unchanged (torchmetrics' RMSE-SW sizes its map before its checks).
    """
    values = []
    for name in getattr(metric, "_defaults", {}):
        value = getattr(metric, name, None)
        if isinstance(value, Tensor):
            zeros = not bool(value.ne(0).any())  # NaN counts as non-zero
            bits = value.detach().reshape(-1).contiguous().view(torch.uint8)  # NaN-safe, every dtype
            values.append(None if zeros else (value.dtype, value.shape, bits.clone()))
        elif isinstance(value, list):
            values.append([id(item) for item in value])
        else:
            values.append(value)
    return values


def _same_state_values(now: list[Any], before: list[Any]) -> bool:
    """Whether two :func:`_state_values` snapshots are equal (tensor bits compared with ``torch.equal``)."""

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, tuple) and isinstance(b, tuple):
            return a[:2] == b[:2] and torch.equal(a[2], b[2])
        return a == b

    return len(now) == len(before) and all(same(a, b) for a, b in zip(now, before, strict=True))


def _list_states(metric: Any) -> bool:
    return any(isinstance(default, list) for default in getattr(metric, "_defaults", {}).values())


def _batch_size_mismatch(batch: Batch, case: Case) -> bool:
    """Whether the batch's tensors disagree on the batch size (issue 19: ours must raise ``ValueError`` at once).

    An aggregator's weight is broadcast to the value (torchmetrics' ``broadcast_to``): a mismatch is a weight that
    does not broadcast (a number, one element, or a per-column weight of fewer dimensions is none). A ``target`` the
    class ignores (``BinaryFairness`` under ``demographic_parity``: torchmetrics warns and drops it) is no mismatch.
    """
    family = _family(case.origin)
    if family == "aggregation":
        value, *weight = batch.make()
        if not weight or not isinstance(weight[0], Tensor) or not isinstance(value, Tensor):
            return False
        try:
            torch.broadcast_to(weight[0], value.shape)
        except RuntimeError:
            return True
        return False
    args = batch.args
    if _init(case, "task") == "demographic_parity":
        args = args[:1] + args[2:]
    rows = {1 if arg.rows() < 0 else arg.rows() for arg in args if isinstance(arg.base, Tensor)}  # 0-dim: one sample
    return len(rows) > 1


class Lockstep:
    """Ours and a torchmetrics twin built the same way, driven by the same operations and judged after each.

    ``pending`` holds torchmetrics' error for a batch ours accepted: ours owes it at the next ``compute()``/``reset()``
    (then both sides are rebuilt fresh, as the states differ by the bad batch). ``log`` keeps the code run, for the
    reproducer.
    """

    def __init__(self, case: Case) -> None:
        self.case = case
        self.ns = _namespace(case)
        self.log: list[str] = []
        self.loaded = False
        self.history: set[str] = set()
        self._fresh()

    @property
    def pending(self) -> str | None:
        """The torchmetrics error that ours owes at its next ``compute()``/``reset()`` (``None``: nothing owed)."""
        return self.pendings.get("ours")

    @pending.setter
    def pending(self, value: str | None) -> None:
        self.pendings["ours"] = value

    def _fresh(self, o: str = "ours", t: str = "theirs") -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.ns[o] = self.ns["make_ours"]()
            self.ns[t] = self.ns["make_theirs"]()
        if not hasattr(self, "pendings"):
            self.pendings: dict[str, str | None] = {}
        self.pendings[o] = None
        if o == "ours":
            self.history = set()
            self.owed: set[str] = set()  # warnings torchmetrics gave since the last compute
            self.given: set[str] = set()  # warnings ours gave since the last compute
            self.window_given: set[str] = set()  # warnings ours gave in compute() since the last reset
            self.loaded = False
            self.weighted = False

    # --- helpers

    def _run(self, code: str, guard: bool = False) -> Outcome:
        return _call(lambda: eval(code, self.ns), guard)

    def _exec(self, code: str) -> Outcome:
        return _call(lambda: exec(code, self.ns))

    def _allowed(self, **situation: Any) -> bool:
        situation.setdefault("loaded", self.loaded)
        situation.setdefault("weighted", self.weighted)
        situation.setdefault("history", frozenset(self.history))
        return allowed(self.case, situation) is not None

    def _note(self, line: str) -> None:
        self.log.append(line)

    # --- operations

    def step(self, index: int, op: Op) -> None:
        """Run ``op`` on both sides and judge; raises :class:`Finding`."""
        try:
            getattr(self, f"_op_{op.kind}")(op)
        except Finding as finding:
            finding.step = index
            raise

    def _batch_call(self, op: Op, method: str, o: str = "ours", t: str = "theirs") -> None:  # noqa: PLR0915
        batch = op.batches[0]
        self.history |= batch.tags
        if any(arg.layout != "plain" or not isinstance(arg.base, Tensor) for arg in batch.args[1:]):
            self.history.add("layout")
        if len(batch.args) > 1 and _family(self.case.origin) == "aggregation":
            self.weighted = True
            if batch.args[1].rows() <= 1:  # a broadcast weight
                self.history.add("layout")
        self.ns["args"] = batch.make()
        if any(isinstance(arg, Tensor) and arg.dtype == torch.bool for arg in self.ns["args"][1:]):
            self.history.add("bool_target")
        if self.ns["args"] and isinstance(self.ns["args"][0], Tensor) and self.ns["args"][0].dtype == torch.bool:
            self.history.add("bool_preds")
        self._note(f"args = ({batch.code()},)")
        call = "{}.update(*args)" if method == "update" else "{}(*args)"
        guard = method == "update" or not _forward_may_sync(self.case)
        # Ours keeps its states through a call that raises, forward() too; torchmetrics' forward() may not.
        before = {side: _state_values(self.ns[side]) for side in ((o, t) if method == "update" else (o,))}
        rng = torch.get_rng_state()  # both sides draw alike (BootStrapper resamples with torch's generator)
        theirs = self._run(call.format(t))
        self.ns["args"] = batch.make()  # torchmetrics may write into inputs (README: float nan_strategy)
        torch.set_rng_state(rng)
        ours = self._run(call.format(o), guard=guard)
        sync = ", sync=True" if guard else ""
        self._note("_rng = torch.get_rng_state()")
        self._note(f"{o}_out = show({call.format(o)!r}, lambda: {call.format(o)}{sync})  # fuzz saw: {ours.describe()}")
        self._note("torch.set_rng_state(_rng)")
        self._note(f"{t}_out = show({call.format(t)!r}, lambda: {call.format(t)})  # fuzz saw: {theirs.describe()}")
        situation = {"op": method, "tags": batch.tags, "ours": ours.error, "theirs": theirs.error}
        if isinstance(ours.error, HostSyncError):
            raise Finding(f"host sync in {method}()", _short(str(ours.error), 600))
        if _batch_size_mismatch(batch, self.case) and not _clear_shape_error(ours.error):
            raise Finding(
                "batch-size mismatch without a clear error at once",
                f"shapes {[tuple(a.shape) for a in self.ns['args'] if isinstance(a, Tensor)]}: ours "
                f"{ours.describe() if ours.error else 'accepts them'}; torchmetrics {theirs.describe()}",
            )
        if theirs.error is not None and ours.error is not None:
            # Both reject the batch at once: the types may differ (the order of checks differs), the contract holds.
            if not _same_state_values(_state_values(self.ns[o]), before[o]):
                raise Finding(f"{method}() that raised changed the states", f"ours {ours.describe()}")
            # torchmetrics may have changed its state before raising (forward() raises between its reset and restore)
            torchmetrics_may_have_changed = method == "forward" or self.case.origin.full_state_update is not False
            if t in before and not _same_state_values(_state_values(self.ns[t]), before[t]):
                if not self._allowed(kind="partial update", **situation):
                    raise Finding("torchmetrics' update() that raised changed its states", f"{theirs.describe()}")
                torchmetrics_may_have_changed = True
            if (torchmetrics_may_have_changed or _list_states(self.ns[t])) and not self.pendings.get(o):
                self._fresh(o, t)
                self._rebuild_note(o, t)
            return
        if ours.error is not None:  # ours raises at once where torchmetrics does not
            if _clear_shape_error(ours.error) and _batch_size_mismatch(batch, self.case):
                self._fresh(o, t)  # torchmetrics broadcast across the batch: its state is not comparable any more
                self._note("# ours rejects a batch-size mismatch torchmetrics broadcasts: accepted (issue 19)")
                self._rebuild_note(o, t)
                return
            if self._allowed(kind="error", **situation):
                self._fresh(o, t)
                self._rebuild_note(o, t)
                return
            raise Finding(f"{method}() raises where torchmetrics does not", f"ours {ours.describe()}")
        if theirs.error is not None:  # deferred: ours owes it
            if self._allowed(
                kind="error", ignored_bad_preds=_bad_preds_only_ignored(self.case, self.ns["args"]), **situation
            ):
                self._fresh(o, t)
                self._rebuild_note(o, t)
                return
            self.pendings[o] = self.pendings[o] or f"{method}(): torchmetrics {theirs.describe()}"
            if o == "ours":
                self._warnings(method, ours, Outcome(), batch.tags)
            return
        if method == "forward" and not self.pending:
            found = compare_values(ours.value, theirs.value)
            if found and not self._allowed(
                kind="value",
                op=method,
                tags=batch.tags,
                ours=ours.value,
                theirs=theirs.value,
                close=found[1],
                args=self.ns["args"],
            ):
                if self._allowed(kind="error", op=method, tags=batch.tags, ours=None, theirs=None):
                    self._fresh(o, t)
                    self._rebuild_note(o, t)
                    return
                raise Finding("forward() value", found[0])
        if o == "ours":
            self._warnings(method, ours, theirs, batch.tags)
        else:
            self.other_owed |= set(theirs.warnings)
            self.other_given |= set(ours.warnings)
        if self._allowed(kind="error", op=method, tags=batch.tags, ours=None, theirs=None):
            # an undefined result is allowed (validate_args=False on invalid input): start again
            self._fresh(o, t)
            self._rebuild_note(o, t)

    def _rebuild_note(self, o: str = "ours", t: str = "theirs") -> None:
        self._note(f"{o}, {t} = make_ours(), make_theirs()  # fuzzer: start again from fresh metrics")

    def _warnings(self, op: str, ours: Outcome, theirs: Outcome, tags: frozenset[str] = frozenset()) -> None:
        if op == "forward":
            missing = set(theirs.warnings) - set(ours.warnings)
            for text in missing:
                if self._allowed(kind="warning", op=op, text=text, tags=tags):
                    if _is_nan_warning(text):
                        self.owed.add(text)
                    continue
                raise Finding("forward() warnings", f"torchmetrics warns {text!r}; ours does not")
            self.given |= set(ours.warnings) - set(theirs.warnings)
            return
        self.owed |= set(theirs.warnings)
        self.given |= set(ours.warnings)

    def _op_update(self, op: Op) -> None:
        self._batch_call(op, "update")

    def _op_forward(self, op: Op) -> None:
        self._batch_call(op, "forward")

    def _owed_error(self, op: str, ours: Outcome) -> None:
        if ours.error is None:
            raise Finding("deferred error lost", f"at {op}(): ours {ours.describe()}; owed: {self.pending}")
        self._fresh()
        self._rebuild_note()

    def _op_compute(self, op: Op) -> None:
        theirs = self._run("theirs.compute()")
        ours = self._run("ours.compute()")
        self._note(f"show('ours.compute()', lambda: ours.compute())  # fuzz saw: {ours.describe()}")
        self._note(f"show('theirs.compute()', lambda: theirs.compute())  # fuzz saw: {theirs.describe()}")
        if self.pending:
            self._owed_error("compute", ours)
            return
        if not self._judge("compute", ours, theirs):
            return
        # a compute() that raises on both sides may warn on the way (torchmetrics warns, then fails): not judged
        both_raise = ours.error is not None and theirs.error is not None
        owed = self.owed | (set() if both_raise else set(theirs.warnings))
        given = self.given | (set() if both_raise else set(ours.warnings))
        # README: NaN warnings come once per window (since the last reset), in compute(): one given earlier in the
        # window answers a NaN torchmetrics warned about since
        self.window_given |= set(ours.warnings)
        answered = given | {text for text in self.window_given if _is_nan_warning(text)}
        for text in sorted(owed - answered):
            if not self._allowed(kind="warning", op="compute", text=text):
                raise Finding("warning missing", f"torchmetrics warns {text!r}; ours does not (by compute())")
        for text in sorted(given - owed):
            if not self._allowed(kind="warning", op="compute", text=text):
                raise Finding("extra warning", f"ours warns {text!r}; torchmetrics does not")
        self.owed, self.given = set(), set()

    def _judge(self, op: str, ours: Outcome, theirs: Outcome) -> bool:
        """Compare two outcomes; ``False`` when an accepted difference made the fuzzer start again from fresh."""
        if isinstance(ours.error, HostSyncError):
            raise Finding(f"host sync in {op}()", str(ours.error))
        if (ours.error is None) != (theirs.error is None):
            if not self._allowed(kind="error", op=op, ours=ours.error, theirs=theirs.error):
                raise Finding(f"{op}() error", f"ours {ours.describe()}; torchmetrics {theirs.describe()}")
            self._fresh()
            self._rebuild_note()
            return False
        if ours.error is not None:
            assert theirs.error is not None
            if type(ours.error) is not type(theirs.error) and not self._allowed(
                kind="error", op=op, ours=ours.error, theirs=theirs.error
            ):
                raise Finding(f"{op}() error type", f"ours {ours.describe()}; torchmetrics {theirs.describe()}")
            return True
        found = compare_values(ours.value, theirs.value)
        if found and not self._allowed(kind="value", op=op, ours=ours.value, theirs=theirs.value, close=found[1]):
            raise Finding(f"{op}() value", found[0])
        return True

    def _op_reset(self, op: Op) -> None:
        theirs = self._run("theirs.reset()")
        ours = self._run("ours.reset()")
        self._note(f"show('ours.reset()', lambda: ours.reset())  # fuzz saw: {ours.describe()}")
        self._note(f"show('theirs.reset()', lambda: theirs.reset())  # fuzz saw: {theirs.describe()}")
        if self.pending:
            self._owed_error("reset", ours)
            return
        self._judge("reset", ours, theirs)
        self.owed, self.given, self.window_given = set(), set(), set()

    def _transfer(self, name: str, code: str) -> None:
        """Replace both sides by what ``code`` (a template over ``{m}`` and ``{make}``) makes of them."""
        results = {}
        for side, make in (("theirs", "make_theirs"), ("ours", "make_ours")):
            text = code.format(m=side, make=make)
            results[side] = self._exec(text)
            self._note(f"{text}  # {results[side].describe() if results[side].error else 'ok'}")
        self._judge(name, results["ours"], results["theirs"])

    def _op_pickle(self, op: Op) -> None:
        self._transfer("pickle", "{m} = pickle.loads(pickle.dumps({m}))")

    def _op_clone(self, op: Op) -> None:
        self._transfer("clone", "{m} = {m}.clone()")

    def _op_load(self, op: Op) -> None:
        self._transfer("load", "persistent({m}); _new = {make}(); _new.load_state_dict({m}.state_dict()); {m} = _new")
        self.loaded = True

    def _op_load_plain(self, op: Op) -> None:
        """Ours loads torchmetrics' state dict: afterwards both hold torchmetrics' state (a pending error goes)."""
        text = (
            "persistent(theirs); _new = make_ours(); _new.load_state_dict(theirs.state_dict()); "
            "_twin = make_theirs(); _twin.load_state_dict(theirs.state_dict()); ours, theirs = _new, _twin"
        )
        ours = self._exec(text)
        self._note(f"{text}  # {ours.describe() if ours.error else 'ok'}")
        if ours.error is not None:
            raise Finding("load_state_dict of torchmetrics' state", ours.describe())
        self.pending = None
        self.owed, self.given = set(), set()
        self.loaded = True

    def _plain_cannot_take_ours(self) -> bool:
        """Whether a plain metric would miscount our state (a pending bad batch, or README-listed kept entries)."""
        return bool(self.pending) or self._allowed(kind="plain takes ours", op="load")

    def _op_load_into_plain(self, op: Op) -> None:
        """A plain metric loads our state dict strictly; a pending error must make it refuse (never silently lost)."""
        if self._allowed(kind="plain takes ours", op="load"):  # README-listed kept entries a plain metric counts
            return
        load = "persistent(ours); _new = make_theirs(); _new.load_state_dict(ours.state_dict(), strict=True)"
        if self.pending:
            result = self._exec(load)
            self._note(f"{load}  # {result.describe() if result.error else 'ok'}")
            if result.error is None or "Unexpected key(s)" not in str(result.error):
                raise Finding("torchmetrics took our state_dict with a pending error", result.describe())
            return
        text = f"{load}; _ours = make_ours(); _ours.load_state_dict(ours.state_dict()); ours, theirs = _ours, _new"
        result = self._exec(text)
        self._note(f"{text}  # {result.describe() if result.error else 'ok'}")
        if result.error is not None:
            # Ours may hold an error torchmetrics never raised (a README deviation, judged at compute()): a plain load
            # must refuse it too, naming exactly the checks that recorded it.
            recorded = recorded_checks(self.ns["ours"])
            if (
                recorded
                and str(result.error).count("Unexpected key(s)") == 1
                and all(f'"{name}"' in str(result.error) for name in recorded)
            ):
                return
            raise Finding("torchmetrics loading our state_dict", result.describe())
        self.loaded = True

    def _other(self, op: Op) -> str | None:
        """Build a second pair (``other_ours``, ``other_theirs``) updated with ``op.batches``; its pending error.

        Its updates are judged as the main pair's are.
        """
        self._fresh("other_ours", "other_theirs")
        self.other_owed: set[str] = set()
        self.other_given: set[str] = set()
        self._note("other_ours, other_theirs = make_ours(), make_theirs()")
        for i, batch in enumerate(op.batches):
            try:
                self._batch_call(Op("update", (batch,)), "update", "other_ours", "other_theirs")
            except Finding as finding:
                raise Finding(finding.kind, f"(merged metric, update {i}) {finding.detail}") from None
        return self.pendings["other_ours"]

    def _merge(self, op: Op, ours_source: str, theirs_source: str, receives_pending: bool) -> None:
        other_pending = self._other(op)
        if other_pending and not receives_pending:
            return  # the plain metric would take the bad batch the other accumulated
        # README "`merge_state()` / `load_state_dict()` after `compute()`": ours drops the cached result, torchmetrics
        # keeps it; the twin's cache is dropped the same way (loads build fresh metrics on both sides).
        theirs = self._exec(f"theirs.merge_state({theirs_source}); theirs._computed = None")
        ours = self._exec(f"ours.merge_state({ours_source})")
        for side, source, outcome in (("ours", ours_source, ours), ("theirs", theirs_source, theirs)):
            call = f"{side}.merge_state({source})"
            self._note(f"show({call!r}, lambda: {call})  # fuzz saw: {outcome.describe()}")
        self._note("theirs._computed = None  # README: merge_state() after compute() drops the cached result")
        self._judge("merge_state", ours, theirs)
        if ours_source == "other_ours" and ours.error is None:  # what the other's twin warned, ours owes now
            self.owed |= self.other_owed
            self.given |= self.other_given
        if ours.error is None and other_pending:
            self.pending = self.pending or f"merged state: {other_pending}"

    def _op_merge(self, op: Op) -> None:
        self._merge(op, "other_ours", "other_theirs", receives_pending=True)
        self.history.add("merged")

    def _op_merge_plain(self, op: Op) -> None:
        """Ours merges a plain torchmetrics metric (README: accepted as a state dict)."""
        self._merge(op, "other_theirs", "copy.deepcopy(other_theirs)", receives_pending=False)
        self.history.add("merged")

    def _op_merge_into_plain(self, op: Op) -> None:
        """A plain torchmetrics metric merges ours (both sides merge the same accelerated metric)."""
        if self._plain_cannot_take_ours():
            return
        self._merge(op, "other_ours", "other_ours", receives_pending=False)
        self.history.add("merged")

    def _op_merge_into_fresh(self, op: Op) -> None:
        self._transfer("merge_into_fresh", "_new = {make}(); _new.merge_state({m}); {m} = _new")
        self.history.add("merged")


def run_case(case: Case) -> tuple[Finding | None, list[str]]:
    """Run ``case``; the first finding (or ``None``) and the code it ran (for the reproducer)."""
    if not _constructible(case):
        return None, []
    try:
        lockstep = Lockstep(case)
    except Exception as error:
        return Finding("constructor", f"ours raises {type(error).__name__}: {_short(str(error))}"), []
    try:
        for index, op in enumerate(case.ops):
            lockstep.step(index, op)
    except Finding as finding:
        return finding, lockstep.log
    except Exception as error:
        return Finding("crash", f"{type(error).__name__}: {_short(str(error))}"), lockstep.log
    return None, lockstep.log


# ---------------------------------------------------------------------------------------------------------------------
# Shrinking and the reproducer.


def _candidates(case: Case) -> Iterator[Case]:
    ops = case.ops
    for i in range(len(ops)):
        yield replace(case, ops=ops[:i] + ops[i + 1 :])
    for i, op in enumerate(ops):
        for j, batch in enumerate(op.batches):
            rows = [arg.base.shape[0] for arg in batch.args if _batched(arg.base)]
            for size in sorted({0, 1, 2} | {r - 1 for r in rows if r > 0}):
                if (cut := batch.cut(size)) is not None:
                    yield replace(case, ops=(*ops[:i], replace(op, batches=_swap(op.batches, j, cut)), *ops[i + 1 :]))
            if len(op.batches) > 1:
                yield replace(case, ops=(*ops[:i], replace(op, batches=_swap(op.batches, j, None)), *ops[i + 1 :]))
    for path in ("direct",) if case.path != "direct" else ():
        yield replace(case, path=path)
    default = _example_init(case.origin)
    for name in case.init:
        if name not in default:
            yield replace(case, init={k: v for k, v in case.init.items() if k != name})


def _swap(batches: tuple[Batch, ...], index: int, new: Batch | None) -> tuple[Batch, ...]:
    return tuple(b for b in batches[:index] + ((new,) if new is not None else ()) + batches[index + 1 :])


def shrink(case: Case, finding: Finding, budget: float = 20.0) -> tuple[Case, Finding]:
    """A smaller case with a finding of the same kind (operations dropped, batches cut, arguments dropped)."""
    deadline = time.monotonic() + budget
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for candidate in _candidates(case):
            if time.monotonic() > deadline:
                break
            found, _ = run_case(candidate)
            if found is not None and found.kind == finding.kind:
                case, finding, improved = candidate, found, True
                break
    return case, finding


def reproducer(case: Case, finding: Finding) -> str:
    """A self-contained Python snippet that reruns ``case`` up to its finding, printing both sides' outcomes."""
    _, log = run_case(case)
    lines = [
        f"# fuzz finding: {finding.kind}: {finding.detail}",
        f"# class {case.origin.__name__}, path {case.path}",
        (_PREAMBLE + _imports(case)).rstrip(),
        "",
        "",
        "def noncontig(x):",
        "    return torch.stack([x, x], -1)[..., 0]",
        "",
        "",
        "def show(label, call, sync=False):",
        "    with warnings.catch_warnings(record=True) as caught:",
        "        warnings.simplefilter('always')",
        "        try:",
        "            if sync:",
        "                with no_host_sync():",
        "                    value = call()",
        "            else:",
        "                value = call()",
        "        except Exception as error:",
        "            value = None",
        "            print(label, 'raises', type(error).__name__, error)",
        "        else:",
        "            print(label, '->', value)",
        "    for w in caught:",
        "        print(label, 'warns', w.message)",
        "    return value",
        "",
        "",
        "def _patched(build):",
        "    with torchmetrics_async.patch():",
        "        return build()",
        "",
        "",
        f"init = lambda: {case.init!r}  # a fresh dict (and base metric) for every metric built",
        f"make_ours = lambda: {_ours_code(case)}",
        f"make_theirs = lambda: {_theirs_code(case)}",
        "ours, theirs = make_ours(), make_theirs()",
        *log,
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------------
# The driver.


@dataclass
class Report:
    """What a fuzz run did: cases run, classes hit, findings (shrunk case, finding, reproducer)."""

    cases: int = 0
    classes: set[str] = field(default_factory=set)
    findings: list[tuple[Case, Finding, str]] = field(default_factory=list)
    invalid: int = 0


def fuzz(
    seed: int,
    seconds: float | None = None,
    cases: int | None = None,
    pattern: str | None = None,
    shrink_seconds: float = 20.0,
    out: Any = None,
    save: str | None = None,
) -> Report:
    """Draw and run cases until ``seconds`` pass or ``cases`` ran; findings are shrunk and kept one per (class, kind).

    Deterministic for a given ``seed`` and ``cases`` (a time budget only decides how many cases run).
    """
    rng = random.Random(seed)
    classes = targets(pattern)
    if not classes:
        raise ValueError(f"no registered class matches {pattern!r}")
    report = Report()
    seen: set[tuple[str, str]] = set()
    start = time.monotonic()
    while True:
        if cases is not None and report.cases >= cases:
            break
        if seconds is not None and time.monotonic() - start >= seconds:
            break
        # every class once first (so a short run covers the registry), then a mix of round-robin and random picks
        first = report.cases < len(classes)
        origin = classes[report.cases % len(classes)] if first or rng.random() < 0.5 else rng.choice(classes)
        case_seed = rng.randrange(1 << 30)
        case = draw_case(random.Random(case_seed), origin)
        report.cases += 1
        report.classes.add(origin.__name__)
        if not _constructible(case):
            report.invalid += 1
            continue
        finding, _ = run_case(case)
        if finding is None or (origin.__name__, finding.kind) in seen:
            continue
        seen.add((origin.__name__, finding.kind))
        small, small_finding = shrink(case, finding, shrink_seconds)
        text = reproducer(small, small_finding)
        report.findings.append((small, small_finding, text))
        if save is not None:
            folder = pathlib.Path(save)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"finding_{len(report.findings):02d}_{origin.__name__}.py").write_text(text + "\n")
        if out is not None:
            print(f"\n=== finding {len(report.findings)} (case seed {case_seed}) ===\n{text}\n", file=out, flush=True)
    return report


def _constructible(case: Case) -> bool:
    """Whether torchmetrics accepts the arguments (else the case is skipped: nothing to compare with)."""
    namespace = _namespace(case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            namespace["make_theirs"]()
        except Exception:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    """``scripts/fuzz``: exit status 1 on any finding."""
    parser = argparse.ArgumentParser(prog="scripts/fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="time budget (default 60)")
    parser.add_argument("--cases", type=int, default=None, help="run this many cases instead of a time budget")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--classes", default=None, help="only classes whose name matches this regex")
    parser.add_argument("--save", default=None, help="also write each reproducer to this folder")
    parser.add_argument("--shrink-seconds", type=float, default=20.0, help="time to shrink each finding")
    args = parser.parse_args(argv)
    seconds = None if args.cases is not None else args.seconds
    report = fuzz(args.seed, seconds, args.cases, args.classes, args.shrink_seconds, out=sys.stdout, save=args.save)
    print(
        f"fuzz: {report.cases} sequences ({report.invalid} with arguments torchmetrics rejects), "
        f"{len(report.classes)} classes hit, {len(report.findings)} findings"
    )
    for case, finding, _ in report.findings:
        print(f"  {case.origin.__name__} [{case.path}]: {finding.kind}: {_short(finding.detail, 160)}")
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
