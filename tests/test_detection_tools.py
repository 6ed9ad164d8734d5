"""The detection tools: seeded scenes, the torchmetrics reference that runs without torchvision, the fuzzer's path.

``tools/detection_scenes.py`` feeds the benchmark (``benchmarks/detection_bench.py``) and the fuzzer; its
``CocoReference`` stands in for torchmetrics' ``MeanAveragePrecision`` where torchvision is missing, so it must be
torchmetrics' class to the bit (checked where torchvision is installed: ``scripts/test --latest``).
"""

import contextlib
import random

import pytest
import torch

from tools import detection_scenes, fuzz
from tools.detection_scenes import CocoReference, edge_scenes, scenes
from torchmetrics_async.detection.boxes import box_convert
from torchmetrics_async.registry import _REGISTRY

_mean_ap = pytest.importorskip("torchmetrics.detection.mean_ap")


class MeanAveragePrecision(CocoReference):
    """A stand-in for the accelerated class: the reference itself, so the fuzzer must find nothing but planted bugs."""


def _same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x) for x, y in zip(a, b, strict=True)
    )


def test_scenes_are_seeded_and_coco_shaped() -> None:
    preds, target = scenes(3, 20, areas=True, crowds=0.1)
    again = scenes(3, 20, areas=True, crowds=0.1)
    other = scenes(4, 20, areas=True, crowds=0.1)
    assert _same(preds, again[0])
    assert _same(target, again[1])
    assert not _same(preds, other[0])
    assert all(len(p["labels"]) == len(p["scores"]) == len(p["boxes"]) == 100 for p in preds)
    gts = torch.tensor([len(t["labels"]) for t in target], dtype=torch.float64)
    assert 5 < gts.mean() < 9
    labels = torch.cat([x["labels"] for x in preds + target])
    assert labels.min() >= 0
    assert labels.max() < 80
    assert labels.unique().numel() > 60
    assert torch.cat([t["iscrowd"] for t in target]).any()
    assert (torch.cat([t["area"] for t in target]) > 0).any()
    assert (torch.cat([t["area"] for t in target]) == 0).any()
    for fmt in ("xywh", "cxcywh"):  # the same boxes in another format
        converted = scenes(3, 20, box_format=fmt, areas=True, crowds=0.1)[0]
        for p, q in zip(preds, converted, strict=True):
            torch.testing.assert_close(box_convert(q["boxes"], fmt, "xyxy"), p["boxes"], atol=1e-3, rtol=0)
    with_masks = scenes(3, 2, masks=True, image_size=(64, 64))[0]
    assert all(p["masks"].shape == (100, 64, 64) and p["masks"].dtype == torch.bool for p in with_masks)


def test_edge_scenes_reach_every_edge() -> None:
    preds, target = edge_scenes(0, 200)
    assert _same(preds, edge_scenes(0, 200)[0])
    assert any(len(p["labels"]) == 0 for p in preds)
    assert any(len(t["labels"]) == 0 for t in target)
    assert any(len(p["labels"]) > 100 for p in preds)
    assert any(len(t["labels"]) and t["iscrowd"].all() for t in target)  # images with only crowds
    assert any(len(p["scores"]) > len(p["scores"].unique()) for p in preds)  # score ties
    assert any(len(p["boxes"]) > len(p["boxes"].unique(dim=0)) for p in preds)  # duplicate boxes
    boxes = torch.cat([x["boxes"] for x in preds + target])
    assert ((boxes[:, 2] == boxes[:, 0]) | (boxes[:, 3] == boxes[:, 1])).any()  # zero area
    gt_labels = torch.cat([t["labels"] for t in target]).unique()
    assert not torch.isin(torch.cat([p["labels"] for p in preds]).unique(), gt_labels).all()  # classes only in preds
    areas = torch.cat([t["area"] for t in target if "area" in t])
    assert (areas == 32**2).any()
    assert (areas == 96**2).any()
    assert (areas == 0).any()


