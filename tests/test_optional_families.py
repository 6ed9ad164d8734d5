"""The classes torchmetrics exports only with an optional package (torchvision, torch-fidelity, transformers, pesq, ...)
are in the coverage table whatever is installed, and the host syncs their reasons state are measured here.

The detection measurements need torchvision: they skip in the main environment (no torchvision) and run in the
second one (``scripts/test --latest``), which installs it.
"""

import importlib.util
import warnings
from collections.abc import Callable

import pytest
import torch

from tools.coverage import accelerated_coverage
from torchmetrics_async.registry import registry
from torchmetrics_async.testing import count_host_syncs
from torchmetrics_async.unaccelerated import (
    EXPLAINED,
    IOU_FAMILY,
    FrechetInceptionDistance,
    InceptionScore,
    KernelInceptionDistance,
)

HAS_TORCHVISION = importlib.util.find_spec("torchvision") is not None
needs_torchvision = pytest.mark.skipif(
    not HAS_TORCHVISION,
    reason="torchvision is not installed (scripts/test --latest has it)",
)
OPTIONAL = {
    "torchmetrics.audio": ["PerceptualEvaluationSpeechQuality", "ShortTimeObjectiveIntelligibility"],
    "torchmetrics.detection": ["IntersectionOverUnion", "CompleteIntersectionOverUnion", "MeanAveragePrecision"],
    "torchmetrics.image": ["FrechetInceptionDistance", "InceptionScore", "LearnedPerceptualImagePatchSimilarity"],
    "torchmetrics.multimodal": ["CLIPScore"],
    "torchmetrics.text": ["BERTScore", "InfoLM"],
    "torchmetrics.video": ["VideoMultiMethodAssessmentFusion"],
}


def test_the_classes_of_optional_packages_are_listed_with_their_reason_whatever_is_installed() -> None:
    rows = {(row.module, row.name): row for row in accelerated_coverage()}
    for module, names in OPTIONAL.items():
        for name in names:
            row = rows[(module, name)]
            # MeanAveragePrecision is accelerated where torchvision is installed (tests/detection measure it)
            assert row.reason == EXPLAINED.get(row.torchmetrics_class, ""), row
            assert (row.torchmetrics_class in EXPLAINED) != (row.torchmetrics_class in registry()), row


def _boxes(g: torch.Generator, n: int) -> torch.Tensor:
    corner = torch.rand(n, 2, generator=g) * 50
    return torch.cat([corner, corner + 1 + torch.rand(n, 2, generator=g) * 20], 1)


def _scene(images: int, masks: bool = False) -> tuple[list[dict], list[dict]]:
    """``images`` images, each with 5 detections and 4 ground truths of 3 classes (and 16x16 masks)."""
    g = torch.Generator().manual_seed(images)
    preds, target = [], []
    for _ in range(images):
        pred = {
            "boxes": _boxes(g, 5),
            "scores": torch.rand(5, generator=g),
            "labels": torch.randint(3, (5,), generator=g),
        }
        truth = {"boxes": _boxes(g, 4), "labels": torch.randint(3, (4,), generator=g)}
        if masks:
            pred["masks"] = torch.rand(5, 16, 16, generator=g) > 0.5
            truth["masks"] = torch.rand(4, 16, 16, generator=g) > 0.5
        preds.append(pred)
        target.append(truth)
    return preds, target


def _syncs(call: Callable[..., object], *args: object) -> int:
    with count_host_syncs() as syncs:
        call(*args)
    return syncs.total


@needs_torchvision
@pytest.mark.parametrize("cls", IOU_FAMILY, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize("images", [1, 3])
def test_the_iou_family_syncs_once_per_image_in_torchmetrics_and_never_accelerated(cls: type, images: int) -> None:
    ours = registry()[cls]()
    for metric, per_update, per_forward in ((cls(), images, 4 * images + 1), (ours, 0, 0)):
        metric.update(*_scene(1))
        assert _syncs(metric.update, *_scene(images)) == per_update
        assert _syncs(metric, *_scene(images)) == per_forward
    assert cls not in EXPLAINED  # accelerated here; without torchvision its reason states the measured figure


class _Features(torch.nn.Module):
    """A user-supplied feature extractor: no torch-fidelity, no weights download."""

    num_features = 4

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3 * 8 * 8, 4)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.linear(images.float().flatten(1))


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("cls", [FrechetInceptionDistance, KernelInceptionDistance, InceptionScore])
def test_the_inception_family_with_a_feature_module_makes_no_host_sync_in_update_as_explained(
    cls: type, device: str
) -> None:
    init = {"subset_size": 3} if cls is KernelInceptionDistance else {}
    metric = cls(feature=_Features(), **init).to(device)
    images = torch.randint(0, 255, (6, 3, 8, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    args = (images.to(device),) if cls is InceptionScore else (images.to(device), True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _syncs(metric.update, *args) == 0
        if cls is InceptionScore:
            assert _syncs(metric, *args) == 0
            return
        with pytest.raises((RuntimeError, ValueError)):  # a batch holds only real images
            metric(*args)
    assert "update() makes no host sync" in EXPLAINED[cls]
