"""Seeded detection scenes (torchmetrics-style ``preds``/``target``) and the reference they are judged by.

- :func:`scenes`: COCO-shaped scenes, a detection model's output: 80 classes, about 7 ground truths and 100
  detections per image (detections near ground truths with jitter, the rest random), any box format, optional masks
  (a small image, e.g. 64x64), crowds and user areas. The benchmark's input.
- :func:`edge_scenes`: small scenes full of the cases that decide bits in pycocotools: score ties, duplicate boxes,
  zero-area boxes, crowds and images with only crowds, images without detections or without ground truth, classes
  only in the predictions, more than 100 detections in an image, IoUs and areas exactly on thresholds. The fuzzer's
  input.
- :class:`CocoReference`: torchmetrics' own ``MeanAveragePrecision`` (its update, its COCO dicts, pycocotools or
  faster-coco-eval) with torchvision's ``box_convert`` swapped for ``torchmetrics_async.detection.boxes.box_convert``
  (bit for bit the same), so it runs where torchvision is not installed. :func:`reference_class` gives torchmetrics'
  class where it can be built, else this one; :func:`ours_class` gives the accelerated class once it is importable.

Everything is deterministic for a given seed (a CPU ``torch.Generator``).
"""

from __future__ import annotations

import importlib
import unittest.mock
from typing import Any

import numpy as np
import torch
from torch import Tensor

from torchmetrics_async.detection.boxes import box_convert

__all__ = ["CocoReference", "edge_scenes", "ours_class", "reference_class", "scenes", "torchvision_available"]

Scene = tuple[list[dict[str, Tensor]], list[dict[str, Tensor]]]


def _uniform(g: torch.Generator, n: int, lo: float, hi: float) -> Tensor:
    return torch.rand(n, generator=g, dtype=torch.float64) * (hi - lo) + lo


def _random_boxes(g: torch.Generator, n: int, size: tuple[int, int], min_side: float = 1.0) -> Tensor:
    """``n`` xyxy boxes inside a ``(width, height)`` image, sides log-uniform from ``min_side`` to the image's."""
    w, h = size
    bw = torch.exp(_uniform(g, n, np.log(min_side), np.log(w)))
    bh = torch.exp(_uniform(g, n, np.log(min_side), np.log(h)))
    x1 = torch.rand(n, generator=g, dtype=torch.float64) * (w - bw)
    y1 = torch.rand(n, generator=g, dtype=torch.float64) * (h - bh)
    return torch.stack([x1, y1, x1 + bw, y1 + bh], -1)


def _jitter(g: torch.Generator, boxes: Tensor, scale: float, size: tuple[int, int]) -> Tensor:
    """Each box moved and resized by up to ``scale`` of its sides, clipped to the image."""
    wh = (boxes[:, 2:] - boxes[:, :2]).repeat(1, 2)
    moved = boxes + (torch.rand(boxes.shape, generator=g, dtype=torch.float64) * 2 - 1) * scale * wh
    x1, x2 = moved[:, 0].clamp(0, size[0]), moved[:, 2].clamp(0, size[0])
    y1, y2 = moved[:, 1].clamp(0, size[1]), moved[:, 3].clamp(0, size[1])
    return torch.stack([torch.minimum(x1, x2), torch.minimum(y1, y2), torch.maximum(x1, x2), torch.maximum(y1, y2)], -1)


def _masks(g: torch.Generator, boxes: Tensor, size: tuple[int, int]) -> Tensor:
    """``bool [N, H, W]`` masks: each box's pixels, an ellipse inside it for about half of them (so masks differ)."""
    w, h = size
    ys = torch.arange(h, dtype=torch.float64)[:, None] + 0.5
    xs = torch.arange(w, dtype=torch.float64)[None, :] + 0.5
    out = torch.zeros(len(boxes), h, w, dtype=torch.bool)
    ellipse = torch.rand(len(boxes), generator=g) < 0.5
    for i, (x1, y1, x2, y2) in enumerate(boxes.tolist()):
        inside = (xs >= x1) & (xs < x2) & (ys >= y1) & (ys < y2)
        if ellipse[i] and x2 > x1 and y2 > y1:
            cx, cy, rx, ry = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2, (y2 - y1) / 2
            inside &= ((xs - cx) / rx) ** 2 + ((ys - cy) / ry) ** 2 <= 1
        out[i] = inside
    return out


