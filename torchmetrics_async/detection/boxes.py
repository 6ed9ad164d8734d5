"""Box conversions and pairwise IoU kernels, bit for bit torchvision's (so it is not needed); a list-state helper."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "BOX_FORMATS",
    "box_convert",
    "box_iou",
    "cat_state",
    "complete_box_iou",
    "distance_box_iou",
    "generalized_box_iou",
]

BOX_FORMATS = ("xyxy", "xywh", "cxcywh")


def _to_xyxy(boxes: Tensor, fmt: str) -> Tensor:
    # Slices and one cat: the same elementwise arithmetic as torchvision's unbind/stack, in fewer ops.
    if fmt == "xyxy":
        return boxes
    corner, size = boxes[..., :2], boxes[..., 2:]
    if fmt == "xywh":
        return torch.cat((corner, corner + size), dim=-1)
    return torch.cat((corner - 0.5 * size, corner + 0.5 * size), dim=-1)


def _from_xyxy(boxes: Tensor, fmt: str) -> Tensor:
    if fmt == "xyxy":
        return boxes
    low, high = boxes[..., :2], boxes[..., 2:]
    if fmt == "xywh":
        return torch.cat((low, high - low), dim=-1)
    return torch.cat(((low + high) / 2, high - low), dim=-1)


def box_convert(boxes: Tensor, in_fmt: str, out_fmt: str) -> Tensor:
    """Convert ``[..., 4]`` boxes between ``"xyxy"``, ``"xywh"`` and ``"cxcywh"``, in their dtype, via ``"xyxy"``.

    The arithmetic is torchvision's ``box_convert``'s, so the results are the same bits.

    Example:
        >>> box_convert(torch.tensor([[10.0, 20.0, 4.0, 6.0]]), "cxcywh", "xywh")
        tensor([[ 8., 17.,  4.,  6.]])
    """
    for fmt in (in_fmt, out_fmt):
        if fmt not in BOX_FORMATS:
            raise ValueError(f"Unsupported box format {fmt!r}: expected one of {BOX_FORMATS}")
    if boxes.shape[-1:] != (4,):  # torchvision's unbind raises; the slices here would broadcast instead
        raise ValueError(f"Expected boxes of shape (..., 4), got {tuple(boxes.shape)}")
    if in_fmt == out_fmt:
        return boxes.clone()
    return _from_xyxy(_to_xyxy(boxes, in_fmt), out_fmt)


def cat_state(state: list[Tensor] | Tensor, empty_dtype: torch.dtype, device: torch.device, width: int = 0) -> Tensor:
    """A list state (or its synced tensor) as one tensor ``[n]`` or ``[n, width]``, its elements flattened.

    An empty list gives an empty tensor of ``empty_dtype``; otherwise the (promoted) dtype of the elements is kept.

    Example:
        >>> cat_state([torch.ones(2, 2), torch.zeros(1)], torch.float32, torch.device("cpu"))
        tensor([1., 1., 1., 1., 0.])
    """
    shape = (-1, width) if width else (-1,)
    if isinstance(state, Tensor):
        return state.reshape(shape)
    if not state:
        return torch.zeros(0, *shape[1:], dtype=empty_dtype, device=device)
    return torch.cat([s if s.dim() == len(shape) else s.reshape(shape) for s in state])  # a reshape costs host time


# The pairwise kernels below are torchvision's (0.29) arithmetic on xyxy boxes, op for op: the same bits.
def _upcast(t: Tensor) -> Tensor:
    if t.is_floating_point():
        return t if t.dtype in (torch.float32, torch.float64) else t.float()
    return t if t.dtype in (torch.int32, torch.int64) else t.int()


def _area(boxes: Tensor) -> Tensor:
    boxes = _upcast(boxes)
    return (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])


def _inter_union(boxes1: Tensor, boxes2: Tensor) -> tuple[Tensor, Tensor]:
    area1, area2 = _area(boxes1), _area(boxes2)
    lt = torch.max(boxes1[..., None, :2], boxes2[..., None, :, :2])
    rb = torch.min(boxes1[..., None, 2:], boxes2[..., None, :, 2:])
    wh = _upcast(rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter, area1[..., None] + area2[..., None, :] - inter


def _enclosing(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Width and height of the smallest box enclosing each pair, ``[N, M, 2]``."""
    lti = torch.min(boxes1[..., None, :2], boxes2[..., None, :, :2])
    rbi = torch.max(boxes1[..., None, 2:], boxes2[..., None, :, 2:])
    return _upcast(rbi - lti).clamp(min=0)


