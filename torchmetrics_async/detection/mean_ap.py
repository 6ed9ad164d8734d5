"""Mean average precision: a sync-free ``update()`` and a COCO evaluation on the states' device.

``update()`` keeps torchmetrics' box states (per image, ``xywh`` in the input dtype) and, for masks, each image's
detection x ground-truth intersection counts and the mask areas (exact integer counts from one float64 matmul, no
RLE, no host read). ``compute()`` computes pycocotools' IoUs of the pairs that count and runs
:func:`~torchmetrics_async.detection.coco_eval.coco_evaluate` once per IoU type (twice with ``class_metrics`` under
micro averaging), vectorized over images and classes. Needs neither torchvision nor pycocotools.

Example:
    >>> preds = [{"boxes": torch.tensor([[258.0, 41.0, 606.0, 285.0]]), "scores": torch.tensor([0.536]),
    ...           "labels": torch.tensor([0])}]
    >>> target = [{"boxes": torch.tensor([[214.0, 41.0, 562.0, 285.0]]), "labels": torch.tensor([0])}]
    >>> metric = MeanAveragePrecision()
    >>> metric.update(preds, target)
    >>> round(metric.compute()["map"].item(), 4)
    0.6
"""

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from torchmetrics_async._torchmetrics import (
    _TORCHVISION_AVAILABLE,
    CocoBackend,
    Metric,
    TorchmetricsMeanAveragePrecision,
    _input_validator,
    _validate_iou_type_arg,
    _warning_on_too_many_detections,
    dim_zero_cat,
)
from torchmetrics_async.detection.boxes import BOX_FORMATS, box_convert, cat_state
from torchmetrics_async.detection.coco_eval import Tables, coco_evaluate, ious_by_image_class, summarize
from torchmetrics_async.metric import SyncFreeMixin

__all__ = ["MeanAveragePrecision", "coco_box_ious"]

#: torchmetrics' states, per image; the mask states stay empty here (torchmetrics holds RLEs in them).
TORCHMETRICS_STATES = (
    *("detection_box", "detection_mask", "detection_scores", "detection_labels", "groundtruth_box"),
    *("groundtruth_mask", "groundtruth_labels", "groundtruth_crowds", "groundtruth_area"),
)
#: Per image, masks only: flat detection x ground-truth intersection counts and both sides' mask areas (float64).
MASK_STATES = ("mask_intersections", "detection_mask_area", "groundtruth_mask_area")
#: Per update, each image's position on its rank; per image, ``detections << 32 | ground truths`` (one fill kernel).
#: Derived from the lists above, so not in the state dict; after a gather they restore torchmetrics' image order.
IMAGE_STATES = ("image_position", "image_counts")
NAN_CHECK = "invalid_nan_detection"
NAN_CHECKED = ("detection_scores", "detection_box", "groundtruth_box")
NAN_MESSAGE = "Encountered NaN in the `boxes` or `scores` of `preds` or the `boxes` of `target`."
STAT_NAMES = ("map", "map_50", "map_75", "map_small", "map_medium", "map_large")
SIZE_NAMES = ("mar_small", "mar_medium", "mar_large")

_BASE: type = TorchmetricsMeanAveragePrecision if _TORCHVISION_AVAILABLE else Metric


def coco_box_ious(det: Tensor, gt: Tensor, crowd: Tensor) -> Tensor:
    """Pycocotools' ``bbIou`` for ``xywh`` box pairs, in float64; a crowd's union is the detection's area.

    Example:
        >>> coco_box_ious(torch.tensor([[0.0, 0, 2, 2]]), torch.tensor([[1.0, 0, 2, 2]]), torch.tensor([False]))
        tensor([0.3333], dtype=torch.float64)
    """
    det, gt = det.to(torch.float64), gt.to(torch.float64)
    w = torch.minimum(det[:, 2] + det[:, 0], gt[:, 2] + gt[:, 0]) - torch.maximum(det[:, 0], gt[:, 0])
    h = torch.minimum(det[:, 3] + det[:, 1], gt[:, 3] + gt[:, 1]) - torch.maximum(det[:, 1], gt[:, 1])
    inter = w * h
    return _ious(torch.where((w > 0) & (h > 0), inter, 0), det[:, 2] * det[:, 3], gt[:, 2] * gt[:, 3], crowd)