def _finish(
    boxes: Tensor, box_format: str, dtype: torch.dtype, item: dict[str, Tensor], masks: Tensor | None
) -> dict[str, Tensor]:
    """The dict torchmetrics takes: boxes converted from xyxy to ``box_format`` in ``dtype`` (as a user passes)."""
    item = {"boxes": box_convert(boxes.to(dtype).reshape(-1, 4), "xyxy", box_format), **item}
    if masks is not None:
        item["masks"] = masks
    return item


def scenes(
    seed: int,
    images: int,
    *,
    classes: int = 80,
    gts: float = 7.0,
    dets: int = 100,
    box_format: str = "xyxy",
    masks: bool = False,
    image_size: tuple[int, int] = (640, 480),
    crowds: float = 0.01,
    areas: bool = False,
    dtype: torch.dtype = torch.float32,
) -> Scene:
    """COCO-shaped ``preds``/``target`` for ``images`` images: a detection model's output on a seeded dataset.

    Per image: Poisson(``gts``) ground truths of random classes; for each, 0 to 3 detections near it (jitter up to
    30%, the right class 85% of the time, scores from 0.3 to 1); random detections fill up to ``dets`` (scores below
    0.5). ``crowds``: the share of ground truths marked ``iscrowd``; ``areas``: a user ``area`` on half the ground
    truths (0 on the rest, meaning "compute it"); ``masks``: bool masks (pass a small ``image_size`` such as
    ``(64, 64)``), from the boxes.

    Example:
        >>> preds, target = scenes(0, 2)
        >>> len(preds), sorted(preds[0]), sorted(target[0])
        (2, ['boxes', 'labels', 'scores'], ['area', 'boxes', 'iscrowd', 'labels'])
        >>> torch.equal(scenes(0, 2)[0][1]["boxes"], preds[1]["boxes"])
        True
    """
    g = torch.Generator().manual_seed(seed)
    preds: list[dict[str, Tensor]] = []
    target: list[dict[str, Tensor]] = []
    for _ in range(images):
        n_gt = int(torch.poisson(torch.tensor([gts]), generator=g))
        gt_boxes = _random_boxes(g, n_gt, image_size, min_side=4.0)
        gt_labels = torch.randint(0, classes, (n_gt,), generator=g)
        copies = torch.randint(0, 4, (n_gt,), generator=g)
        near = _jitter(g, gt_boxes.repeat_interleave(copies, 0), 0.3, image_size)
        near_labels = gt_labels.repeat_interleave(copies)
        wrong = torch.rand(len(near_labels), generator=g) < 0.15
        near_labels = torch.where(wrong, torch.randint(0, classes, near_labels.shape, generator=g), near_labels)
        n_random = max(dets - len(near), 0)
        det_boxes = torch.cat([near, _random_boxes(g, n_random, image_size)])[:dets]
        det_labels = torch.cat([near_labels, torch.randint(0, classes, (n_random,), generator=g)])[:dets]
        scores = torch.cat([_uniform(g, len(near), 0.3, 1.0), _uniform(g, n_random, 0.0, 0.5)])[:dets]
        crowd = (torch.rand(n_gt, generator=g) < crowds).long()
        area = torch.zeros(n_gt)
        if areas:
            given = torch.rand(n_gt, generator=g) < 0.5
            area = torch.where(given, _uniform(g, n_gt, 1.0, float(image_size[0] * image_size[1])), 0.0).float()
        preds.append(
            _finish(
                det_boxes,
                box_format,
                dtype,
                {"scores": scores.float(), "labels": det_labels},
                _masks(g, det_boxes, image_size) if masks else None,
            )
        )
        target.append(
            _finish(
                gt_boxes,
                box_format,
                dtype,
                {"labels": gt_labels, "iscrowd": crowd, "area": area},
                _masks(g, gt_boxes, image_size) if masks else None,
            )
        )
    return preds, target


