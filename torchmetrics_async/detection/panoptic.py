"""Sync-free ``PanopticQuality`` and ``ModifiedPanopticQuality``, torchmetrics' states and values.

torchmetrics finds each image's segments with ``torch.unique`` and matches their pairs in a Python loop that reads
every IoU on the host. Here stable sorts number the segments and the pairs of every image at once, and
``index_add_`` measures them into tables as long as the batch has pixels (no user-supplied bounds). The IoUs, the
matches and the ``<= 0.5`` void rule are torchmetrics' very tensor ops; ``iou_sum`` is summed per image in
torchmetrics' pair order, then image by image (on the CPU; a GPU's atomic adds may order the float64 sums of
``ModifiedPanopticQuality``'s stuffs otherwise). A category in neither ``things`` nor ``stuffs`` in ``preds`` without
``allow_unknown_preds_category`` is recorded and raised by ``compute()``; ids that are not integers raise at once.

Example:
    >>> target = torch.tensor([[[[0, 1], [0, 1], [0, 2], [6, 0]]]])
    >>> preds = torch.tensor([[[[0, 1], [0, 1], [0, 1], [6, 0]]]])
    >>> PanopticQuality(things={0}, stuffs={6})(preds, target)
    tensor(0.7222, dtype=torch.float64)
"""

import torch
import torchmetrics.detection as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import _panoptic_validate_inputs
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats

__all__ = ["ModifiedPanopticQuality", "PanopticQuality"]

#: Deferred-check state name and message for a ``preds`` category in neither ``things`` nor ``stuffs``.
UNKNOWN_CATEGORY = "invalid_unknown_category"
UNKNOWN_CATEGORY_MESSAGE = (
    "Unknown categories found in `preds` (in neither `things` nor `stuffs`); pass"
    " `allow_unknown_preds_category=True` to count them as void."
)


def _segments(*keys: Tensor) -> Tensor:
    """Per entry, the rank of its key tuple among the distinct tuples in lexicographic order (no host read)."""
    order = keys[-1].argsort(stable=True)
    for key in reversed(keys[:-1]):
        order = order.gather(0, key.gather(0, order).argsort(stable=True))
    new = torch.zeros_like(order, dtype=torch.bool)
    for key in keys:
        ordered = key.gather(0, order)
        new[1:] |= ordered[1:] != ordered[:-1]
    return torch.empty_like(order).scatter_(0, order, new.cumsum(0))


def _masked_mean(values: Tensor, kept: Tensor) -> Tensor:
    """``torch.mean(values[kept])`` bit for bit without a host read: the same mean for every possible count.

    A masked sum over count differs in float32's last bits (``rq`` is float32), visibly in a logged value.
    """
    front = values.gather(0, (~kept).byte().argsort(stable=True))  # the kept values first, in order
    means = torch.stack([front[:count].mean() for count in range(values.numel() + 1)])
    return means.gather(0, kept.sum().view(1)).squeeze(0)


