"""MeanAveragePrecision against torchmetrics' own COCO path (pycocotools and faster-coco-eval, run here without
torchvision through ``torchmetrics.detection.helpers._calculate_map_with_coco``) and, where torchvision is installed,
against ``torchmetrics.detection.MeanAveragePrecision`` itself; no host sync in ``update()``; errors at the door."""

import copy
import pickle
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from torchmetrics.detection.helpers import CocoBackend, _calculate_map_with_coco, _fix_empty_tensors
from torchmetrics.utilities.data import _squeeze_if_scalar
from torchmetrics.utilities.imports import _TORCHVISION_AVAILABLE

from tests.parity import assert_same
from torchmetrics_async import MetricCollection, SumMetric
from torchmetrics_async.detection import MeanAveragePrecision
from torchmetrics_async.detection.boxes import box_convert
from torchmetrics_async.detection.mean_ap import NAN_MESSAGE, _ious, _mask_counts, coco_box_ious
from torchmetrics_async.testing import no_host_sync

BACKENDS = ("pycocotools", "faster_coco_eval")
IOU_TYPES = ("bbox", "segm", ("bbox", "segm"), ("segm", "bbox"))


def scene(seed: int, images: int = 6, classes: int = 3, size: int = 160, box_format: str = "xyxy") -> tuple:
    """Seeded images with score ties, duplicate and zero-area boxes, crowds, user areas, empty images, masks."""
    g = torch.Generator().manual_seed(seed)

    def ints(high: int, n: int) -> torch.Tensor:
        return torch.randint(0, high, (n,), generator=g)

    preds, target = [], []
    for i in range(images):
        n_gt = 0 if i % 5 == 2 else int(ints(6, 1)) + (i % 2)
        xy = ints(size // 2, 2 * n_gt).reshape(n_gt, 2).float()
        gt = torch.cat([xy, xy + 1 + ints(size // 2, 2 * n_gt).reshape(n_gt, 2).float()], 1)
        n_jit = 0 if i % 5 == 1 else n_gt
        jitter = gt[:n_jit] + ints(9, 4 * n_jit).reshape(n_jit, 4).float() - 4
        extra = ints(size // 2, 4 * 3).reshape(3, 4).float()
        extra[:, 2:] += extra[:, :2]  # one zero-area box per image at least when equal
        det = torch.cat([jitter, gt[:1], extra])[: 0 if i % 5 == 1 else None]
        gt_labels, det_labels = ints(classes, n_gt), ints(classes + 1, det.shape[0])
        if det.shape[0] > n_jit and n_jit:
            det_labels[:n_jit] = gt_labels[:n_jit]
        scores = (ints(6, det.shape[0]).float() + 1) / 7  # ties
        crowd = (ints(5, n_gt) == 0).long()
        area = torch.where(ints(4, n_gt) == 0, ints(12000, n_gt).float(), torch.zeros(n_gt))
        pred = {"boxes": box_convert(det, "xyxy", box_format), "scores": scores, "labels": det_labels}
        truth = {"boxes": box_convert(gt, "xyxy", box_format), "labels": gt_labels, "iscrowd": crowd, "area": area}
        pred["masks"], truth["masks"] = _masks(det, size, g), _masks(gt, size, g)
        preds.append(pred)
        target.append(truth)
    return preds, target


def _masks(boxes: torch.Tensor, size: int, g: torch.Generator) -> torch.Tensor:
    """Each box rasterized, with a few pixels flipped."""
    grid = torch.arange(size)
    x1, y1, x2, y2 = boxes.clamp(0, size).long().unbind(1)
    inside_x = (grid >= x1[:, None]) & (grid < x2[:, None])
    inside_y = (grid >= y1[:, None]) & (grid < y2[:, None])
    masks = inside_y[:, :, None] & inside_x[:, None, :]
    return masks ^ (torch.rand(masks.shape, generator=g) < 0.02)


def reference(preds: list, target: list, metric: MeanAveragePrecision) -> dict[str, Any]:
    """torchmetrics' compute on the lists its update() would have made (RLEs with the backend's own encoder)."""
    backend = CocoBackend(metric._coco_backend.backend)
    states: dict[str, list] = {key: [] for key in ("db", "dm", "ds", "dl", "gb", "gm", "gl", "gc", "ga")}
    for side, items in (("d", preds), ("g", target)):
        for item in items:
            if "bbox" in metric.iou_type:
                boxes = _fix_empty_tensors(item["boxes"])
                states[side + "b"].append(box_convert(boxes, metric.box_format, "xywh") if boxes.numel() else boxes)
            if "segm" in metric.iou_type:
                rles = [backend.mask_utils.encode(np.asfortranarray(m)) for m in item["masks"].numpy()]
                states[side + "m"].append(tuple((tuple(r["size"]), r["counts"]) for r in rles))
            states[side + "l"].append(item["labels"])
            if side == "d":
                states["ds"].append(item["scores"])
            else:
                states["gc"].append(item.get("iscrowd", torch.zeros_like(item["labels"])))
                states["ga"].append(item.get("area", torch.zeros_like(item["labels"])))
    s = states
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _squeeze_if_scalar(
            _calculate_map_with_coco(
                backend,
                s["gl"],
                s["gb"],
                s["gm"],
                s["gc"],
                s["ga"],
                s["dl"],
                s["db"],
                s["dm"],
                s["ds"],
                metric.iou_type,
                metric.average,
                metric.iou_thresholds,
                metric.rec_thresholds,
                metric.max_detection_thresholds,
                metric.class_metrics,
                metric.extended_summary,
            )
        )  # fmt: skip  (squeezed as Metric.compute's wrapper does)


def _check(init: dict[str, Any], batches: list[tuple], exact: bool = True) -> dict[str, Any]:
    metric = MeanAveragePrecision(**init)
    for preds, target in batches:
        metric.update(preds, target)
    got = metric.compute()
    every_preds = [p for preds, _ in batches for p in preds]
    every_target = [t for _, target in batches for t in target]
    expected = reference(every_preds, every_target, metric)
    assert_same(got, expected, atol=1e-6, rtol=0)
    return got


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("iou_type", IOU_TYPES, ids=str)
def test_values_equal_torchmetrics_coco_path(iou_type: Any, backend: str) -> None:
    batches = [scene(seed) for seed in range(3)]
    got = _check({"iou_type": iou_type, "backend": backend, "class_metrics": True}, batches)
    assert 0 < got["map" if isinstance(iou_type, str) else "bbox_map"] < 1  # a scene where matching decides


@pytest.mark.parametrize("box_format", ["xyxy", "xywh", "cxcywh"])
@pytest.mark.parametrize("average", ["macro", "micro"])
def test_box_formats_and_averages(box_format: str, average: str) -> None:
    _check({"box_format": box_format, "average": average}, [scene(7, box_format=box_format)])


@pytest.mark.parametrize("iou_type", IOU_TYPES, ids=str)
@pytest.mark.parametrize("average", ["macro", "micro"])
def test_extended_summary_and_class_metrics(iou_type: Any, average: str) -> None:
    init = {"iou_type": iou_type, "average": average, "class_metrics": True, "extended_summary": True}
    _check(init, [scene(11, images=4)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_custom_thresholds(backend: str) -> None:
    init = {
        "iou_thresholds": [0.3, 0.62],
        "rec_thresholds": [0.0, 0.25, 0.5, 0.9],
        "max_detection_thresholds": [5, 2, 50],
        "backend": backend,
        "class_metrics": True,
    }
    _check(init, [scene(3, images=8)])


@pytest.mark.parametrize("iou_type", IOU_TYPES, ids=str)
def test_empty_inputs(iou_type: Any) -> None:
    empty = {"boxes": torch.zeros(0, 4), "scores": torch.zeros(0), "labels": torch.zeros(0, dtype=torch.long)}
    empty["masks"] = torch.zeros(0, 16, 16, dtype=torch.bool)
    preds, target = scene(1, images=2, size=16)
    init = {"iou_type": iou_type, "class_metrics": True, "extended_summary": True}
    _check(init, [([empty], [dict(empty)])])  # no detection, no ground truth
    _check(init, [([empty, preds[0]], [target[1], dict(empty)])])
    no_update = MeanAveragePrecision(**init)
    assert_same(no_update.compute(), reference([], [], no_update))


def test_forward_reset_state_dict_and_pickle() -> None:
    batches = [scene(seed, images=3) for seed in range(3)]
    metric = MeanAveragePrecision(iou_type=("bbox", "segm"), class_metrics=True)
    for i, (preds, target) in enumerate(batches):
        assert_same(metric(preds, target), reference(preds, target, metric), atol=1e-6, rtol=0)
        if i == 1:
            metric.persistent(True)
            loaded = MeanAveragePrecision(iou_type=("bbox", "segm"), class_metrics=True)
            loaded.load_state_dict(copy.deepcopy(metric.state_dict()))
            unpickled = pickle.loads(pickle.dumps(metric))
    every = [x for preds, target in batches for x in (preds, target)]
    expected = reference(every[0::2][0] + every[2] + every[4], every[1] + every[3] + every[5], metric)
    assert_same(metric.compute(), expected, atol=1e-6, rtol=0)
    for copied in (loaded, unpickled):
        copied.update(*batches[2])
        assert_same(copied.compute(), expected, atol=1e-6, rtol=0)
    metric.reset()
    metric.update(*batches[0])
    assert_same(metric.compute(), reference(*batches[0], metric), atol=1e-6, rtol=0)


@pytest.mark.parametrize("iou_type", ["bbox", "segm", ("bbox", "segm")], ids=str)
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_update_and_no_host_sync(iou_type: Any, device: str) -> None:
    preds, target = scene(5, images=4, size=32)
    move = [{k: v.to(device) for k, v in item.items()} for item in preds + target]
    metric = MeanAveragePrecision(iou_type=iou_type).to(device)
    with no_host_sync():
        metric.update(move[:4], move[4:])
        metric.update(move[:4], move[4:])


def test_box_ious_are_pycocotools() -> None:
    mask_utils = pytest.importorskip("pycocotools.mask")
    preds, target = scene(2)
    det = box_convert(torch.cat([p["boxes"] for p in preds]), "xyxy", "xywh").double()
    gt = box_convert(torch.cat([t["boxes"] for t in target]), "xyxy", "xywh").double()
    crowd = torch.cat([t["iscrowd"] for t in target]).bool()
    assert len(det) > 10
    assert len(gt) > 5
    assert crowd.any()
    pairs = torch.cartesian_prod(torch.arange(len(det)), torch.arange(len(gt)))
    ours = coco_box_ious(det[pairs[:, 0]], gt[pairs[:, 1]], crowd[pairs[:, 1]]).reshape(len(det), len(gt))
    theirs = mask_utils.iou(det.tolist(), gt.tolist(), crowd.int().tolist())
    assert torch.equal(ours, torch.as_tensor(theirs, dtype=torch.float64))


def test_nan_boxes_and_scores_raise_at_compute() -> None:
    """torchmetrics hands NaN to pycocotools and returns a number; here compute() raises instead."""
    for key in ("boxes", "scores"):
        preds, target = scene(4, images=2)
        preds[0][key] = preds[0][key].clone()
        preds[0][key][-1] = float("nan")
        metric = MeanAveragePrecision()
        metric.update(preds, target)
        with pytest.raises(RuntimeError, match="NaN"):
            metric.compute()
    assert "NaN" in NAN_MESSAGE


@pytest.mark.parametrize(
    ("change", "match"),
    [  # a later image of the batch is the bad one: nothing of the batch may be kept
        (lambda p, t: p[3].pop("scores"), "contain the `scores` key"),
        (lambda p, t: t[3].update(labels=t[3]["labels"][:-1]), "different length"),
        (lambda p, t: p[3].update(boxes=torch.zeros(p[3]["boxes"].shape[0], 5)), r"shape \(num_boxes, 4\)"),
        (lambda p, t: p[3].update(boxes=torch.zeros(p[3]["boxes"].shape[0], 3)), r"shape \(num_boxes, 4\)"),
        (lambda p, t: p[3].update(labels=p[3]["labels"].float()), "Invalid input class"),
        (lambda p, t: p[3].update(scores=p[3]["scores"].long()), "Invalid input score"),
        (lambda p, t: p[3].update(masks=p[3]["masks"][:, :-1]), "same size"),
        (lambda p, t: p.pop(), "same length"),
    ],
)
def test_bad_input_raises_at_update_and_keeps_nothing(change: Any, match: str) -> None:
    preds, target = scene(0, images=5, size=24)  # image 3 has detections and ground truths
    change(preds, target)
    metric = MeanAveragePrecision(iou_type=("bbox", "segm"))
    metric.update(*scene(1, images=2, size=24))
    held = {name: _held(getattr(metric, name)) for name in metric._defaults}
    with pytest.raises(ValueError, match=match):
        metric.update(preds, target)
    assert {name: _held(getattr(metric, name)) for name in metric._defaults} == held


def _held(state: Any) -> Any:
    return len(state) if isinstance(state, list) else state.tolist()


def test_box_convert_refuses_boxes_without_four_values() -> None:
    for fmt in ("xyxy", "xywh", "cxcywh"):  # torchvision's unbind raises; slices would broadcast (N, 3) into (N, 4)
        with pytest.raises(ValueError, match=r"\(\.\.\., 4\)"):
            box_convert(torch.zeros(2, 3), fmt, "xywh" if fmt != "xywh" else "xyxy")


@pytest.mark.skipif(not _TORCHVISION_AVAILABLE, reason="torchmetrics' MeanAveragePrecision needs torchvision")
@pytest.mark.parametrize("iou_type", IOU_TYPES, ids=str)
def test_equals_torchmetrics_class_and_is_one(iou_type: Any) -> None:
    import torchmetrics.detection

    from torchmetrics_async import accelerate

    init = {"iou_type": iou_type, "class_metrics": True, "extended_summary": True, "average": "micro"}
    ours, theirs = MeanAveragePrecision(**init), torchmetrics.detection.MeanAveragePrecision(**init)
    assert isinstance(ours, torchmetrics.detection.MeanAveragePrecision)
    for seed in range(3):
        batch = scene(seed, images=3)
        assert_same(ours(*batch), theirs(*batch), atol=1e-6, rtol=0)
    assert_same(ours.compute(), theirs.compute(), atol=1e-6, rtol=0)
    adopted = torchmetrics.detection.MeanAveragePrecision(**init)
    adopted.update(*scene(0, images=3))
    accelerate(adopted)
    assert type(adopted) is MeanAveragePrecision


def test_mask_ious_are_pycocotools() -> None:
    mask_utils = pytest.importorskip("pycocotools.mask")
    preds, target = scene(6, images=4, size=48)
    det = torch.cat([p["masks"] for p in preds])
    gt = torch.cat([t["masks"] for t in target])
    det[0] = False  # an empty mask
    crowd = torch.cat([t["iscrowd"] for t in target]).bool()
    assert len(det) > 10
    assert len(gt) > 5
    assert crowd.any()
    inter, det_area, gt_area = _mask_counts(det, gt)
    pairs = torch.cartesian_prod(torch.arange(len(det)), torch.arange(len(gt)))
    ours = _ious(inter, det_area[pairs[:, 0]], gt_area[pairs[:, 1]], crowd[pairs[:, 1]]).reshape(len(det), len(gt))
    rles = [[mask_utils.encode(np.asfortranarray(m)) for m in side.numpy()] for side in (det, gt)]
    theirs = mask_utils.iou(rles[0], rles[1], crowd.int().tolist())
    assert torch.equal(ours, torch.as_tensor(theirs, dtype=torch.float64))
    assert torch.equal(det_area, torch.as_tensor(mask_utils.area(rles[0]), dtype=torch.float64))


def _rank_images(rank: int) -> tuple[list, list]:
    """Rank 0 holds 3 images, rank 1 holds 5 (in two updates): torchmetrics itself hangs on such ranks."""
    preds, target = scene(20 + rank, images=3 + 2 * rank, size=48)
    return preds, target


def _two_ranks(rank: int, world_size: int) -> dict[str, Any]:
    from tests.distributed.harness import count_collectives

    init = {"iou_type": ("bbox", "segm"), "class_metrics": True, "extended_summary": True}
    metric = MeanAveragePrecision(**init)
    preds, target = _rank_images(rank)
    metric.update(preds[:2], target[:2])
    metric.update(preds[2:], target[2:])
    with count_collectives() as count:
        value = metric.compute()
    idle = MeanAveragePrecision(**init)
    if rank == 1:
        idle.update(preds, target)
    with count_collectives() as idle_count:
        idle_value = idle.compute()
    # In a collection, the states sync in the collection's one fused round (no per-metric hook runs then).
    collection = MetricCollection({"map": MeanAveragePrecision(**init), "total": SumMetric()})
    collection["map"].update(preds[:2], target[:2])
    collection["map"].update(preds[2:], target[2:])
    collection["total"].update(torch.tensor(float(rank)))
    with count_collectives() as collection_count:
        in_collection = {key: value for key, value in collection.compute().items() if key != "total"}
    return {
        "value": value,
        "count": count.total,
        "idle": idle_value,
        "idle_count": idle_count.total,
        "collection": in_collection,
        "collection_count": collection_count.total,
    }


@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")
def test_two_ranks_with_unequal_images_interleave_as_torchmetrics() -> None:
    """Values equal one process fed torchmetrics' gathered order: rank 0 image 0, rank 1 image 0, ... in <= 4
    collectives (the fused sync), whatever the number of images."""
    from tests.distributed import harness

    ranks = harness.run(_two_ranks, world_size=2)
    (p0, t0), (p1, t1) = _rank_images(0), _rank_images(1)
    order = [0, 0, 1, 1, 2, 2, 3, 4]  # image j of each rank in turn; rank 0 has no image 3 or 4
    sides = [(p0, t0), (p1, t1)]
    preds = [sides[r][0][j] for r, j in zip([0, 1, 0, 1, 0, 1, 1, 1], order, strict=True)]
    target = [sides[r][1][j] for r, j in zip([0, 1, 0, 1, 0, 1, 1, 1], order, strict=True)]
    single = MeanAveragePrecision(iou_type=("bbox", "segm"), class_metrics=True, extended_summary=True)
    single.update(preds, target)
    expected = single.compute()
    idle_expected = MeanAveragePrecision(iou_type=("bbox", "segm"), class_metrics=True, extended_summary=True)
    idle_expected.update(p1, t1)
    for result in ranks:
        assert_same(result["value"], expected, exact=True)
        assert_same(result["idle"], idle_expected.compute(), exact=True)
        assert 0 < result["count"] <= 4
        assert 0 < result["idle_count"] <= 4
        assert_same(result["collection"], expected, exact=True)
        assert 0 < result["collection_count"] <= 4
    assert_same(expected, reference(preds, target, single), atol=1e-6, rtol=0)


def test_empty_masks_of_any_shape_are_no_masks() -> None:
    """torchmetrics' own tests give an image without masks as ``Tensor([])``."""
    preds, target = scene(8, images=3, size=16)
    target[0] = {"masks": torch.tensor([]), "labels": torch.zeros(0, dtype=torch.int)}
    preds[1] = {"masks": torch.tensor([]), "scores": torch.tensor([]), "labels": torch.zeros(0, dtype=torch.int)}
    _check({"iou_type": "segm", "class_metrics": True}, [(preds, target)])


def test_tm_to_coco_with_masks_raises() -> None:
    with pytest.raises(NotImplementedError, match="masks"):
        MeanAveragePrecision(iou_type="segm").tm_to_coco("unused")


@pytest.mark.parametrize("box_format", ["xyxy", "xywh", "cxcywh"])
def test_a_batch_of_mixed_dtypes_keeps_each_images_boxes_as_converted_alone(box_format: str) -> None:
    """update() converts a batch's boxes at once per dtype: each image's stored boxes are its own conversion's bits."""
    g = torch.Generator().manual_seed(0)
    dtypes = [torch.float32, torch.float64, torch.float16, torch.float32, torch.int64]
    boxes = [(torch.rand(n, 4, generator=g) * 100).to(d) for n, d in zip([3, 0, 2, 4, 1], dtypes, strict=True)]
    preds = [
        {"boxes": b, "scores": torch.rand(len(b), generator=g), "labels": torch.zeros(len(b), dtype=torch.long)}
        for b in boxes
    ]
    target = [{"boxes": b.flip(0), "labels": torch.zeros(len(b), dtype=torch.long)} for b in boxes]
    metric = MeanAveragePrecision(box_format=box_format)
    metric.update(preds, target)
    for stored, truth, b in zip(metric.detection_box, metric.groundtruth_box, boxes, strict=True):
        alone = box_convert(b, box_format, "xywh") if b.numel() else b.reshape(0, 4)
        assert_same(stored, alone, exact=True)
        assert_same(truth, box_convert(b.flip(0), box_format, "xywh") if b.numel() else b.reshape(0, 4), exact=True)