#: The edge cases :func:`edge_scenes` may put in an image, each drawn with probability 1/4 (``images`` decides more).
EDGES = (
    "ties",  # scores rounded to tenths: many ties within and across images
    "duplicates",  # some detections and ground truths repeated exactly
    "zero_area",  # boxes with zero width or height
    "crowds",  # crowd ground truths
    "only_crowds",  # every ground truth of the image a crowd
    "no_dets",  # an image without detections
    "no_gts",  # an image without ground truths
    "pred_only_class",  # detections of a class no ground truth has
    "many_dets",  # 101 to 130 detections in the image
    "user_areas",  # user areas, some exactly on the area-range bounds 32**2 and 96**2, some 0 ("compute it")
    "grid",  # integer coordinates: IoUs exactly on thresholds (0.5, 0.75) and IoU ties
)


def edge_scenes(
    seed: int,
    images: int,
    *,
    box_format: str = "xyxy",
    masks: bool = False,
    image_size: tuple[int, int] = (16, 16),
    classes: int = 3,
    dtype: torch.dtype = torch.float32,
) -> Scene:
    """Small scenes for the fuzzer: a few classes, a few boxes, each image with random :data:`EDGES`.

    Boxes live in a ``image_size`` image scaled by 10 (so the area ranges small/medium/large all occur); masks, when
    asked for, are drawn at ``image_size`` from the boxes scaled back.

    Example:
        >>> preds, target = edge_scenes(3, 4, masks=True)
        >>> [tuple(p["masks"].shape[1:]) for p in preds] == [(16, 16)] * 4
        True
    """
    g = torch.Generator().manual_seed(seed)
    scale = 10.0
    world = (image_size[0] * int(scale), image_size[1] * int(scale))
    preds: list[dict[str, Tensor]] = []
    target: list[dict[str, Tensor]] = []
    for _ in range(images):
        edges = {e for e in EDGES if float(torch.rand((), generator=g)) < 0.25}
        n_gt = 0 if "no_gts" in edges else int(torch.randint(1, 6, (), generator=g))
        n_det = 0 if "no_dets" in edges else int(torch.randint(1, 12, (), generator=g))
        if "many_dets" in edges and "no_dets" not in edges:
            n_det = int(torch.randint(101, 131, (), generator=g))
        gt_boxes = _random_boxes(g, n_gt, world, min_side=scale)
        gt_labels = torch.randint(0, classes, (n_gt,), generator=g)
        near = min(n_det, n_gt)
        det_boxes = torch.cat([_jitter(g, gt_boxes[:near], 0.25, world), _random_boxes(g, n_det - near, world, scale)])
        det_labels = torch.cat([gt_labels[:near], torch.randint(0, classes, (n_det - near,), generator=g)])
        scores = torch.rand(n_det, generator=g, dtype=torch.float64)
        if "grid" in edges:  # multiples of the scale: IoUs of simple fractions
            gt_boxes, det_boxes = (torch.round(b / scale) * scale for b in (gt_boxes, det_boxes))
        if "ties" in edges:
            scores = torch.round(scores * 10) / 10
        if "duplicates" in edges:
            if n_det:
                pick = torch.randint(0, n_det, (max(1, n_det // 3),), generator=g)
                det_boxes, det_labels = (
                    torch.cat([det_boxes, det_boxes[pick]]),
                    torch.cat([det_labels, det_labels[pick]]),
                )
                scores = torch.cat([scores, scores[pick]])
            if n_gt:
                pick = torch.randint(0, n_gt, (1,), generator=g)
                gt_boxes, gt_labels = torch.cat([gt_boxes, gt_boxes[pick]]), torch.cat([gt_labels, gt_labels[pick]])
        if "zero_area" in edges:
            for boxes in (gt_boxes, det_boxes):
                if len(boxes):
                    i = int(torch.randint(0, len(boxes), (), generator=g))
                    side = int(torch.randint(0, 2, (), generator=g))  # x2 = x1 or y2 = y1
                    boxes[i, 2 + side] = boxes[i, side]
        if "pred_only_class" in edges and len(det_labels):
            det_labels = det_labels.clone()
            det_labels[int(torch.randint(0, len(det_labels), (), generator=g))] = classes + 2
        crowd = torch.zeros(len(gt_labels), dtype=torch.long)
        if "crowds" in edges:
            crowd = (torch.rand(len(gt_labels), generator=g) < 0.4).long()
        if "only_crowds" in edges:
            crowd = torch.ones(len(gt_labels), dtype=torch.long)
        gt: dict[str, Tensor] = {"labels": gt_labels, "iscrowd": crowd}
        if "user_areas" in edges:
            choices = torch.tensor([0.0, 32.0**2, 96.0**2, 500.0, 20000.0])
            gt["area"] = choices[torch.randint(0, len(choices), (len(gt_labels),), generator=g)]
        det = {"scores": scores.float(), "labels": det_labels}
        preds.append(
            _finish(det_boxes, box_format, dtype, det, _masks(g, det_boxes / scale, image_size) if masks else None)
        )
        target.append(
            _finish(gt_boxes, box_format, dtype, gt, _masks(g, gt_boxes / scale, image_size) if masks else None)
        )
    return preds, target


# ---------------------------------------------------------------------------------------------------------------------
# The classes to compare.


def torchvision_available() -> bool:
    """Whether torchvision imports (then torchmetrics' detection classes can be built)."""
    try:
        importlib.import_module("torchvision")
    except ImportError:
        return False
    return True


def ours_class() -> type | None:
    """``torchmetrics_async.detection.MeanAveragePrecision`` once it exists, else ``None``."""
    return getattr(importlib.import_module("torchmetrics_async.detection"), "MeanAveragePrecision", None)


_mean_ap = importlib.import_module("torchmetrics.detection.mean_ap")
_helpers = importlib.import_module("torchmetrics.detection.helpers")


class CocoReference(_mean_ap.MeanAveragePrecision):
    """Torchmetrics' ``MeanAveragePrecision`` without torchvision: its box conversion is ours (the same bits).

    Everything else is torchmetrics' own code: the argument checks, the input validator, the states, the COCO dicts
    (``helpers.CocoBackend._get_coco_format``) and the evaluation by pycocotools or faster-coco-eval.

    Example:
        >>> preds, target = scenes(0, 3, classes=4, dets=10)
        >>> metric = CocoReference(iou_thresholds=[0.5])
        >>> metric.update(preds, target)
        >>> round(float(metric.compute()["map"]), 4)
        0.3933
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # the constructor refuses to build without torchvision, which only its update's box conversion needs
        with unittest.mock.patch.object(_mean_ap, "_TORCHVISION_AVAILABLE", True):
            super().__init__(*args, **kwargs)

    def update(self, preds: list[dict[str, Tensor]], target: list[dict[str, Tensor]]) -> None:
        """Torchmetrics' ``update()``, its ``helpers._get_safe_item_values`` converting boxes by our ``box_convert``."""
        with unittest.mock.patch.object(_mean_ap, "_get_safe_item_values", _safe_item_values):
            super().update(preds, target)


# torchmetrics' messages name the class (``compute`` before ``update``): the same text as from torchmetrics' class
CocoReference.__name__ = "MeanAveragePrecision"


def _safe_item_values(
    iou_type: Any,
    box_format: str,
    max_detection_thresholds: list[int],
    coco_backend: Any,
    item: dict[str, Any],
    warn: bool = False,
) -> tuple[Tensor | None, tuple | None]:
    """``helpers._get_safe_item_values`` of torchmetrics 1.9.0, line for line, but for the ``box_convert``."""
    output: list[Any] = [None, None]
    if "bbox" in iou_type:
        boxes = _helpers._fix_empty_tensors(item["boxes"])
        if boxes.numel() > 0:
            boxes = box_convert(boxes, in_fmt=box_format, out_fmt="xywh")
        output[0] = boxes
    if "segm" in iou_type:
        masks = []
        for i in item["masks"].cpu().numpy():
            rle = coco_backend.mask_utils.encode(np.asfortranarray(i))
            masks.append((tuple(rle["size"]), rle["counts"]))
        output[1] = tuple(masks)
    if warn and any(v is not None and len(v) > max_detection_thresholds[-1] for v in output):
        _helpers._warning_on_too_many_detections(max_detection_thresholds[-1])
    return output[0], output[1]


def reference_class() -> type:
    """Torchmetrics' ``MeanAveragePrecision`` where torchvision is installed, else :class:`CocoReference`."""
    return _mean_ap.MeanAveragePrecision if torchvision_available() else CocoReference
