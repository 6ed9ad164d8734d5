"""The panoptic family: four 8x8 images whose predictions keep most target pixels (so segments match), void pixels
(category 9, in neither ``things`` nor ``stuffs``) in the targets; such a category in ``preds`` violates."""

import torch

from tests.example_families import BATCH, Example

_NAMES = frozenset({"PanopticQuality", "ModifiedPanopticQuality"})
_CATEGORIES = torch.tensor([0, 1, 6, 7, 9])


def example(origin: type, generator: torch.Generator) -> Example | None:
    if not (origin.__module__.startswith("torchmetrics.detection") and origin.__name__ in _NAMES):
        return None
    colors = [
        torch.stack(
            [
                _CATEGORIES[torch.randint(0, 5, (BATCH, 8, 8), generator=generator)],
                torch.randint(0, 3, (BATCH, 8, 8), generator=generator),
            ],
            dim=-1,
        )
        for _ in range(2)
    ]
    target, other = colors
    kept = (torch.rand(BATCH, 8, 8, 1, generator=generator) < 0.8) & (target[..., :1] != 9)
    return Example({"things": {0, 1}, "stuffs": {6, 7}}, (torch.where(kept, target, other.clamp(max=7)), target))


def violating_example(origin: type, example: Example) -> Example | None:
    if origin.__name__ not in _NAMES or not origin.__module__.startswith("torchmetrics.detection"):
        return None
    preds, target = (x.clone() for x in example.inputs)
    preds[1, 2, 3, 0] = 5
    return Example(example.init, (preds, target))
