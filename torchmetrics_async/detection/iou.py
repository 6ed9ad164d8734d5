"""The IoU family (IoU, GIoU, DIoU, CIoU) with a sync-free ``update()``, computed on the states' device.

torchmetrics marks the entries of each image's IoU matrix it leaves out (labels that differ, values under
``iou_threshold``) with boolean-mask writes, a host sync per image, and needs torchvision for the kernels. Here
``torch.where`` marks them and :mod:`~torchmetrics_async.detection.boxes` computes the kernels, bit for bit
torchvision's. Each matrix is kept flattened, beside its entries' ground-truth labels, in ``cat`` list states (one
fused gather across ranks). Where torchvision is missing, torchmetrics' classes cannot be built: these classes then
subclass torchmetrics' ``Metric`` and are not registered (there is nothing to convert), but compute the same.

Example:
    >>> preds = [{"boxes": torch.tensor([[0.0, 0.0, 2.0, 2.0]]), "labels": torch.tensor([1])}]
    >>> target = [{"boxes": torch.tensor([[1.0, 0.0, 3.0, 2.0]]), "labels": torch.tensor([1])}]
    >>> IntersectionOverUnion()(preds, target)
    {'iou': tensor(0.3333)}
"""

from collections.abc import Callable
from typing import Any

import torch
import torchmetrics.detection.ciou as tm_ciou
import torchmetrics.detection.diou as tm_diou
import torchmetrics.detection.giou as tm_giou
import torchmetrics.detection.iou as tm_iou
from torch import Tensor

from torchmetrics_async._torchmetrics import (
    _TORCHVISION_AVAILABLE,
    Metric,
    _fix_empty_tensors,
    _input_validator,
)
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats
from torchmetrics_async.detection.boxes import (
    BOX_FORMATS,
    box_convert,
    box_iou,
    cat_state,
    complete_box_iou,
    distance_box_iou,
    generalized_box_iou,
)

__all__ = [
    "CompleteIntersectionOverUnion",
    "DistanceIntersectionOverUnion",
    "GeneralizedIntersectionOverUnion",
    "IntersectionOverUnion",
]

#: Extra state: per entry of ``iou_matrix``, whether a ground truth stands in its column (an image without ground
#: truth keeps torchmetrics' square matrix of zeros, which counts for the overall value but for no class).
HAS_CLASS = "iou_has_class"
#: Extra state: per entry of ``iou_matrix``, the label of the ground truth in its column (0 where there is none).
CLASSES = "iou_classes"


def _origin(cls: type, fallback: tuple[type, ...] = ()) -> tuple[type, ...]:
    """``(cls,)`` where torchmetrics' class can be built (torchvision installed), else ``fallback``."""
    return (cls,) if _TORCHVISION_AVAILABLE else fallback


def _image_matrix(
    kernel: Callable[[Tensor, Tensor], Tensor], det: Tensor, gt: Tensor, threshold: float | None, invalid: float
) -> Tensor:
    """Torchmetrics' ``_iou_update`` without a host read: zeros for an image without detections or ground truth."""
    if det.numel() == 0 or gt.numel() == 0:
        size = gt.shape[0] if det.numel() == 0 else det.shape[0]
        return torch.zeros(size, size, device=(gt if det.numel() == 0 else det).device, dtype=torch.float32)
    iou = kernel(det, gt)
    return iou if threshold is None else torch.where(iou < threshold, invalid, iou)