@pytest.mark.skipif(not detection_scenes.torchvision_available(), reason="torchmetrics' class needs torchvision")
@pytest.mark.parametrize("iou_type", ["bbox", "segm", ("bbox", "segm")])
@pytest.mark.parametrize("box_format", ["xyxy", "xywh", "cxcywh"])
def test_the_reference_is_torchmetrics(iou_type: str, box_format: str) -> None:
    init = {"iou_type": iou_type, "box_format": box_format, "class_metrics": True, "extended_summary": True}
    ours, theirs = CocoReference(**init), _mean_ap.MeanAveragePrecision(**init)
    for seed in range(3):
        batch = edge_scenes(seed, 4, box_format=box_format, masks="segm" in iou_type)
        ours.update(*batch)
        theirs.update(*batch)
    assert fuzz.compare_values(ours.compute(), theirs.compute()) is None


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in registered for torchmetrics' class, built directly, its update not guarded (it RLE-encodes)."""
    monkeypatch.setitem(_REGISTRY, _mean_ap.MeanAveragePrecision, MeanAveragePrecision)
    monkeypatch.setattr(fuzz, "PATHS", ("direct",))
    monkeypatch.setattr(fuzz, "no_host_sync", contextlib.nullcontext)


def test_detection_arguments_and_invalid_inputs_are_drawn(stand_in: None) -> None:
    rng, seen, values = random.Random(28), set(), set()
    for _ in range(150):
        case = fuzz.draw_case(rng, _mean_ap.MeanAveragePrecision)
        values |= {(k, repr(v)) for k, v in case.init.items()}
        seen |= {tag for op in case.ops for batch in op.batches for tag in batch.tags}
    assert {"det_box_shape", "det_missing_key", "det_lengths", "det_images", "det_nan", "empty"} <= seen
    for wanted in [
        ("iou_type", "('bbox', 'segm')"),
        ("iou_type", "'segm'"),
        ("average", "'micro'"),
        ("backend", "'faster_coco_eval'"),
        ("max_detection_thresholds", "[1, 3, 7]"),
        ("box_format", "'cxcywh'"),
        ("class_metrics", "True"),
        ("extended_summary", "True"),
    ]:
        assert wanted in values


def test_a_planted_detection_value_is_found_and_reproduced(stand_in: None, monkeypatch: pytest.MonkeyPatch) -> None:
    original = MeanAveragePrecision.compute

    def shifted(self: MeanAveragePrecision) -> dict:
        result = dict(original(self))
        result["map_50"] = result["map_50"] + 1e-3
        return result

    monkeypatch.setattr(MeanAveragePrecision, "compute", shifted)
    report = fuzz.fuzz(0, cases=6, pattern="^MeanAveragePrecision$", shrink_seconds=2.0)
    assert report.findings
    _case, finding, text = report.findings[0]
    assert "value" in finding.kind
    assert "map_50" in finding.detail
    assert "tests.test_detection_tools.MeanAveragePrecision" in text
    compile(text, "<reproducer>", "exec")


@pytest.mark.slow
def test_the_fuzzer_finds_nothing_between_the_reference_and_itself(stand_in: None) -> None:
    report = fuzz.fuzz(1, cases=25, pattern="^MeanAveragePrecision$", shrink_seconds=2.0)
    assert report.cases == 25
    assert not report.findings, "\n\n".join(text for _, _, text in report.findings)


def test_the_benchmark_times_both_sides_and_checks_parity(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import detection_bench

    monkeypatch.setattr(detection_bench, "ours_class", lambda: MeanAveragePrecision)
    result = detection_bench.measure(images=6, batch=4, repeat=1)
    assert set(result["update_s_per_image"]) == {"ours", "theirs"}
    assert result["max_abs_diff"] == dict.fromkeys(result["compute_s"], 0.0)  # the stand-in is the reference
    table = detection_bench.render(result).splitlines()
    assert sum(line.startswith("| `") for line in table) == 7
    assert "n/a" not in "\n".join(table)


class _Syncing(MeanAveragePrecision):
    """The stand-in reading a number off a tensor in every ``update()``: one host sync each."""

    def update(self, preds: list[dict], target: list[dict]) -> None:
        float(preds[0]["scores"].sum())
        super().update(preds, target)


def test_the_device_check_counts_host_syncs_in_update() -> None:
    from benchmarks.detection_bench import device_check

    clean = device_check(MeanAveragePrecision, "cpu", images=4, batch=2, repeat=1)
    assert clean["update_host_syncs"] == 0
    assert clean["update_sync_debug_error"] is None
    assert clean["compute_s"] > 0
    assert device_check(_Syncing, "cpu", images=4, batch=2, repeat=1)["update_host_syncs"] == 2
