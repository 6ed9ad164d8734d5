"""The IoU family: kernels equal to torchvision's bit for bit (and to a float64 formula without it), ``update()`` and
``forward()`` without a host sync, values equal to torchmetrics' (which needs torchvision: those tests skip here and
run in ``scripts/test --latest``)."""

import importlib.util
import itertools
import math

import pytest
import torch

from tests.parity import assert_same
from torchmetrics_async import detection
from torchmetrics_async.detection import boxes
from torchmetrics_async.registry import registry
from torchmetrics_async.testing import count_host_syncs

HAS_TORCHVISION = importlib.util.find_spec("torchvision") is not None
needs_torchvision = pytest.mark.skipif(
    not HAS_TORCHVISION, reason="torchmetrics' IoU classes need torchvision (scripts/test --latest has it)"
)
NAMES = ("IntersectionOverUnion", "GeneralizedIntersectionOverUnion", "DistanceIntersectionOverUnion")
NAMES = (*NAMES, "CompleteIntersectionOverUnion")
KERNELS = ("box_iou", "generalized_box_iou", "distance_box_iou", "complete_box_iou")


def _xyxy(g: torch.Generator, n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    corner = torch.randint(0, 40, (n, 2), generator=g)
    size = torch.randint(0, 12, (n, 2), generator=g)  # zero widths and heights included
    return torch.cat([corner, corner + size], 1).to(dtype)


def _reference(name: str, a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """The kernel's formula for one pair, in Python floats (right by construction, rounded once per operation)."""
    w = max(min(a[2], b[2]) - max(a[0], b[0]), 0.0)
    h = max(min(a[3], b[3]) - max(a[1], b[1]), 0.0)
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    iou = inter / union if union else math.nan
    cw, ch = max(a[2], b[2]) - min(a[0], b[0]), max(a[3], b[3]) - min(a[1], b[1])
    if name == "box_iou":
        return iou
    if name == "generalized_box_iou":
        return iou - (cw * ch - union) / (cw * ch) if cw * ch else math.nan
    centers = ((a[0] + a[2]) / 2 - (b[0] + b[2]) / 2) ** 2 + ((a[1] + a[3]) / 2 - (b[1] + b[3]) / 2) ** 2
    diou = iou - centers / (cw**2 + ch**2 + 1e-7)
    if name == "distance_box_iou":
        return diou
    v = 4 / math.pi**2 * (math.atan((a[2] - a[0]) / (a[3] - a[1])) - math.atan((b[2] - b[0]) / (b[3] - b[1]))) ** 2
    return diou - v / (1 - iou + v + 1e-7) * v


@pytest.mark.parametrize("name", KERNELS)
def test_kernels_equal_the_formula_in_float64(name: str) -> None:
    g = torch.Generator().manual_seed(0)
    a, b = _xyxy(g, 7, torch.float64), _xyxy(g, 5, torch.float64)
    a[:, 2:] += 1  # positive sizes: the formula's atan needs no 0/0
    b[:, 2:] += 1
    expected = torch.tensor([[_reference(name, x, y) for y in b.tolist()] for x in a.tolist()], dtype=torch.float64)
    torch.testing.assert_close(getattr(boxes, name)(a, b), expected, rtol=1e-12, atol=1e-12)


@needs_torchvision
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32])
@pytest.mark.parametrize("name", KERNELS)
def test_kernels_are_torchvision_bit_for_bit(name: str, dtype: torch.dtype) -> None:
    import torchvision.ops

    g = torch.Generator().manual_seed(1)
    a, b = _xyxy(g, 40, dtype), _xyxy(g, 30, dtype)
    if dtype.is_floating_point:
        a, b = a + torch.rand(a.shape, generator=g).to(dtype), b + torch.rand(b.shape, generator=g).to(dtype)
    ours, theirs = getattr(boxes, name)(a, b), getattr(torchvision.ops, name)(a, b)
    assert ours.dtype == theirs.dtype
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0, equal_nan=True)


