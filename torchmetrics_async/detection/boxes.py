"""Box format conversions, bit for bit torchvision's ``box_convert`` (so torchvision is not needed)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["BOX_FORMATS", "box_convert"]

BOX_FORMATS = ("xyxy", "xywh", "cxcywh")


def _to_xyxy(boxes: Tensor, fmt: str) -> Tensor:
    if fmt == "xyxy":
        return boxes
    a, b, c, d = boxes.unbind(-1)
    if fmt == "xywh":
        return torch.stack((a, b, a + c, b + d), dim=-1)
    return torch.stack((a - 0.5 * c, b - 0.5 * d, a + 0.5 * c, b + 0.5 * d), dim=-1)


def _from_xyxy(boxes: Tensor, fmt: str) -> Tensor:
    if fmt == "xyxy":
        return boxes
    x1, y1, x2, y2 = boxes.unbind(-1)
    if fmt == "xywh":
        return torch.stack((x1, y1, x2 - x1, y2 - y1), dim=-1)
    return torch.stack(((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1), dim=-1)


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
    if in_fmt == out_fmt:
        return boxes.clone()
    return _from_xyxy(_to_xyxy(boxes, in_fmt), out_fmt)
