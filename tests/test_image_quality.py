"""Image quality metrics whose torchmetrics update copies host constants: same values, no host sync."""

import pytest
import torch
import torchmetrics.image as tmi
from torchmetrics.functional.image.psnrb import _compute_bef

from tests.parity import Step, assert_rejected_alike, assert_same, run_side_by_side
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
    # data_range=None, the default: torchmetrics takes Python's max() of two 0-dim tensors, a host read per scale
    ("MultiScaleStructuralSimilarityIndexMeasure", {"kernel_size": 3, "betas": (0.3, 0.7)}, (2, 2, 12, 16)),
    ("StructuralSimilarityIndexMeasure", {}, (2, 3, 16, 17)),
    ("StructuralSimilarityIndexMeasure", {"reduction": "none", "return_full_image": True}, (3, 1, 16, 16)),
    (
        "StructuralSimilarityIndexMeasure",
        {"data_range": (0.2, 0.8), "return_contrast_sensitivity": True},
        (2, 1, 16, 16),
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


@pytest.mark.parametrize(
    "bad", [(1, 3, 16, 16), (1, 1, 8, 16), (1, 1, 16, 4), (1, 16, 16)], ids=["rgb", "height", "width", "3-d"]
)
def test_psnrb_batch_it_rejects_adds_nothing(bad: tuple) -> None:
    """Issue 31: a batch torchmetrics rejects before touching its states (ValueError or IndexError) was added to
    ``sum_squared_error`` here first, so every later ``compute()`` was wrong (1.5750 for torchmetrics' 7.3812)."""
    generator = torch.Generator().manual_seed(0)
    good = torch.rand(1, 1, 16, 16, generator=generator), torch.rand(1, 1, 16, 16, generator=generator)
    bad_batch = torch.rand(bad, generator=generator), torch.rand(bad, generator=generator)

    def metric(module):
        return lambda: module.PeakSignalNoiseRatioWithBlockedEffect(data_range=1.0)

    assert_rejected_alike(metric(tmi), metric(image_quality), good, bad_batch)
    theirs, ours = metric(tmi)(), metric(image_quality)()
    for step in (good, bad_batch, good):
        raised = []
        for each in (theirs, ours):
            try:
                each.update(*step)
            except (ValueError, IndexError) as err:
                raised.append(type(err))
        assert raised in ([], [ValueError] * 2, [IndexError] * 2)
    assert_same(ours.compute(), theirs.compute())


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


@pytest.mark.parametrize("name", ["StructuralSimilarityIndexMeasure", "MultiScaleStructuralSimilarityIndexMeasure"])
def test_default_data_range_takes_pythons_max_with_nan_as_torchmetrics(name: str) -> None:
    """The range of the images is Python's ``max(preds range, target range)``: a NaN target keeps the preds range."""
    g = torch.Generator().manual_seed(3)
    preds, target = torch.rand(2, 1, 40, 40, generator=g), torch.rand(2, 1, 40, 40, generator=g)
    target[1, 0, 0, 0] = float("nan")  # sample 0 stays finite in torchmetrics (its data range ignores the NaN)
    kwargs = {"reduction": "none"} | ({"betas": (0.5, 0.5), "kernel_size": 3} if "Multi" in name else {})
    steps = [Step("update", (preds, target)), Step("forward", (target, preds))]
    run_side_by_side(getattr(tmi, name)(**kwargs), getattr(image_quality, name)(**kwargs), steps)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_block_effect_is_torchmetrics_own_in_the_images_dtype(dtype: torch.dtype) -> None:
    """Its last product in the images' dtype, as torchmetrics' (float32 there gave other float16 bits: the fuzzer)."""
    for seed in range(30):
        x = torch.rand(2, 1, 20, 17, generator=torch.Generator().manual_seed(seed)).to(dtype)
        ours, theirs = image_quality.block_effect(x, 8), _compute_bef(x, 8)
        assert ours.dtype == theirs.dtype
        assert torch.equal(ours, theirs), seed


@pytest.mark.parametrize("first", ["float", "int64"])
def test_rmse_sw_update_that_raises_leaves_the_states_as_they_were(first: str) -> None:
    """A batch that does not fit the stored map (its shape, or its dtype) raises torchmetrics' error, counting nothing.

    torchmetrics has already added the batch's image count and RMSE sum when its map's in-place add fails (the fuzzer:
    ``compute()`` gave a number from a rejected batch); ours checks first. Its map takes the shape and dtype of the
    first batch's target, even of a batch its checks then reject (int64 here).
    """
    ours, theirs = image_quality.RootMeanSquaredErrorUsingSlidingWindow(), tmi.RootMeanSquaredErrorUsingSlidingWindow()
    good, other = torch.rand(2, 3, 16, 16), torch.rand(2, 3, 12, 12)
    if first == "int64":
        for metric in (ours, theirs):
            with pytest.raises(TypeError, match="same data type"):
                metric.update(good, good.long())
        other, message = good, "can't be cast"
    else:
        for metric in (ours, theirs):
            metric.update(good, good.flip(0))
        message = "must match the size"
    before = {name: getattr(ours, name).clone() for name in ours._defaults}
    for metric in (ours, theirs):
        with pytest.raises(RuntimeError, match=message):
            metric.update(other, other.flip(0))
    assert all(torch.equal(getattr(ours, name), before[name]) for name in before)
    assert not torch.equal(theirs.total_images, ours.total_images)  # the torchmetrics behaviour this guards against
    if first == "float":
        fresh = tmi.RootMeanSquaredErrorUsingSlidingWindow()
        fresh.update(good, good.flip(0))
        torch.testing.assert_close(ours.compute(), fresh.compute(), rtol=0, atol=0)


FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@pytest.mark.parametrize("size", [0, 1], ids=["empty", "one"])
def test_vif_mixed_dtypes_are_rejected_at_once_where_torchmetrics_rejects_them(size: int) -> None:
    """Issue 31: an empty float32 / float64 batch failed in torchmetrics (an index put) but was taken here, then
    compute() gave NaN. Every pair of float dtypes: rejected (a RuntimeError, at once) exactly where torchmetrics
    rejects it, else the same value."""
    for preds_dtype in FLOATS:
        for target_dtype in FLOATS:
            preds = torch.rand(size, 1, 41, 41, generator=torch.Generator().manual_seed(1)).to(preds_dtype)
            target = torch.rand(size, 1, 41, 41, generator=torch.Generator().manual_seed(2)).to(target_dtype)
            theirs, ours = tmi.VisualInformationFidelity(), image_quality.VisualInformationFidelity()
            try:
                theirs.update(preds, target)
            except RuntimeError:
                with no_host_sync(), pytest.raises(RuntimeError, match="of one dtype"):
                    ours.update(preds, target)
                with pytest.raises(RuntimeError, match="of one dtype"):
                    ours(preds, target)
                continue
            ours.update(preds, target)
            assert_same(ours.compute(), theirs.compute())