class _SyncFreePanoptic(SyncFreeBatchStats):
    """The shared update and compute of the two classes."""

    _stat_states = ("iou_sum", "true_positives", "false_positives", "false_negatives")
    _modified = False  # ModifiedPanopticQuality: stuffs score every IoU > 0 and count each target segment

    def _deferred_checks(self) -> dict[str, str]:
        return {UNKNOWN_CATEGORY: UNKNOWN_CATEGORY_MESSAGE}

    def _set_constants(self) -> None:
        super()._set_constants()
        table = sorted(self.cat_id_to_continuous_id.items())  # (category id, continuous id), by category id
        self.__dict__["_categories"] = torch.tensor(table, device=self.device).reshape(-1, 2).t().contiguous()

    def _colors(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Per pixel: image * (K + 1) + continuous category (K: void), instance (0 for stuffs, void), known."""
        ids, continuous = self.__dict__["_categories"].to(x.device)
        num, things = continuous.numel(), len(self.things)
        flat = x.flatten(1, -2)
        category, instance = flat.reshape(-1, 2).t().contiguous()
        position = torch.searchsorted(ids.to(category.dtype), category).clamp_(max=num - 1)
        known = ids.to(category.dtype)[position] == category
        category = torch.where(known, continuous[position], num)
        instance = torch.where(category < things, instance, 0)
        image = torch.arange(flat.shape[0], device=x.device).view(-1, 1).expand(flat.shape[:2]).reshape(-1)
        return image * (num + 1) + category, instance, known

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        """Torchmetrics' per-image ``_panoptic_quality_update_sample`` summed over the batch, without a host read."""
        _panoptic_validate_inputs(preds, target)
        for name, x in (("preds", preds), ("target", target)):  # ids as floats or bools: torchmetrics mixes them up
            if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
                raise TypeError(f"Expected argument `{name}` to be an integer tensor of ids, got {x.dtype}")
        (key_p, inst_p, known), (key_t, inst_t, _) = self._colors(preds), self._colors(target)
        num, pixels = len(self.cat_id_to_continuous_id), key_p.numel()
        first_modified = len(self.things) if self._modified else num
        seg_p, seg_t = _segments(key_p, inst_p), _segments(key_t, inst_t)
        ones = torch.ones_like(seg_p)

        def per_entry(index: Tensor, values: Tensor) -> Tensor:  # a table as long as the batch has pixels
            return torch.zeros_like(seg_p).index_add_(0, index, values)

        def per_class(category: Tensor, flags: Tensor) -> Tensor:  # slot num takes void (dropped)
            return torch.zeros(num + 1, dtype=torch.long, device=flags.device).index_add_(0, category, flags.long())

        area_p, area_t = per_entry(seg_p, ones), per_entry(seg_t, ones)
        void_p = per_entry(seg_p, (key_t % (num + 1) == num).long())  # a pred segment's pixels on target void
        void_t = per_entry(seg_t, (key_p % (num + 1) == num).long())  # a target segment's pixels on pred void
        segment_key_p = torch.zeros_like(key_p).scatter_(0, seg_p, key_p)
        segment_key_t = torch.zeros_like(key_t).scatter_(0, seg_t, key_t)
        # Pairs numbered in (image, pred category, instance, target category, instance) order: torchmetrics' order
        # within a category (its torch.unique of the colour pairs).
        pair = _segments(seg_p * max(pixels, 1) + seg_t)
        inter = per_entry(pair, ones)
        pair_p, pair_t = (torch.zeros_like(s).scatter_(0, pair, s) for s in (seg_p, seg_t))
        cat_p, cat_t = segment_key_p[pair_p] % (num + 1), segment_key_t[pair_t] % (num + 1)
        same = (inter > 0) & (cat_t < num) & (cat_p == cat_t)
        iou = inter / (area_p[pair_p] - void_p[pair_p] + area_t[pair_t] - void_t[pair_t] - inter)
        modified = cat_t >= first_modified
        match = same & ~modified & (iou > 0.5)
        scored = torch.where(match | (same & modified & (iou > 0)), iou.double(), 0.0)
        per_image = torch.zeros(preds.shape[0] * (num + 1), dtype=torch.double, device=iou.device)
        per_image.index_add_(0, segment_key_p[pair_p], scored)  # each image's sums, its pairs in order
        columns = torch.arange(per_image.numel(), device=iou.device) % (num + 1)
        iou_sum = torch.zeros(num + 1, dtype=torch.double, device=iou.device).index_add_(0, columns, per_image)
        matched_p, matched_t = per_entry(pair_p, match.long()) > 0, per_entry(pair_t, match.long()) > 0
        class_p, class_t = segment_key_p % (num + 1), segment_key_t % (num + 1)
        real_p, real_t = (area_p > 0) & (class_p < first_modified), (area_t > 0) & (class_t < num)
        negatives = real_t & ~matched_t & (void_t / area_t <= 0.5) & (class_t < first_modified)
        positives = real_p & ~matched_p & (void_p / area_p <= 0.5)
        true_positives = per_class(cat_p, match) + per_class(class_t, real_t & (class_t >= first_modified))
        counts = (true_positives, per_class(class_p, positives), per_class(class_t, negatives))
        violations = {} if self.allow_unknown_preds_category else {UNKNOWN_CATEGORY: ~known}
        return BatchStats((iou_sum[:num], *(c[:num].int() for c in counts)), violations)

    def _batch_value(self, stats: BatchStats) -> Tensor:
        return self._quality(*stats.values)

    def compute(self) -> Tensor:
        """Raise a deferred unknown-category error, then torchmetrics' value, without a host read."""
        self._raise_deferred_checks()
        return self._quality(self.iou_sum, self.true_positives, self.false_positives, self.false_negatives)

    def _quality(self, iou_sum: Tensor, true_positives: Tensor, false_positives: Tensor, negatives: Tensor) -> Tensor:
        """Torchmetrics' ``_panoptic_quality_compute`` and output choice, its boolean-index means by `_masked_mean`."""
        sq = torch.where(true_positives > 0.0, iou_sum / true_positives, 0.0)
        denominator = true_positives + 0.5 * false_positives + 0.5 * negatives
        rq = torch.where(denominator > 0.0, true_positives / denominator, 0.0)
        pq = sq * rq
        if getattr(self, "return_per_class", False):
            return torch.stack((pq, sq, rq), dim=-1) if self.return_sq_and_rq else pq.view(1, -1)
        if getattr(self, "return_sq_and_rq", False):
            return torch.stack([_masked_mean(x, denominator > 0) for x in (pq, sq, rq)], dim=0)
        return _masked_mean(pq, denominator > 0)


class PanopticQuality(_SyncFreePanoptic, tm.PanopticQuality):
    """No host sync in ``update()`` or ``forward()``: sorts and tables, not ``torch.unique`` and a loop over pairs."""


class ModifiedPanopticQuality(_SyncFreePanoptic, tm.ModifiedPanopticQuality):
    """No host sync in ``update()`` or ``forward()``: sorts and tables, not ``torch.unique`` and a loop over pairs."""

    _modified = True
