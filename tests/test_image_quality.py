"""Image quality metrics whose torchmetrics update copies host constants: same values, no host sync."""

import pytest
import torch
import torchmetrics.image as tmi

from tests.parity import Step, run_side_by_side
from torchmetrics_async import ShapeMismatchError
from torchmetrics_async import image as image_quality
from torchmetrics_async.testing import count_host_syncs, no_host_sync

CASES = [
    ("RootMeanSquaredErrorUsingSlidingWindow", {"window_size": 7}, (3, 2, 12, 9)),
    ("RootMeanSquaredErrorUsingSlidingWindow", {"window_size": 4}, (2, 3, 9, 12)),
    ("RelativeAverageSpectralError", {"window_size": 5}, (3, 2, 12, 9)),
    ("RelativeAverageSpectralError", {}, (2, 3, 16, 17)),
    ("PeakSignalNoiseRatioWithBlockedEffect", {"data_range": 1.0}, (3, 1, 24, 17)),
    ("PeakSignalNoiseRatioWithBlockedEffect", {"data_range": 2.0, "block_size": 3}, (2, 1, 10, 13)),
    (
        "MultiScaleStructuralSimilarityIndexMeasure",
        {"data_range": 1.0, "kernel_size": 3, "betas": (0.3, 0.7)},
        (2, 1, 12, 16),
    ),
    (
        "MultiScaleStructuralSimilarityIndexMeasure",
        {"data_range": 1.0, "gaussian_kernel": False, "kernel_size": 3, "reduction": "none", "normalize": "simple"},
        (2, 3, 48, 50),
    ),
]


@pytest.mark.parametrize(("name", "kwargs", "shape"), CASES)
def test_values_equal_torchmetrics(name: str, kwargs: dict, shape: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(0)
    steps = [Step(k, (torch.rand(shape, generator=g), torch.rand(shape, generator=g))) for k in ("update", "forward")]
    run_side_by_side(getattr(tmi, name)(**kwargs), getattr(image_quality, name)(**kwargs), steps * 2)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(("name", "kwargs", "shape"), CASES[:-1])
def test_update_and_forward_make_no_host_sync(name: str, kwargs: dict, shape: tuple[int, ...], device: str) -> None:
    metric = getattr(image_quality, name)(**kwargs).to(device)
    preds, target = torch.rand(shape, device=device), torch.rand(shape, device=device)
    with no_host_sync():
        metric.update(preds, target)
        metric(preds, target)


@pytest.mark.parametrize(("block_size", "size"), [(1, (16, 16)), (8, (8, 16)), (8, (16, 8))])
def test_psnrb_rejects_images_without_block_and_non_block_pixels_at_once(block_size: int, size: tuple) -> None:
    """torchmetrics indexes with an empty (float) index tensor there: IndexError, raised here without a read."""
    images = torch.rand(2, 1, *size)
    with pytest.raises(IndexError):
        tmi.PeakSignalNoiseRatioWithBlockedEffect(data_range=1.0, block_size=block_size).update(images, images)
    metric = image_quality.PeakSignalNoiseRatioWithBlockedEffect(data_range=1.0, block_size=block_size)
    with no_host_sync(), pytest.raises(IndexError):
        metric.update(images, images)


def test_msssim_uniform_kernel_keeps_torchmetrics_copy_of_the_kernel_size() -> None:
    """The documented caveat: torchmetrics' ``_ssim_update`` copies ``kernel_size`` to the device once per scale."""
    name, kwargs, shape = CASES[-1]
    metric = getattr(image_quality, name)(**kwargs).to("meta")
    with count_host_syncs() as syncs:
        metric.update(torch.rand(shape, device="meta"), torch.rand(shape, device="meta"))
    assert syncs.total == len(metric.betas), syncs.summary()
    assert "_ssim_update" in syncs.summary(), syncs.summary()


@pytest.mark.parametrize("name", ["PeakSignalNoiseRatioWithBlockedEffect", "RelativeAverageSpectralError"])
def test_shapes_that_differ_are_rejected_at_once(name: str) -> None:
    """torchmetrics broadcasts a batch of one (PSNRB) or fails only in compute() (RASE)."""
    metric = getattr(image_quality, name)(**({"data_range": 1.0} if "Blocked" in name else {}))
    with no_host_sync(), pytest.raises(ShapeMismatchError, match="expected to have the same shape"):
        metric.update(torch.rand(1, 1, 16, 16), torch.rand(3, 1, 16, 16))
