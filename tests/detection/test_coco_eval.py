"""The COCO evaluation kernels against pycocotools 2.0.8 and faster-coco-eval 1.6.8, entry by entry, on seeded scenes.

Scenes are flat tables turned into COCO dicts the way torchmetrics builds them; both references evaluate them with
the parameters torchmetrics sets. The IoU blocks come from pycocotools' ``maskUtils.iou``, so the kernels see the
very IoUs the reference uses.
"""

import contextlib
import io

import numpy as np
import pytest
import torch

from torchmetrics_async.detection.coco_eval import Tables, coco_evaluate, ious_by_image_class, summarize

pycocotools = pytest.importorskip("pycocotools")
faster_coco_eval = pytest.importorskip("faster_coco_eval")
from faster_coco_eval import COCO as FasterCOCO  # noqa: E402
from faster_coco_eval import COCOeval_faster  # noqa: E402
from pycocotools import mask as mask_utils  # noqa: E402
from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402

DEFAULT_IOU = torch.linspace(0.5, 0.95, 10).tolist()  # torchmetrics' float32-rounded defaults
DEFAULT_REC = torch.linspace(0.0, 1.0, 101).tolist()
BACKENDS = {"pycocotools": (COCO, COCOeval), "faster_coco_eval": (FasterCOCO, COCOeval_faster)}


def make_scene(seed, images=12, classes=6, max_gt=8, max_det=30, crowd=0.15, big_image=True):
    """A flat scene: ties, duplicates, zero-area boxes, crowds, empty images, classes only in the predictions,
    ground-truth areas on the area-range bounds, and (``big_image``) one image with more than 100 detections."""
    rng = np.random.default_rng(seed)
    scene = {"gt": [], "det": []}
    for i in range(images):
        n_gt = 0 if i % 5 == 1 else int(rng.integers(0, max_gt + 1))
        n_det = 0 if i % 5 == 2 else int(rng.integers(0, max_det + 1))
        if big_image and i == 3:
            n_det = 130
        gt_boxes = rng.integers(0, 60, (n_gt, 4)).astype(np.float64) * 2.0
        gt_boxes[rng.random(n_gt) < 0.1, 2] = 0.0  # zero-area ground truths
        gt_labels = rng.integers(0, classes - 1, n_gt)  # the last class appears only in predictions
        crowds = rng.random(n_gt) < (1.0 if i % 5 == 4 else crowd)  # every fifth image: only crowds
        areas = gt_boxes[:, 2] * gt_boxes[:, 3]
        user = rng.random(n_gt)
        areas = np.where(user < 0.3, rng.choice([32.0**2, 96.0**2, 32.0**2 - 1, 96.0**2 + 1, 0.5], n_gt), areas)
        # detections: jittered copies of ground truths (duplicates included) and random boxes
        src = rng.integers(0, max(n_gt, 1), n_det)
        det_boxes = rng.integers(0, 60, (n_det, 4)).astype(np.float64) * 2.0
        if n_gt:
            copy = rng.random(n_det) < 0.6
            det_boxes[copy] = gt_boxes[src[copy]] + rng.integers(-3, 4, (int(copy.sum()), 4))
        det_boxes[:, 2:] = np.maximum(det_boxes[:, 2:], 0.0)
        det_boxes[rng.random(n_det) < 0.05, 3] = 0.0
        det_labels = np.where(rng.random(n_det) < 0.8, gt_labels[src] if n_gt else 0, rng.integers(0, classes, n_det))
        if big_image and i == 3:
            det_labels[:110] = gt_labels[0] if n_gt else 0  # more than 100 in one (image, class): the cap bites
        scores = np.float32(rng.integers(0, 12, n_det) / 11.0).astype(np.float64)  # many ties, float32 values
        scene["gt"] += [
            (i, b.tolist(), int(c), float(a), bool(w))
            for b, c, a, w in zip(gt_boxes, gt_labels, areas, crowds, strict=True)
        ]
        scene["det"] += [
            (i, b.tolist(), int(c), float(s)) for b, c, s in zip(det_boxes, det_labels, scores, strict=True)
        ]
    scene["images"] = images
    return scene