class IntersectionOverUnion(SyncFreeBatchStats, *_origin(tm_iou.IntersectionOverUnion, (Metric,))):
    """No host sync in ``update()``, nor in ``forward()`` without ``class_metrics``; works without torchvision.

    ``forward()`` with ``class_metrics`` reads the host (its keys name the batch's classes). With ``class_metrics``, an
    image with detections but no ground truth counts for no class (torchmetrics raises an IndexError in
    ``compute()``).
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = True
    _iou_type = "iou"
    _invalid_val = -1.0
    _stat_states = ("groundtruth_labels", "pred_labels", "iou_matrix", CLASSES, HAS_CLASS)
    _kernel = staticmethod(box_iou)

    def __init__(
        self,
        box_format: str = "xyxy",
        iou_threshold: float | None = None,
        class_metrics: bool = False,
        respect_labels: bool = True,
        **kwargs: Any,
    ) -> None:
        Metric.__init__(self, **kwargs)  # torchmetrics' __init__ raises without torchvision; its checks follow
        if box_format not in BOX_FORMATS:
            raise ValueError(f"Expected argument `box_format` to be one of {BOX_FORMATS} but got {box_format}")
        for name, flag in (("class_metrics", class_metrics), ("respect_labels", respect_labels)):
            if not isinstance(flag, bool):
                raise ValueError(f"Expected argument `{name}` to be a boolean")
        self.box_format, self.iou_threshold = box_format, iou_threshold
        self.class_metrics, self.respect_labels = class_metrics, respect_labels
        for name in self._stat_states[:3]:
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def _add_extra_states(self) -> None:
        if CLASSES not in self._defaults:
            for name in (CLASSES, HAS_CLASS):
                self.add_state(name, default=[], dist_reduce_fx="cat")
            self._adopt_torchmetrics_states()
        super()._add_extra_states()

    def _adopt_torchmetrics_states(self) -> None:
        """Torchmetrics' 2-D matrices flattened (the fused gather cats 1-D pieces), their entries' classes."""
        pairs = list(map(self._entry_classes, self.iou_matrix, self.groundtruth_labels))
        self.iou_matrix = [matrix.reshape(-1) for matrix in self.iou_matrix]
        setattr(self, CLASSES, [pair[0] for pair in pairs])
        setattr(self, HAS_CLASS, [pair[1] for pair in pairs])

    def _extra_states(self) -> tuple[str, ...]:
        return (*super()._extra_states(), CLASSES, HAS_CLASS)

    def _missing_extra_state(self, attr: str, incoming_state: dict[str, Any]) -> Any:
        if attr in (CLASSES, HAS_CLASS):  # a torchmetrics state: 2-D matrices beside their images' labels
            pairs = map(self._entry_classes, incoming_state["iou_matrix"], incoming_state["groundtruth_labels"])
            return [pair[attr == HAS_CLASS] for pair in pairs]
        return super()._missing_extra_state(attr, incoming_state)

    def _reduce_states(self, incoming_state: dict[str, Any]) -> None:
        incoming_state = dict(incoming_state)
        for attr in (CLASSES, HAS_CLASS):  # from the 2-D matrices, before they are flattened
            if attr not in incoming_state:
                incoming_state[attr] = self._missing_extra_state(attr, incoming_state)
        if isinstance(incoming_state["iou_matrix"], list):
            incoming_state["iou_matrix"] = [matrix.reshape(-1) for matrix in incoming_state["iou_matrix"]]
        super()._reduce_states(incoming_state)

    def _as_torchmetrics_holds(self, states: dict[str, Any], prefix: str = "") -> None:
        """Each image's matrix in torchmetrics' 2-D shape, from its numbers of detections and ground truths."""
        matrices, dets, gts = (states.get(prefix + name) for name in self._stat_states[2::-1])
        if isinstance(matrices, list) and isinstance(gts, list) and isinstance(dets, list):
            sizes = ((len(d), len(g)) for d, g in zip(dets, gts, strict=True))
            shapes = [(n, m) if n and m else (n or m, n or m) for n, m in sizes]  # torchmetrics' zeros: square
            states[prefix + "iou_matrix"] = [m.reshape(s) for m, s in zip(matrices, shapes, strict=True)]

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any, **kwargs: Any) -> None:
        loaded = prefix + "iou_matrix" in state_dict  # torchmetrics' loading takes the keys out: read first
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if loaded:  # torchmetrics' 2-D matrices (what state_dict() gives too)
            self._adopt_torchmetrics_states()

    @staticmethod
    def _entry_classes(matrix: Tensor, gt_labels: Tensor) -> tuple[Tensor, Tensor]:
        """Per entry of an image's ``[rows, columns]`` matrix: its ground truth's label, and whether there is one."""
        rows = matrix.shape[0]
        if gt_labels.numel() == 0:  # torchmetrics' square matrix of an image without ground truth
            return gt_labels.new_zeros(rows * rows), torch.zeros(rows * rows, dtype=torch.bool, device=matrix.device)
        classes = gt_labels.expand(rows, gt_labels.shape[0]).reshape(-1)
        return classes, torch.ones(classes.shape, dtype=torch.bool, device=matrix.device)

    def _boxes(self, boxes: Tensor, name: str) -> Tensor:
        boxes = _fix_empty_tensors(boxes)
        # Before the conversion: torchmetrics' shape message, also for boxes that are not 2-D (box_convert takes any).
        if boxes.ndim != 2 or boxes.shape[-1] != 4:
            raise ValueError(f"Expected {name} to be of shape (N, 4) but got {boxes.shape}")
        return box_convert(boxes, self.box_format, "xyxy") if boxes.numel() > 0 else boxes

    def update(self, preds: list[dict[str, Tensor]], target: list[dict[str, Tensor]]) -> None:
        """Add each image's IoU matrix without a host sync."""
        self._merge_stats(self._batch_stats(preds, target))

    def _batch_stats(self, preds: list[dict[str, Tensor]], target: list[dict[str, Tensor]]) -> BatchStats:
        _input_validator(preds, target, ignore_score=True)
        columns: list[list[Tensor]] = [[], [], [], [], []]
        for p, t in zip(preds, target, strict=True):
            det, gt = self._boxes(p["boxes"], "preds"), self._boxes(t["boxes"], "target")
            iou = _image_matrix(self._kernel, det, gt, self.iou_threshold, self._invalid_val)
            if self.respect_labels:
                if det.numel() > 0 and gt.numel() > 0:
                    same = p["labels"].unsqueeze(1) == t["labels"].unsqueeze(0)
                else:
                    same = torch.eye(iou.shape[0], dtype=torch.bool, device=iou.device)
                iou = torch.where(same, iou, self._invalid_val)
            # torchmetrics' boolean index raises here under respect_labels; without, it would keep them unchecked.
            if p["labels"].shape != det.shape[:1]:
                raise IndexError(f"Expected {det.shape[0]} labels in `preds`, got {tuple(p['labels'].shape)}")
            image = (t["labels"], p["labels"], iou.reshape(-1), *self._entry_classes(iou, t["labels"]))
            for column, value in zip(columns, image, strict=True):
                column.append(value)
        return BatchStats(tuple(map(tuple, columns)), {})  # per image, as torchmetrics appends them

    def _merge_stats(self, stats: BatchStats) -> None:
        for name, images in zip(self._stat_states, stats.values, strict=True):
            self.__dict__[name].extend(images)

    def compute(self) -> dict[str, Tensor]:
        """The mean IoU over the entries kept (and per class), on the states' device."""
        return self._results(*(self.__dict__[name] for name in self._stat_states), exact=True)

    def _kept_dtype(self, ious: list[Tensor] | Tensor) -> torch.dtype:
        """Torchmetrics' ``cat`` of the matrices with a kept entry: float64 if a float64 one has one (a host read)."""
        if isinstance(ious, Tensor):  # gathered: one tensor, the images' dtypes promoted
            return ious.dtype
        wide = [matrix.reshape(-1) for matrix in ious if matrix.dtype == torch.float64]
        kept = bool(wide) and bool((torch.cat(wide) != self._invalid_val).any())
        return torch.float64 if kept else torch.float32  # the kernels give float32 or float64, empty images float32

    def _batch_value(self, stats: BatchStats) -> dict[str, Tensor]:
        return self._results(*map(list, stats.values), exact=self.class_metrics)

    def _results(self, gt_labels: Any, pred_labels: Any, ious: Any, classes: Any, has: Any, exact: bool) -> dict:
        """Torchmetrics' ``compute``; ``exact=False``: without a host read (the mean summed in another order)."""
        device = self.device
        values = cat_state(ious, torch.float32, device)
        valid = values != self._invalid_val
        if exact:  # torchmetrics' very reduction: the mean of the kept entries in order (host reads)
            kept = values[valid].to(self._kept_dtype(ious))
            raw = kept.mean() if kept.numel() else torch.tensor(0.0, device=device)
            score = torch.tensor(0.0, device=device) if torch.isnan(raw) else raw
        else:  # float64 states give a float64 zero where torchmetrics' is float32 (its dtype is the data's)
            raw = torch.where(valid, values, 0).sum() / valid.sum()
            score = torch.where(torch.isnan(raw), 0.0, raw)
        results = {self._iou_type: score}
        if not self.class_metrics:
            return results
        if isinstance(gt_labels, list) and not gt_labels:  # torchmetrics' dim_zero_cat of no image's labels
            raise ValueError("No samples to concatenate")
        labels = torch.cat([cat_state(gt_labels, torch.long, device), cat_state(pred_labels, torch.long, device)])
        found = labels.unique()
        if not found.numel():
            return results
        classes = cat_state(classes, labels.dtype, device).to(labels.dtype)  # set_dtype() casts torchmetrics' labels
        counted = valid & cat_state(has, torch.bool, device).bool()
        index = torch.searchsorted(found, torch.where(counted, classes, found[0]))
        sums = torch.zeros(found.shape, dtype=torch.float64, device=device).index_add_(
            0, index, torch.where(counted, values, 0).double()
        )
        counts = torch.zeros(found.shape, dtype=torch.float64, device=device).index_add_(0, index, counted.double())
        per_class = (sums / counts).to(raw.dtype).unbind()  # torchmetrics' sums: zeros_like(its score before NaN)
        for cl, value, count in zip(found.tolist(), per_class, counts.tolist(), strict=True):
            # torchmetrics' value for a class without an entry: a float32 zero, whatever the states' dtype
            results[f"{self._iou_type}/cl_{cl}"] = value if count else torch.zeros((), device=device)
        return results


class GeneralizedIntersectionOverUnion(IntersectionOverUnion, *_origin(tm_giou.GeneralizedIntersectionOverUnion)):
    """As :class:`IntersectionOverUnion`, with the generalized IoU."""

    _iou_type = "giou"
    _kernel = staticmethod(generalized_box_iou)


class DistanceIntersectionOverUnion(IntersectionOverUnion, *_origin(tm_diou.DistanceIntersectionOverUnion)):
    """As :class:`IntersectionOverUnion`, with the distance IoU."""

    _iou_type = "diou"
    _kernel = staticmethod(distance_box_iou)


class CompleteIntersectionOverUnion(IntersectionOverUnion, *_origin(tm_ciou.CompleteIntersectionOverUnion)):
    """As :class:`IntersectionOverUnion`, with the complete IoU."""

    _iou_type = "ciou"
    _invalid_val = -2.0
    _kernel = staticmethod(complete_box_iou)
