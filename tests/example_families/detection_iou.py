"""The IoU family (registered where torchvision is installed): three images, one without detections, one without
ground truth, labels that match and labels that do not; ``class_metrics=True`` (its ``forward()`` is the listed
caveat). Nothing is deferred, so there is no violating example."""

import torch

from tests.example_families import Example
from torchmetrics_async.detection import iou


def example(origin: type, generator: torch.Generator) -> Example | None:
    if not (origin.__module__.startswith("torchmetrics.detection") and origin.__name__ in iou.__all__):
        return None
    corners = torch.rand(7, 2, generator=generator) * 20
    boxes = torch.cat([corners, corners + 1 + torch.rand(7, 2, generator=generator) * 10], 1)
    labels = torch.randint(0, 3, (7,), generator=generator)
    preds = [
        {"boxes": boxes[:3], "labels": labels[:3]},
        {"boxes": boxes[:0], "labels": labels[:0]},
        {"boxes": boxes[3:4], "labels": labels[3:4]},
    ]
    target = [
        {"boxes": boxes[4:6] + 0.5, "labels": labels[4:6]},
        {"boxes": boxes[6:] - 0.5, "labels": labels[6:]},
        {"boxes": boxes[:1], "labels": labels[:1]},
    ]
    return Example({"class_metrics": True, "iou_threshold": 0.1}, (preds, target))