def _ious(inter: Tensor, det_area: Tensor, gt_area: Tensor, crowd: Tensor) -> Tensor:
    """``inter / union`` where they intersect, else 0 (pycocotools skips those pairs)."""
    union = torch.where(crowd, det_area, det_area + gt_area - inter)
    return torch.where(inter > 0, inter / torch.where(inter > 0, union, 1), 0)


def _mask_counts(det: Tensor, gt: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Flat ``det x gt`` intersection counts and both areas, exact in float64 (autocast leaves float64 alone)."""
    d, g = (det != 0).flatten(1).to(torch.float64), (gt != 0).flatten(1).to(torch.float64)
    inter = (d @ g.T).reshape(-1) if len(d) and len(g) else d.new_zeros(0)
    return inter, d.sum(1), g.sum(1)


def _cat(state: Any, dtype: torch.dtype, device: torch.device, width: int = 0) -> Tensor:
    return cat_state(state, dtype, device, width).to(dtype)


class _MetricMethods:
    """Torchmetrics' ``Metric`` methods where its ``MeanAveragePrecision`` overrides them for RLE mask states."""

    def _apply(self, fn: Callable, exclude_state: Any = "") -> Any:
        return Metric._apply(self, fn, exclude_state)  # type: ignore[arg-type]

    def _sync_dist(self, dist_sync_fn: Callable | None = None, process_group: Any = None) -> None:
        Metric._sync_dist(self, dist_sync_fn, process_group)  # type: ignore[arg-type]


class MeanAveragePrecision(SyncFreeMixin, _MetricMethods, _BASE):  # type: ignore[misc,valid-type]
    """No host sync in ``update()`` (masks: intersection counts, no RLE); ``compute()`` runs on the states' device."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = True
    plot_lower_bound = 0.0
    plot_upper_bound = 1.0
    warn_on_many_detections = True

    def __init__(
        self,
        box_format: str = "xyxy",
        iou_type: str | tuple[str, ...] = "bbox",
        iou_thresholds: list[float] | None = None,
        rec_thresholds: list[float] | None = None,
        max_detection_thresholds: list[int] | None = None,
        class_metrics: bool = False,
        extended_summary: bool = False,
        average: str = "macro",
        backend: str = "pycocotools",
        **kwargs: Any,
    ) -> None:
        Metric.__init__(self, **kwargs)  # torchmetrics' own __init__ demands torchvision and a COCO package
        if box_format not in BOX_FORMATS:
            raise ValueError(f"Expected argument `box_format` to be one of {BOX_FORMATS} but got {box_format}")
        self.box_format = box_format
        self.iou_type = _validate_iou_type_arg(iou_type)  # type: ignore[arg-type]
        names = ("iou_thresholds", "rec_thresholds", "max_detection_thresholds")
        for name, value in zip(names, (iou_thresholds, rec_thresholds, max_detection_thresholds), strict=True):
            if value is not None and not isinstance(value, list):
                kind = "ints" if name == names[2] else "floats"
                raise ValueError(f"Expected argument `{name}` to either be `None` or a list of {kind} but got {value}")
        self.iou_thresholds = iou_thresholds or torch.linspace(0.5, 0.95, 10).tolist()
        self.rec_thresholds = rec_thresholds or torch.linspace(0.0, 1.00, 101).tolist()
        if max_detection_thresholds is not None and len(max_detection_thresholds) != 3:
            raise ValueError(
                "When providing a list of max detection thresholds it should have length 3."
                f" Got value {len(max_detection_thresholds)}"
            )
        thresholds = torch.tensor(max_detection_thresholds or [1, 10, 100], dtype=torch.int)
        self.max_detection_thresholds = thresholds.sort().values.tolist()
        for name, flag in (("class_metrics", class_metrics), ("extended_summary", extended_summary)):
            if not isinstance(flag, bool):
                raise ValueError(f"Expected argument `{name}` to be a boolean")
        self.class_metrics, self.extended_summary = class_metrics, extended_summary
        if average not in ("macro", "micro"):
            raise ValueError(f"Expected argument `average` to be one of ('macro', 'micro') but got {average}")
        self.average = average
        self._coco_backend = CocoBackend(backend)  # type: ignore[arg-type]
        for name in TORCHMETRICS_STATES:
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def _add_extra_states(self) -> None:
        for name in TORCHMETRICS_STATES:  # torchmetrics' own reduce with None (gathered image by image)
            self._reductions[name] = dim_zero_cat
        for name in (*MASK_STATES, *IMAGE_STATES) if "segm" in self.iou_type else IMAGE_STATES:
            if name not in self._defaults:
                self.add_state(name, default=[], dist_reduce_fx="cat")
        self._add_deferred_check(NAN_CHECK, NAN_MESSAGE)
        super()._add_extra_states()
        self._adopt_torchmetrics_states()

    def _adopt_torchmetrics_states(self) -> None:
        """Torchmetrics' states made ours (adopted, loaded): RLE masks decoded on the host, image states rebuilt."""
        rles = list(zip(self.detection_mask, self.groundtruth_mask, strict=True))
        decode = self._coco_backend.mask_utils.decode if rles else None  # needs a COCO package
        for dets, gts in rles:
            size = (dets or gts or (((0, 0), b""),))[0][0]
            masks = [
                torch.as_tensor(decode([{"size": list(s), "counts": c} for s, c in side])).permute(2, 0, 1)
                if side
                else torch.zeros(0, *size, dtype=torch.uint8)
                for side in (dets, gts)
            ]
            for name, value in zip(MASK_STATES, _mask_counts(*masks), strict=True):
                getattr(self, name).append(value.to(self.device))
            self.detection_mask, self.groundtruth_mask = [], []
        dets, gts = self.detection_labels, self.groundtruth_labels
        if not isinstance(dets, list):  # synced: the gathered image states are the ones to keep
            return
        counts = [d.shape[0] << 32 | g.shape[0] for d, g in zip(dets, gts, strict=True)]
        position = [torch.arange(len(counts), device=self.device)] if counts else []
        counts = [torch.tensor(counts, dtype=torch.int64).to(self.device)] if counts else []
        for name, value in zip(IMAGE_STATES, (position, counts), strict=True):
            setattr(self, name, value)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._adopt_torchmetrics_states()

    def tm_to_coco(self, name: str = "tm_map_input") -> None:
        """Torchmetrics' COCO files of the inputs: boxes only (masks are kept as intersection counts here)."""
        if "segm" in self.iou_type:
            raise NotImplementedError("tm_to_coco() needs the masks: this MeanAveragePrecision keeps mask counts only")
        super().tm_to_coco(name)  # type: ignore[misc]

    def _extra_states(self) -> tuple[str, ...]:
        return (*super()._extra_states(), *IMAGE_STATES)

    def update(self, preds: list[dict[str, Tensor]], target: list[dict[str, Tensor]]) -> None:
        """Keep each image's boxes (or mask intersection counts), scores, labels, crowds and areas: no host sync."""
        _input_validator(preds, target, iou_type=self.iou_type)  # type: ignore[arg-type]
        # Every image is checked and converted before any is kept: a batch that raises leaves the states as they were.
        images = [self._image_states(pred, truth) for pred, truth in zip(preds, target, strict=True)]
        if "bbox" in self.iou_type:
            for name in ("detection_box", "groundtruth_box"):
                _to_xywh(images, name, self.box_format)
        start = len(self.detection_labels)
        for image in images:
            for name, value in image.items():
                getattr(self, name).append(value)
        getattr(self, IMAGE_STATES[0]).append(torch.arange(start, start + len(preds), device=self.device))
        checked = [image[name].reshape(-1) for image in images for name in NAN_CHECKED if name in image]
        if checked:  # NaN-checked once per batch: one kernel, not one per image
            self._record_violation(NAN_CHECK, torch.cat(checked).isnan())

    def _image_states(self, pred: dict[str, Tensor], truth: dict[str, Tensor]) -> dict[str, Tensor]:
        """What one image appends to each list state (boxes converted, masks reduced to counts); raises on bad input."""
        labels, scores, gt_labels = pred["labels"], pred["scores"], truth["labels"]
        _check_item(labels, scores, gt_labels)
        image = {"detection_labels": labels, "detection_scores": scores, "groundtruth_labels": gt_labels}
        if "bbox" in self.iou_type:
            image["detection_box"], image["groundtruth_box"] = self._boxes(pred["boxes"]), self._boxes(truth["boxes"])
        if "segm" in self.iou_type:
            masks, gt_masks = _masks(pred["masks"]), _masks(truth["masks"])
            if masks.shape[0] and gt_masks.shape[0] and masks.shape[1:] != gt_masks.shape[1:]:
                raise ValueError(
                    f"Expected the `masks` of an image in `preds` and `target` to have the same size, but got"
                    f" {tuple(masks.shape[1:])} and {tuple(gt_masks.shape[1:])}"
                )
            image.update(zip(MASK_STATES, _mask_counts(masks, gt_masks), strict=True))
        if self.warn_on_many_detections and labels.shape[0] > self.max_detection_thresholds[-1]:
            _warning_on_too_many_detections(self.max_detection_thresholds[-1])
        packed = labels.shape[0] << 32 | gt_labels.shape[0]
        image[IMAGE_STATES[1]] = torch.full((1,), packed, dtype=torch.int64, device=self.device)
        image["groundtruth_crowds"] = truth.get("iscrowd", torch.zeros_like(gt_labels))
        image["groundtruth_area"] = truth.get("area", torch.zeros_like(gt_labels))
        return image

    def _boxes(self, boxes: Tensor) -> Tensor:
        """The user's boxes checked (``[0, 4]`` for an image without any); :func:`_to_xywh` converts them."""
        if not boxes.numel():
            return boxes.reshape(0, 4)
        if boxes.ndim != 2 or boxes.shape[1] != 4:
            raise ValueError(f"Expected `boxes` of shape (num_boxes, 4) but got {tuple(boxes.shape)}")
        return boxes

    def compute(self) -> dict[str, Any]:
        """Torchmetrics' result dict, evaluated on the states' device."""
        self._raise_deferred_checks()
        position = _cat(getattr(self, IMAGE_STATES[0]), torch.int64, self.device)
        counts = _cat(getattr(self, IMAGE_STATES[1]), torch.int64, self.device)
        tables = _Tables(self, position, counts >> 32, counts & 0xFFFFFFFF)
        result: dict[str, Any] = {}
        for j, iou_type in enumerate(self.iou_type):
            prefix = "" if len(self.iou_type) == 1 else f"{iou_type}_"
            result.update(self._evaluate(tables, iou_type, j, prefix))
        result["classes"] = tables.classes.to(torch.int32)
        return result

    def _evaluate(self, t: "_Tables", iou_type: str, j: int, prefix: str) -> dict[str, Any]:
        mdt, backend = self.max_detection_thresholds, self._coco_backend.backend
        keys = [*STAT_NAMES, *(f"mar_{m}" for m in mdt), *SIZE_NAMES]
        if t.empty:
            return {f"{prefix}{key}": _minus_one(self.device) for key in keys}
        own_area = t.det_box_area if iou_type == "bbox" else t.det_mask_area
        # torchmetrics rebuilds its datasets for class_metrics (real labels, mask areas with two types) and keeps them
        micro = self.average == "micro" and not (self.class_metrics and j > 0)
        params = self.iou_thresholds, self.rec_thresholds, mdt, backend
        tables = t.tables(iou_type, own_area, micro)
        ev = coco_evaluate(tables, *params)
        stats = summarize(ev, self.iou_thresholds, mdt, backend).to(torch.float32)
        out = {f"{prefix}{key}": stats[i : i + 1] for i, key in enumerate(keys)}
        if self.extended_summary:
            ious = ious_by_image_class(tables, t.num_images, mdt[-1])
            kept = range(t.num_images) if t.evaluated is None else set(t.evaluated.tolist())
            out[f"{prefix}ious"] = {key: value for key, value in ious.items() if key[0] in kept}
            out.update({f"{prefix}{name}": value for name, value in ev._asdict().items()})
        per_class = _minus_one(self.device), _minus_one(self.device)
        if self.class_metrics:
            class_area = t.det_mask_area if "segm" in self.iou_type else own_area
            ev = ev if not micro and class_area is own_area else coco_evaluate(t.tables(iou_type, class_area), *params)
            per_class = summarize(ev, self.iou_thresholds, mdt, backend, per_class=True)[[0, 8]].float().unbind()
        out[f"{prefix}map_per_class"], out[f"{prefix}mar_{mdt[-1]}_per_class"] = per_class
        return out


class _Tables:
    """The flat tables ``coco_evaluate`` takes, in torchmetrics' image order, without the images it skips."""

    def __init__(self, metric: MeanAveragePrecision, position: Tensor, n_det: Tensor, n_gt: Tensor) -> None:
        device, f64 = metric.device, torch.float64
        stored = torch.arange(len(position), device=device)
        # Rank-major after a gather: a stable sort on the position on its rank interleaves ranks as torchmetrics does.
        image = torch.empty_like(position).scatter_(0, position.sort(stable=True).indices, stored)
        det_stored, gt_stored = stored.repeat_interleave(n_det), stored.repeat_interleave(n_gt)
        for labels in (metric.detection_labels, metric.groundtruth_labels):  # set_dtype() casts them, as torchmetrics'
            if any(x.is_floating_point() for x in (labels if isinstance(labels, list) else [labels])):
                raise ValueError("Invalid input class: expected labels of an integer type (see `set_dtype()`)")
        det_labels, self.gt_labels = (
            _cat(x, torch.int64, device) for x in (metric.detection_labels, metric.groundtruth_labels)
        )
        self.classes = torch.cat([det_labels, self.gt_labels]).unique()
        self.num_images, self.evaluated = len(position), None
        keep: Tensor | slice = slice(None)
        if metric.iou_type == ("segm",):  # images without ground-truth masks are skipped: their detections too
            keep, self.evaluated = n_gt[det_stored] > 0, image[n_gt > 0]
            self.empty = not bool((n_det > 0).any() and (n_gt > 0).any())
        else:
            self.empty = len(position) == 0
        self.det_labels, self.det_images, self.gt_images = det_labels[keep], image[det_stored][keep], image[gt_stored]
        self.det_scores = _cat(metric.detection_scores, f64, device)[keep]
        self.gt_crowds = _cat(metric.groundtruth_crowds, f64, device) != 0
        gt_area = self.det_mask_area = self.det_box_area = None
        if "segm" in metric.iou_type:  # torchmetrics' ground-truth area is the mask's then, for both types
            self.det_mask_area = _cat(metric.detection_mask_area, f64, device)[keep]
            gt_area = self.gt_mask_area = _cat(metric.groundtruth_mask_area, f64, device)
            self.intersections = _cat(metric.mask_intersections, f64, device)
            # each image's det x gt block, row-major, blocks in stored order
            self.det_rows = (torch.cumsum(n_gt[det_stored], 0) - n_gt[det_stored])[keep]
            self.gt_cols = torch.arange(len(gt_stored), device=device) - (n_gt.cumsum(0) - n_gt)[gt_stored]
        if "bbox" in metric.iou_type:
            self.det_boxes = _cat(metric.detection_box, f64, device, 4)[keep]
            self.gt_boxes = _cat(metric.groundtruth_box, f64, device, 4)
            self.det_box_area = self.det_boxes[:, 2] * self.det_boxes[:, 3]
            gt_area = self.gt_boxes[:, 2] * self.gt_boxes[:, 3] if gt_area is None else gt_area
        user_area = _cat(metric.groundtruth_area, f64, device)
        self.gt_areas = torch.where(user_area > 0, user_area, gt_area)

    def tables(self, iou_type: str, det_area: Tensor, micro: bool = False) -> Tables:
        """The kernels' tables; labels all 0 for torchmetrics' micro average."""
        det_labels, gt_labels, classes = self.det_labels, self.gt_labels, self.classes
        if micro:
            det_labels, gt_labels = torch.zeros_like(det_labels), torch.zeros_like(gt_labels)
            classes = torch.zeros(1, dtype=torch.int64, device=classes.device)

        def ious(d: Tensor, g: Tensor) -> Tensor:
            if iou_type == "bbox":
                return coco_box_ious(self.det_boxes[d], self.gt_boxes[g], self.gt_crowds[g])
            inter = self.intersections[self.det_rows[d] + self.gt_cols[g]]
            return _ious(inter, self.det_mask_area[d], self.gt_mask_area[g], self.gt_crowds[g])

        dets = self.det_scores, det_labels, self.det_images, det_area
        return Tables(*dets, gt_labels, self.gt_images, self.gt_areas, self.gt_crowds, ious, classes)


def _to_xywh(images: list[dict[str, Tensor]], name: str, box_format: str) -> None:
    """Torchmetrics' stored boxes (``xywh``, the input dtype): one conversion per dtype and device of the batch."""
    groups: dict[tuple, list[dict[str, Tensor]]] = {}  # grouped first: a converted int box is float after
    for image in images:
        groups.setdefault((image[name].dtype, image[name].device), []).append(image)
    for same in groups.values():
        boxes = box_convert(torch.cat([image[name] for image in same]), in_fmt=box_format, out_fmt="xywh")
        for image, converted in zip(same, boxes.split([len(image[name]) for image in same]), strict=True):
            image[name] = converted  # elementwise arithmetic: the same bits as image by image


def _masks(masks: Tensor) -> Tensor:
    """``(N, H, W)`` masks of a bool or integer type; an empty tensor of any shape is no mask (as torchmetrics)."""
    if not masks.numel() and (masks.ndim != 3 or not masks.shape[0]):
        return masks.reshape(0, 0, 0)
    if masks.ndim != 3 or masks.is_floating_point() or masks.is_complex():
        raise ValueError(
            "Expected `masks` of a bool or integer type and shape (num_masks, H, W),"
            f" got {masks.dtype} {tuple(masks.shape)}"
        )
    return masks


def _minus_one(device: torch.device) -> Tensor:
    return torch.full((1,), -1.0, dtype=torch.float32, device=device)


def _check_item(labels: Tensor, scores: Tensor, gt_labels: Tensor) -> None:
    """Torchmetrics' per-element type errors of ``compute()``, raised at once (they are dtype checks)."""
    for name, value in (("preds", labels), ("target", gt_labels)):
        if value.ndim != 1 or value.is_floating_point() or value.is_complex():
            raise ValueError(f"Invalid input class in `{name}`: expected a 1-D tensor of integers, got {value.dtype}")
    if scores.ndim != 1 or (scores.numel() and not scores.is_floating_point()):
        raise ValueError(f"Invalid input score: expected a 1-D tensor of floats, got {scores.dtype}")