def box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Pairwise IoU ``[N, M]`` of xyxy boxes ``[N, 4]`` and ``[M, 4]``: torchvision's ``box_iou``, bit for bit.

    Example:
        >>> box_iou(torch.tensor([[0.0, 0.0, 2.0, 2.0]]), torch.tensor([[1.0, 0.0, 3.0, 2.0]]))
        tensor([[0.3333]])
    """
    inter, union = _inter_union(boxes1, boxes2)
    return inter / union


def generalized_box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Pairwise generalized IoU of xyxy boxes: torchvision's ``generalized_box_iou``, bit for bit.

    Example:
        >>> generalized_box_iou(torch.tensor([[0.0, 0.0, 1.0, 1.0]]), torch.tensor([[2.0, 0.0, 3.0, 1.0]]))
        tensor([[-0.3333]])
    """
    inter, union = _inter_union(boxes1, boxes2)
    whi = _enclosing(boxes1, boxes2)
    areai = whi[..., 0] * whi[..., 1]
    return inter / union - (areai - union) / areai


def _distance_and_iou(boxes1: Tensor, boxes2: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    iou = box_iou(boxes1, boxes2)
    whi = _enclosing(boxes1, boxes2)
    diagonal_squared = (whi[..., 0] ** 2) + (whi[..., 1] ** 2) + eps
    x_p, y_p = (boxes1[..., 0] + boxes1[..., 2]) / 2, (boxes1[..., 1] + boxes1[..., 3]) / 2
    x_g, y_g = (boxes2[..., 0] + boxes2[..., 2]) / 2, (boxes2[..., 1] + boxes2[..., 3]) / 2
    centers_squared = (_upcast(x_p[..., None] - x_g[..., None, :]) ** 2) + (
        _upcast(y_p[..., None] - y_g[..., None, :]) ** 2
    )
    return iou - (centers_squared / diagonal_squared), iou


def distance_box_iou(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tensor:
    """Pairwise distance IoU of xyxy boxes: torchvision's ``distance_box_iou``, bit for bit.

    Example:
        >>> distance_box_iou(torch.tensor([[0.0, 0.0, 2.0, 2.0]]), torch.tensor([[1.0, 0.0, 3.0, 2.0]]))
        tensor([[0.2564]])
    """
    return _distance_and_iou(_upcast(boxes1), _upcast(boxes2), eps)[0]


def complete_box_iou(boxes1: Tensor, boxes2: Tensor, eps: float = 1e-7) -> Tensor:
    """Pairwise complete IoU of xyxy boxes: torchvision's ``complete_box_iou``, bit for bit.

    Example:
        >>> complete_box_iou(torch.tensor([[0.0, 0.0, 2.0, 2.0]]), torch.tensor([[1.0, 0.0, 3.0, 3.0]]))
        tensor([[0.1802]])
    """
    boxes1, boxes2 = _upcast(boxes1), _upcast(boxes2)
    diou, iou = _distance_and_iou(boxes1, boxes2, eps)
    w_pred, h_pred = boxes1[..., None, 2] - boxes1[..., None, 0], boxes1[..., None, 3] - boxes1[..., None, 1]
    w_gt, h_gt = boxes2[..., None, :, 2] - boxes2[..., None, :, 0], boxes2[..., None, :, 3] - boxes2[..., None, :, 1]
    v = (4 / (torch.pi**2)) * torch.pow(torch.atan(w_pred / h_pred) - torch.atan(w_gt / h_gt), 2)
    with torch.no_grad():
        alpha = v / (1 - iou + v + eps)
    return diou - alpha * v
