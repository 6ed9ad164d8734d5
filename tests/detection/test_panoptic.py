"""PanopticQuality and ModifiedPanopticQuality against the installed torchmetrics: states, values, errors, no sync."""

import pytest
import torch
import torchmetrics.detection as tmd

import torchmetrics_async.detection as tad
from tests.parity import assert_rejected_alike, assert_same, torchmetrics_text
from torchmetrics_async.detection.panoptic import UNKNOWN_CATEGORY_MESSAGE, _masked_mean
from torchmetrics_async.testing import count_host_syncs, no_host_sync

STATES = ("iou_sum", "true_positives", "false_positives", "false_negatives")
INSTANCES = torch.tensor([-(2**50), -7, 0, 3, 2**40])  # large and negative instance ids
# (things, stuffs, the categories drawn: 9 and 11 are in neither set, so void in targets)
CATEGORIES = [
    ({0, 3, 5}, {2, 7}, [0, 2, 3, 5, 7, 9]),
    ({-2, 1}, {4}, [-2, 1, 4, 11]),
    (set(range(0, 40, 2)), set(range(1, 40, 2)), list(range(42))),  # 40 classes: the means of many
]
SHAPES = [(30,), (5, 6), (2, 3, 4)]  # 1-D, 2-D and 3-D spatial dims
OPTIONS = [
    (tmd.PanopticQuality, {}),
    (tmd.PanopticQuality, {"return_sq_and_rq": True}),
    (tmd.PanopticQuality, {"return_per_class": True}),
    (tmd.PanopticQuality, {"return_sq_and_rq": True, "return_per_class": True}),
    (tmd.ModifiedPanopticQuality, {}),
]


def _colors(g: torch.Generator, shape: tuple[int, ...], categories: list[int]) -> torch.Tensor:
    category = torch.tensor(categories)[torch.randint(0, len(categories), shape, generator=g)]
    return torch.stack([category, INSTANCES[torch.randint(0, 3, shape, generator=g) + (category % 3 == 0)]], -1)


def _scene(g: torch.Generator, batch: int, spatial: tuple[int, ...], categories: list[int]) -> tuple:
    """A target and preds that keep most of its pixels (so segments match), the rest redrawn."""
    target = _colors(g, (batch, *spatial), categories)
    kept = torch.rand(batch, *spatial, 1, generator=g) < torch.rand(batch, *([1] * len(spatial)), 1, generator=g)
    return torch.where(kept, target, _colors(g, (batch, *spatial), categories)), target


def _pair(origin: type, things: set, stuffs: set, **options: bool) -> tuple:
    kwargs = {"allow_unknown_preds_category": True, **options}
    return getattr(tad, origin.__name__)(things, stuffs, **kwargs), origin(things, stuffs, **kwargs)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("spatial", SHAPES)
@pytest.mark.parametrize(("things", "stuffs", "categories"), CATEGORIES)
@pytest.mark.parametrize(("origin", "options"), OPTIONS)
def test_states_and_values_equal_torchmetrics(
    origin: type, options: dict, things: set, stuffs: set, categories: list, spatial: tuple, seed: int
) -> None:
    g = torch.Generator().manual_seed(seed)
    ours, ref = _pair(origin, things, stuffs, **options)
    for step in range(4):
        preds, target = _scene(g, 1 + step % 3, spatial, categories)
        if step % 2:
            assert_same(ours(preds, target), ref(preds, target), exact=True, where=f"forward {step}")
        else:
            ours.update(preds, target)
            ref.update(preds, target)
        for name in STATES:  # iou_sum too: summed in torchmetrics' order on the CPU
            assert_same(getattr(ours, name), getattr(ref, name), exact=True, where=name)
    assert_same(ours.compute(), ref.compute(), exact=True, where="compute")


@pytest.mark.parametrize("origin", [tmd.PanopticQuality, tmd.ModifiedPanopticQuality])
def test_large_images_with_many_segments(origin: type) -> None:
    """Many small-IoU stuff pairs (the order-sensitive float64 sums of the modified metric), several images."""
    g = torch.Generator().manual_seed(5)
    ours, ref = _pair(origin, set(range(6)), set(range(6, 12)))
    for _ in range(2):
        preds, target = _scene(g, 3, (40, 40), list(range(13)))
        ours.update(preds, target)
        ref.update(preds, target)
    for name in STATES:
        assert_same(getattr(ours, name), getattr(ref, name), exact=True, where=name)
    assert_same(ours.compute(), ref.compute(), exact=True)


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_an_empty_metric_is_nan_as_in_torchmetrics() -> None:
    assert_same(
        tad.PanopticQuality(things=[0], stuffs=[]).compute(), tmd.PanopticQuality(things=[0], stuffs=[]).compute()
    )