def _scene(g: torch.Generator, images: int, box_format: str = "xyxy", dtype=torch.float32) -> tuple[list, list]:
    """Images with 0-4 detections and 0-3 ground truths of 3 labels: empty images and label mismatches included."""
    preds, target = [], []
    for _ in range(images):
        n, m = (int(x) for x in torch.randint(0, 5, (2,), generator=g))
        m = min(m, 3)
        det, gt = _xyxy(g, n, dtype) + 0.5, _xyxy(g, m, dtype)
        det[:, 2:] += 1
        gt[:, 2:] += 1
        det, gt = (boxes.box_convert(x, "xyxy", box_format) for x in (det, gt))
        preds.append({"boxes": det, "labels": torch.randint(0, 3, (n,), generator=g)})
        target.append({"boxes": gt, "labels": torch.randint(0, 3, (m,), generator=g)})
    return preds, target


def _without_pred_only_images(preds: list, target: list) -> tuple[list, list]:
    """torchmetrics' class_metrics raises an IndexError on an image with detections and no ground truth."""
    kept = [i for i, (p, t) in enumerate(zip(preds, target, strict=True)) if len(t["labels"]) or not len(p["labels"])]
    return [preds[i] for i in kept], [target[i] for i in kept]


CONFIGS = [
    {"box_format": fmt, "respect_labels": respect, "class_metrics": per_class, "iou_threshold": threshold}
    for fmt, respect, per_class, threshold in itertools.product(
        ("xyxy", "xywh", "cxcywh"), (True, False), (False, True), (None, 0.3)
    )
]


@needs_torchvision
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
@pytest.mark.parametrize("name", NAMES)
def test_values_equal_torchmetrics(name: str, config: dict) -> None:
    import torchmetrics.detection

    ours, theirs = getattr(detection, name)(**config), getattr(torchmetrics.detection, name)(**config)
    g = torch.Generator().manual_seed(len(name) + len(CONFIGS))
    for step in range(4):
        preds, target = _scene(g, 5, config["box_format"])
        if config["class_metrics"]:
            preds, target = _without_pred_only_images(preds, target)
        if step % 2:
            assert_same(ours(preds, target), theirs(preds, target))
        else:
            ours.update(preds, target)
            theirs.update(preds, target)
    expected = theirs.compute()
    actual = ours.compute()
    assert_same(actual, expected)
    key = name and ours._iou_type
    assert_same(actual[key], expected[key], exact=True)  # the overall value is torchmetrics' reduction, bit for bit


@needs_torchvision
@pytest.mark.parametrize("name", NAMES)
def test_registered_and_isinstance_with_torchvision(name: str) -> None:
    import torchmetrics.detection

    origin = getattr(torchmetrics.detection, name)
    assert registry()[origin] is getattr(detection, name)
    assert isinstance(getattr(detection, name)(), origin)


@pytest.mark.skipif(HAS_TORCHVISION, reason="checks the environment without torchvision")
def test_without_torchvision_a_plain_metric_that_is_not_registered() -> None:
    import torchmetrics.detection.iou

    origin = torchmetrics.detection.iou.IntersectionOverUnion
    with pytest.raises(ModuleNotFoundError):
        origin()
    assert origin not in registry()
    assert detection.IntersectionOverUnion()(*_scene(torch.Generator().manual_seed(0), 3))["iou"].ndim == 0


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name", NAMES)
def test_update_and_forward_make_no_host_sync(name: str, device: str) -> None:
    preds, target = _scene(torch.Generator().manual_seed(2), 6)
    preds, target = ([{k: v.to(device) for k, v in d.items()} for d in x] for x in (preds, target))
    for config in ({}, {"class_metrics": True, "iou_threshold": 0.2, "box_format": "cxcywh"}):
        metric = getattr(detection, name)(**config).to(device)
        with count_host_syncs() as syncs:
            metric.update(preds, target)
            if not config:
                metric(preds, target)
        assert syncs.total == 0, syncs


