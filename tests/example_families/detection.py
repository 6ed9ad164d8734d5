"""The detection family: two images per batch, boxes with score ties, a crowd and a class only in the predictions."""

import torch

from tests.example_families import Example

_NAMES = frozenset({"MeanAveragePrecision"})


def example(origin: type, generator: torch.Generator) -> Example | None:
    if not (origin.__module__.startswith("torchmetrics.detection") and origin.__name__ in _NAMES):
        return None
    preds, target = [], []
    for image in range(2):
        xy = torch.randint(0, 60, (4, 2), generator=generator).float()
        boxes = torch.cat([xy, xy + 5 + torch.randint(0, 60, (4, 2), generator=generator)], 1)
        jitter = torch.randint(-3, 4, (4, 4), generator=generator)
        scores = torch.randint(1, 4, (4,), generator=generator) / 4
        labels = torch.randint(0, 2, (4,), generator=generator)
        preds.append({"boxes": boxes + jitter, "scores": scores, "labels": labels + image})
        target.append({"boxes": boxes, "labels": labels, "iscrowd": torch.tensor([0, 0, 1, 0])})
    return Example({"iou_type": "bbox", "class_metrics": True}, (preds, target))