@pytest.mark.parametrize("length", range(1, 40))
def test_masked_mean_is_the_boolean_index_mean(length: int) -> None:
    g = torch.Generator().manual_seed(length)
    for _ in range(20):
        values = torch.rand(length, generator=g, dtype=torch.float64)
        kept = torch.rand(length, generator=g) < 0.7
        assert_same(_masked_mean(values, kept), torch.mean(values[kept]), exact=True)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(("origin", "options"), OPTIONS)
def test_no_host_sync_in_update_and_forward(origin: type, options: dict, device: str) -> None:
    options = {"allow_unknown_preds_category": True, **options}
    ref = origin({0, 3, 5}, {2, 7}, **options)
    preds, target = _scene(torch.Generator().manual_seed(0), 2, (5, 6), [0, 2, 3, 5, 7, 9])
    with count_host_syncs(record_events=False) as counted:
        ref.update(preds, target)
    assert counted.total > 0  # torchmetrics reads the host per segment pair
    metric = getattr(tad, origin.__name__)({0, 3, 5}, {2, 7}, **options).to(device)
    preds, target = preds.to(device), target.to(device)
    with no_host_sync():
        metric.update(preds, target)
        metric(preds, target)
        metric.update(preds, target)


@pytest.mark.parametrize("then", ["compute", "reset"])
@pytest.mark.parametrize("origin", [tmd.PanopticQuality, tmd.ModifiedPanopticQuality])
def test_an_unknown_preds_category_is_raised_later(origin: type, then: str) -> None:
    preds, target = torch.zeros(1, 100, 2, dtype=torch.long), torch.zeros(1, 100, 2, dtype=torch.long)
    preds[0, 0, 0] = 2
    with pytest.raises(ValueError, match="Unknown categories found"):
        origin(things=[0], stuffs=[1]).update(preds, target)
    metric = getattr(tad, origin.__name__)(things=[0], stuffs=[1])
    with no_host_sync():
        metric.update(target, target)
        value = metric(preds, target)
    assert torch.isnan(value)
    with pytest.raises(RuntimeError) as raised:
        metric.compute() if then == "compute" else metric.reset()
    assert torchmetrics_text(raised.value) == UNKNOWN_CATEGORY_MESSAGE
    metric.reset()  # reported: the window is clean again
    metric.update(target, target)
    assert_same(metric.compute(), torch.tensor(1.0, dtype=torch.float64))


@pytest.mark.parametrize("origin", [tmd.PanopticQuality, tmd.ModifiedPanopticQuality])
def test_bad_inputs_get_torchmetrics_errors_at_once(origin: type) -> None:
    good = (torch.zeros(2, 4, 4, 2, dtype=torch.long),) * 2
    for bad in [
        (torch.zeros(2, 4, 4, 2, dtype=torch.long), torch.zeros(2, 4, 3, 2, dtype=torch.long)),
        (torch.zeros(2, 2, dtype=torch.long),) * 2,
        (torch.zeros(2, 4, 3, dtype=torch.long),) * 2,
    ]:
        assert_rejected_alike(
            lambda: origin(things={0}, stuffs={1}),
            lambda: getattr(tad, origin.__name__)(things={0}, stuffs={1}),
            good,
            bad,
        )
    metric = getattr(tad, origin.__name__)(things={0}, stuffs={1})
    with pytest.raises(TypeError, match=r"Expected argument `preds` to be of type `torch\.Tensor`"):
        metric.update([], good[1])
    # ids as floats or bools (torchmetrics mixes them up: a float16 preds promotes the pair table of an int64 target)
    for dtype in (torch.float16, torch.float32, torch.bool):
        with pytest.raises(TypeError, match=f"`target` to be an integer tensor of ids, got {dtype}"), no_host_sync():
            metric.update(good[0], good[1].to(dtype))
