"""What unaccelerated.py says of HausdorffDistance (explained, not accelerated), measured here; and that torchmetrics'
PanopticQuality, which torchmetrics-async accelerates, syncs per segment where the accelerated class does not."""

import pytest
import torch
import torch.nn.functional as F
import torchmetrics.detection as tmd
import torchmetrics.segmentation as tms
from torchmetrics.functional.segmentation import hausdorff_distance
from torchmetrics.functional.segmentation.utils import binary_erosion

from tools.coverage import EXPLAINED
from torchmetrics_async.registry import accelerated_class_for
from torchmetrics_async.testing import count_host_syncs


def _panoptic(segments: int) -> torch.Tensor:
    """One 8x8 image of thing category 0 cut into ``segments`` instances (column stripes)."""
    instances = torch.arange(8).repeat(8, 1) * segments // 8
    return torch.stack([torch.zeros_like(instances), instances], dim=-1).unsqueeze(0)


@pytest.mark.parametrize("cls", [tmd.PanopticQuality, tmd.ModifiedPanopticQuality])
def test_panoptic_quality_host_syncs_grow_with_the_number_of_segments_in_torchmetrics_only(cls: type) -> None:
    assert cls not in EXPLAINED
    counts = {}
    for origin in (cls, accelerated_class_for(cls)):
        for segments in (1, 4):
            metric, inputs = origin(things={0}, stuffs={1}), _panoptic(segments)
            with count_host_syncs(record_events=False) as counted:
                metric.update(inputs, inputs)
            counts[origin, segments] = counted.total
    assert 0 < counts[cls, 1] < counts[cls, 4], counts
    assert counts[accelerated_class_for(cls), 1] == counts[accelerated_class_for(cls), 4] == 0, counts


def _edges(x: torch.Tensor) -> torch.Tensor:
    """Torchmetrics' edge masks (``mask_edges``, crop, no spacing) of ``(n, H, W)`` masks, padded by one."""
    x = F.pad(x.byte(), (1, 1, 1, 1))
    return (binary_erosion(x.unsqueeze(1)).squeeze(1) ^ x).bool()


def _directed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Fixed-size directed Hausdorff distance of edge masks (euclidean): a separable minimum, masked, no host read."""
    n, h, w = a.shape
    cols, rows = torch.arange(w), torch.arange(h)
    far = torch.iinfo(torch.int64).max // 4
    nearest_in_row = torch.where(b.unsqueeze(2), (cols.view(w, 1) - cols).abs() ** 2, far).amin(-1)
    squared = ((rows.view(h, 1) - rows) ** 2).view(1, h, h, 1) + nearest_in_row.unsqueeze(1)
    distance = torch.where(b.flatten(1).any(1).view(n, 1, 1), squared.amin(2).sqrt(), torch.inf)
    return torch.where(a, distance, -torch.inf).flatten(1).amax(1)


def _padded_hausdorff(preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    p, t = _edges(preds.flatten(0, 1)), _edges(target.flatten(0, 1))
    return torch.maximum(_directed(p, t), _directed(t, p)).view(preds.shape[:2])


def _one_hot(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    labels = torch.randint(0, 3, shape, generator=torch.Generator().manual_seed(seed))
    labels[:, : shape[1] // 2] = 1  # every class present in every sample
    return F.one_hot(labels, 3).movedim(-1, 1)


def test_hausdorff_padded_form_gives_torchmetrics_values_on_square_images_only() -> None:
    assert EXPLAINED[tms.HausdorffDistance].startswith("measures distances between edge pixels")
    preds, target = _one_hot((4, 10, 10), 0), _one_hot((4, 10, 10), 1)
    with count_host_syncs(record_events=False) as counted:
        tms.HausdorffDistance(num_classes=3).update(preds, target)
    assert counted.total > 0
    theirs = hausdorff_distance(preds, target, 3, include_background=True)
    assert torch.equal(_padded_hausdorff(preds.bool(), target.bool()), theirs)
    wide = _one_hot((4, 8, 12), 0), _one_hot((4, 8, 12), 1)
    theirs = hausdorff_distance(*wide, 3, include_background=True)
    assert not torch.equal(_padded_hausdorff(wide[0].bool(), wide[1].bool()), theirs)
    # Zero rows below a wide image change no edge and no distance: torchmetrics' value then changes (its row stride).
    squared = [F.pad(x, (0, 0, 0, 4)) for x in wide]
    on_square = hausdorff_distance(*squared, 3, include_background=True)
    assert torch.equal(on_square, _padded_hausdorff(wide[0].bool(), wide[1].bool()))
    assert not torch.equal(on_square, theirs)
    tall = [x.transpose(-1, -2) for x in wide]
    with pytest.raises(IndexError):
        hausdorff_distance(*tall, 3, include_background=True)
    absent = F.one_hot(torch.zeros(1, 4, 4, dtype=torch.long), 3).movedim(-1, 1)
    with pytest.raises(RuntimeError, match="numel"):
        tms.HausdorffDistance(num_classes=3).update(absent, absent)