def test_class_metrics_count_an_image_without_ground_truth_for_no_class() -> None:
    """A listed deviation: torchmetrics raises an IndexError in compute() there."""
    det = {"boxes": torch.tensor([[0.0, 0.0, 2.0, 2.0]]), "labels": torch.tensor([1])}
    gt = {"boxes": torch.tensor([[1.0, 0.0, 3.0, 2.0]]), "labels": torch.tensor([1])}
    empty = {"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.long)}
    metric = detection.IntersectionOverUnion(class_metrics=True)
    metric.update([det, det], [gt, empty])
    result = metric.compute()
    assert_same(result["iou/cl_1"], torch.tensor(1 / 3))
    assert_same(result["iou"], torch.tensor((1 / 3) / 2))  # the square zero matrix counts overall, as torchmetrics'


def test_labels_not_matching_the_boxes_are_rejected_not_broadcast() -> None:
    det = {"boxes": torch.tensor([[0.0, 0.0, 2.0, 2.0], [0.0, 0.0, 1.0, 1.0]]), "labels": torch.tensor([1])}
    gt = {"boxes": torch.tensor([[1.0, 0.0, 3.0, 2.0]]), "labels": torch.tensor([1])}
    with pytest.raises(IndexError, match="labels"):
        detection.IntersectionOverUnion().update([det], [gt])


def _dtype_scenes() -> dict[str, tuple[list, list]]:
    """float64 boxes where torchmetrics' output dtypes are not the boxes' (its dtype rules follow the data)."""
    f64 = torch.float64
    far = {"boxes": torch.tensor([[0.0, 0.0, 1.0, 1.0]], dtype=f64), "labels": torch.tensor([0])}
    gt = {"boxes": torch.tensor([[5.0, 5.0, 6.0, 7.0]], dtype=f64), "labels": torch.tensor([0])}
    nan = {"boxes": torch.tensor([[5.0, 5.0, math.nan, 7.0]], dtype=f64), "labels": torch.tensor([0])}
    no_det = {"boxes": torch.zeros(0, 4, dtype=f64), "labels": torch.zeros(0, dtype=torch.long)}
    other = {"boxes": torch.tensor([[1.0, 1.0, 3.0, 3.0]], dtype=f64), "labels": torch.tensor([1])}
    return {
        # nothing kept in the float64 matrix, the float32 zeros of an image without detections kept: float32
        "float64-left-out": ([far, no_det], [gt, other]),
        # a NaN entry: the overall value a float32 zero, the per-class sums float64 (NaN)
        "nan": ([nan, far], [gt, gt]),
    }


@needs_torchvision
@pytest.mark.parametrize("scene", ["float64-left-out", "nan"])
@pytest.mark.parametrize("name", NAMES)
def test_output_dtypes_follow_torchmetrics_data_dependent_rules(name: str, scene: str) -> None:
    import torchmetrics.detection

    preds, target = _dtype_scenes()[scene]
    config = {"class_metrics": True, "iou_threshold": 0.9 if scene == "float64-left-out" else None}
    ours, theirs = getattr(detection, name)(**config), getattr(torchmetrics.detection, name)(**config)
    assert_same(ours(preds, target), theirs(preds, target))  # forward() with class_metrics: exact
    assert_same(ours.compute(), theirs.compute())


@pytest.mark.parametrize("box_format", ["xyxy", "xywh", "cxcywh"])
def test_boxes_not_of_four_coordinates_raise_a_value_error_at_once(box_format: str) -> None:
    """torchvision's conversion raises on ``[N, 3]`` boxes; ours broadcast them to ``[N, 4]`` (a number, no error)."""
    metrics = [detection.IntersectionOverUnion]
    if HAS_TORCHVISION:
        import torchmetrics.detection

        metrics.append(torchmetrics.detection.IntersectionOverUnion)
    det = {"boxes": torch.tensor([[0.0, 0.0, 2.0, 2.0]]), "labels": torch.tensor([0])}
    bad = {"boxes": torch.tensor([[1.0, 0.0, 3.0], [0.0, 1.0, 2.0]]), "labels": torch.tensor([0, 0])}
    for metric in metrics:
        for preds, target in (([det], [bad]), ([bad], [det])):
            with pytest.raises(ValueError, match=r"shape|unpack"):
                metric(box_format=box_format).update(preds, target)
