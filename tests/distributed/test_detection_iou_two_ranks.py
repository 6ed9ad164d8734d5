"""The IoU family on 2 gloo ranks holding different numbers of images: ``compute()`` syncs every state in a constant
number of fused collectives, whatever the number of images, and gives the values of one process holding all the
images (rank 0's, then rank 1's): torchmetrics' where torchvision is installed, else ours with
``sync_on_compute=False``.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import torch

from tests.detection.test_iou import NAMES, _scene, _without_pred_only_images
from tests.distributed import harness
from tests.distributed.harness import count_collectives, run_scenarios, scenario
from tests.parity import assert_same
from torchmetrics_async import detection

pytestmark = pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="needs gloo")
CONFIGS = ({}, {"class_metrics": True, "box_format": "cxcywh", "iou_threshold": 0.2})


def _images(rank: int, config: dict) -> tuple[list, list]:
    """Rank 1 holds more images than rank 0, and the second config more than the first."""
    images = 3 + 4 * rank + 6 * bool(config)
    preds, target = _scene(torch.Generator().manual_seed(rank), images, config.get("box_format", "xyxy"))
    return _without_pred_only_images(preds, target) if config else (preds, target)


def _reference(name: str, config: dict) -> Any:
    if importlib.util.find_spec("torchvision") is not None:
        import torchmetrics.detection

        return getattr(torchmetrics.detection, name)(**config)
    return getattr(detection, name)(**config, sync_on_compute=False)


def _all_classes(rank: int, world_size: int) -> dict[str, Any]:
    out = {}
    for name in NAMES:
        for index, config in enumerate(CONFIGS):
            ours = getattr(detection, name)(**config)
            ours.update(*_images(rank, config))
            with count_collectives() as count:
                got = ours.compute()
            reference = _reference(name, config)
            for source in range(world_size):
                reference.update(*_images(source, config))
            out[f"{name}-{index}"] = {"ours": got, "expected": reference.compute(), "count": count.total}
    return out


def _run(rank: int, world_size: int) -> dict[str, Any]:
    return run_scenarios({"all": _all_classes}, rank, world_size)


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, Any]]:
    return harness.run(_run, world_size=2)


def test_unequal_ranks_compute_the_values_of_all_images_in_one_process(ranks: list[dict[str, Any]]) -> None:
    for rank_result in scenario(ranks, "all"):
        for name, result in rank_result.items():
            assert_same(result["ours"], result["expected"], where=name)


def test_a_constant_number_of_collectives(ranks: list[dict[str, Any]]) -> None:
    counts = {result["count"] for rank_result in scenario(ranks, "all") for result in rank_result.values()}
    assert len(counts) == 1, counts  # the same for every class, config (number of images) and rank
    assert counts.pop() <= 4