def kernel_inputs(scene):
    """The kernels' tables; ``pair_ious`` reads each image's IoU block from pycocotools' ``maskUtils.iou``."""
    f64 = torch.float64
    gt, det = scene["gt"], scene["det"]
    blocks, det_rows, gt_cols, offset = [], [0] * len(det), [0] * len(gt), 0
    for i in range(scene["images"]):
        d_idx = [j for j, d in enumerate(det) if d[0] == i]
        g_idx = [j for j, g in enumerate(gt) if g[0] == i]
        for col, j in enumerate(g_idx):
            gt_cols[j] = col
        for row, j in enumerate(d_idx):
            det_rows[j] = offset + row * len(g_idx)
        if d_idx and g_idx:
            block = mask_utils.iou(
                [det[j][1] for j in d_idx], [gt[j][1] for j in g_idx], [int(gt[j][4]) for j in g_idx]
            )
            blocks.append(np.asarray(block, dtype=np.float64).ravel())
            offset += len(d_idx) * len(g_idx)
    ious = torch.from_numpy(np.concatenate(blocks)) if blocks else torch.zeros(0, dtype=f64)
    det_rows, gt_cols = torch.tensor(det_rows, dtype=torch.long), torch.tensor(gt_cols, dtype=torch.long)
    return Tables(
        det_scores=torch.tensor([d[3] for d in det], dtype=f64),
        det_labels=torch.tensor([d[2] for d in det], dtype=torch.long),
        det_images=torch.tensor([d[0] for d in det], dtype=torch.long),
        det_areas=torch.tensor([d[1][2] * d[1][3] for d in det], dtype=f64),
        gt_labels=torch.tensor([g[2] for g in gt], dtype=torch.long),
        gt_images=torch.tensor([g[0] for g in gt], dtype=torch.long),
        gt_areas=torch.tensor([g[3] for g in gt], dtype=f64),
        gt_crowds=torch.tensor([g[4] for g in gt], dtype=torch.bool),
        pair_ious=lambda d, g: ious[det_rows[d] + gt_cols[g]],
        classes=torch.tensor(sorted({g[2] for g in gt} | {d[2] for d in det}), dtype=torch.long),
    )


def reference(scene, backend, iou_thr, rec_thr, max_dets, cat_ids=None):
    """COCOeval run as torchmetrics runs it: the evaluated object (``eval``, ``stats``, ``ious``)."""
    coco_cls, eval_cls = BACKENDS[backend]
    labels = sorted({g[2] for g in scene["gt"]} | {d[2] for d in scene["det"]})
    images = [{"id": i} for i in range(scene["images"])]
    cats = [{"id": c, "name": str(c)} for c in labels]
    gts = [
        {"id": j + 1, "image_id": i, "bbox": b, "area": a, "category_id": c, "iscrowd": int(w)}
        for j, (i, b, c, a, w) in enumerate(scene["gt"])
    ]
    dts = [
        {"id": j + 1, "image_id": i, "bbox": b, "area": b[2] * b[3], "category_id": c, "iscrowd": 0, "score": s}
        for j, (i, b, c, s) in enumerate(scene["det"])
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        target, preds = coco_cls(), coco_cls()
        target.dataset = {"images": images, "annotations": gts, "categories": cats}
        preds.dataset = {"images": list(images), "annotations": dts, "categories": list(cats)}
        target.createIndex()
        preds.createIndex()
        ev = eval_cls(target, preds, iouType="bbox")
        ev.params.iouThrs = np.array(iou_thr, dtype=np.float64)
        ev.params.recThrs = np.array(rec_thr, dtype=np.float64)
        ev.params.maxDets = max_dets
        if cat_ids is not None:
            ev.params.catIds = cat_ids
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return ev, labels


def check_scene(scene, backend, iou_thr=DEFAULT_IOU, rec_thr=DEFAULT_REC, max_dets=(1, 10, 100)):
    max_dets = list(max_dets)
    ref, labels = reference(scene, backend, iou_thr, rec_thr, max_dets)
    inputs = kernel_inputs(scene)
    assert inputs.classes.tolist() == labels  # the reference's catIds
    ev = coco_evaluate(inputs, iou_thr, rec_thr, max_dets, backend)
    for name in ("precision", "recall", "scores"):
        got, want = getattr(ev, name).numpy(), ref.eval[name]
        assert got.shape == want.shape, name
        np.testing.assert_array_equal(got, want, err_msg=name)  # bit for bit (np.spacing(1) shows at 2e-16)
    stats = summarize(ev, iou_thr, max_dets, backend).numpy()
    np.testing.assert_allclose(stats, np.asarray(ref.stats[:12], dtype=np.float64), rtol=0, atol=1e-12)
    assert (stats.astype(np.float32) == np.asarray(ref.stats[:12]).astype(np.float32)).all()
    return ev, ref


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("seed", range(3))
def test_random_scenes_match_reference(backend, seed):
    check_scene(make_scene(seed), backend)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_custom_thresholds_and_max_dets_without_100(backend):
    # no 0.5 / 0.75 among the IoU thresholds: map_50 / map_75 are -1; max_dets without 100: pycocotools' map is -1
    scene = make_scene(7)
    _, ref = check_scene(scene, backend, iou_thr=[0.3, 0.6, 0.55], rec_thr=[0.0, 0.25, 0.5, 1.0], max_dets=[2, 5, 7])
    assert ref.stats[1] == ref.stats[2] == -1
    assert (ref.stats[0] == -1) == (backend == "pycocotools")


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_unsorted_recall_thresholds(backend):
    # pycocotools stops at the first recall point out of reach; faster-coco-eval zeroes only that one
    check_scene(make_scene(11), backend, rec_thr=[0.9, 0.1, 1.0, 0.0, 0.5])


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_per_class_summary_is_torchmetrics_rerun(backend):
    scene = make_scene(5)
    ev, _ = check_scene(scene, backend)
    per_class = summarize(ev, DEFAULT_IOU, [1, 10, 100], backend, per_class=True)  # [12, K]: all 12 stats per class
    for k, label in enumerate(kernel_inputs(scene).classes.tolist()):
        ref, _ = reference(scene, backend, DEFAULT_IOU, DEFAULT_REC, [1, 10, 100], cat_ids=[label])
        np.testing.assert_allclose(per_class[:, k].numpy(), np.asarray(ref.stats[:12]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_ious_dict_matches_cocoeval_ious(backend):
    scene = make_scene(3)
    ref, _ = reference(scene, backend, DEFAULT_IOU, DEFAULT_REC, [1, 10, 100])
    got = ious_by_image_class(kernel_inputs(scene), scene["images"], 100)
    assert set(got) == set(ref.ious)
    for key, want in ref.ious.items():
        if isinstance(want, list):
            assert got[key] == [], key
        else:
            assert torch.equal(got[key], torch.tensor(want, dtype=torch.float32)), key


def test_no_detections_or_no_ground_truths():
    scenes = [make_scene(1, max_det=0, big_image=False), make_scene(2, max_gt=0), make_scene(4, 3, 2, 0, 0, 0, False)]
    for scene in scenes:
        for backend in BACKENDS:
            check_scene(scene, backend)


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("seed", range(100, 130))
def test_random_scene_sweep(backend, seed):
    rng = np.random.default_rng(seed)
    scene = make_scene(seed, images=int(rng.integers(1, 40)), classes=int(rng.integers(2, 12)))
    iou_thr = DEFAULT_IOU if seed % 2 else sorted(rng.choice([0.1, 0.3, 0.5, 0.75, 0.9, 1.0], 3, replace=False))
    max_dets = [1, 10, 100] if seed % 3 else sorted(rng.integers(1, 150, 3).tolist())
    check_scene(scene, backend, iou_thr=[float(t) for t in iou_thr], max_dets=max_dets)


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_coco_shaped_scene(backend):
    # closer to COCO: many classes, up to 100 detections per image, 120 images
    check_scene(make_scene(42, images=120, classes=30, max_gt=12, max_det=100), backend)


def test_unknown_backend_is_refused():
    inputs = kernel_inputs(make_scene(0, images=2))
    with pytest.raises(ValueError, match="backend"):
        coco_evaluate(inputs, DEFAULT_IOU, DEFAULT_REC, [1, 10, 100], "x")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(200, 220))
def test_extreme_parameters(seed):
    # thresholds at 0 and 1, repeated, recall points outside [0, 1] and unsorted, repeated max_dets, equal scores
    rng = np.random.default_rng(seed)
    scene = make_scene(seed, int(rng.integers(1, 15)), int(rng.integers(2, 6)), int(rng.integers(0, 15)), 40, 0.5)
    if seed % 4 == 0:
        scene["det"] = [(i, b, c, 0.5) for i, b, c, _ in scene["det"]]
    iou = [float(x) for x in rng.choice([0.0, 0.1, 0.5, 0.5, 0.75, 0.9, 1.0], int(rng.integers(1, 5)))]
    rec = [float(x) for x in rng.choice([*np.linspace(0, 1, 11).tolist(), 1.5, -0.1], int(rng.integers(1, 8)))]
    max_dets = sorted(int(x) for x in rng.choice([1, 2, 5, 10, 10, 100], 3))
    for backend in BACKENDS:
        check_scene(scene, backend, iou_thr=iou, rec_thr=rec, max_dets=max_dets)


def test_classes_without_entries_are_minus_one():
    # the metric passes every label it holds: images it skips may take a class's only entries away
    inputs = kernel_inputs(make_scene(6))
    real = coco_evaluate(inputs, DEFAULT_IOU, DEFAULT_REC, [1, 10, 100], "pycocotools")
    classes = torch.cat([torch.tensor([-5]), inputs.classes, torch.tensor([99])])
    ev = coco_evaluate(inputs._replace(classes=classes), DEFAULT_IOU, DEFAULT_REC, [1, 10, 100], "pycocotools")
    for name, dim in (("precision", 2), ("recall", 1), ("scores", 2)):
        got, want = getattr(ev, name), getattr(real, name)
        assert torch.equal(got.narrow(dim, 1, want.shape[dim]), want)
        assert (got.narrow(dim, 0, 1) == -1).all()
        assert (got.narrow(dim, -1, 1) == -1).all()
