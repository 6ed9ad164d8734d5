"""COCO evaluation (pycocotools' ``evaluate``/``accumulate``/``summarize``) as vectorized tensor kernels.

Exact to pycocotools 2.0.8 and to faster-coco-eval 1.6.8 (``backend``): every precision, recall and score entry,
and every stat but for the summation order of the final means. Inputs are flat per-detection / per-ground-truth
tensors; the only Python loop is over detection rank (the greedy matching is sequential in it) and over ``max_dets``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["CocoEvaluation", "coco_evaluate", "ious_by_image_class", "summarize", "summarize_per_class"]

#: pycocotools' area ranges all/small/medium/large, inclusive at both ends (``1e5 ** 2 == 1e10``).
AREA_RANGES = ((0.0, 1e10), (0.0, 32.0**2), (32.0**2, 96.0**2), (96.0**2, 1e10))
_EPS = 2.220446049250313e-16  # np.spacing(1), pycocotools' precision denominator term
_BACKENDS = ("pycocotools", "faster_coco_eval")


class CocoEvaluation(NamedTuple):
    """``COCOeval.eval``'s arrays: precision/scores ``[T, R, K, A, M]``, recall ``[T, K, A, M]`` (float64)."""

    precision: Tensor
    recall: Tensor
    scores: Tensor
    classes: Tensor  #: ``[K]`` int64, the sorted category ids (pycocotools' ``catIds``)


def _starts(counts: Tensor) -> Tensor:
    """Exclusive cumulative sum: where each segment of ``counts`` starts."""
    return torch.cumsum(counts, 0) - counts


def _seg_cumsum(flags: Tensor, starts: Tensor) -> Tensor:
    """Inclusive cumulative sum of ``flags`` restarting at each entry's segment start (``starts`` per entry)."""
    total = torch.cumsum(flags, 0)
    return total - (total - flags)[starts]


def _group_sort(scores: Tensor, keys: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Order by (key, descending score), ties in input order (pycocotools' mergesort); give order, keys and ranks."""
    order = torch.sort(scores, descending=True, stable=True).indices
    order = order[torch.sort(keys[order], stable=True).indices]
    keys = keys[order]
    return order, keys, torch.arange(len(keys), device=keys.device) - torch.searchsorted(keys, keys)


def _need(npig: Tensor, rec_thr: Tensor) -> Tensor:
    """Smallest true-positive count ``n`` with ``n / npig >= thr`` in float64, as pycocotools' ``rc`` compares."""
    npig = npig.unsqueeze(-1).double()
    n0 = torch.ceil(rec_thr * npig).clamp(min=0)
    lower = (n0 >= 1) & ((n0 - 1) / npig >= rec_thr)
    return torch.where(lower, n0 - 1, torch.where(n0 / npig >= rec_thr, n0, n0 + 1)).long()


def _suffix_max(values: Tensor, seg: Tensor, num_seg: int) -> Tensor:
    """Exact right-to-left running max within sorted segments: an int64 key ``segment, value rank`` and cummax."""
    uniq, rank = torch.unique(values, return_inverse=True)
    key = (num_seg - 1 - seg).flip(0) * (len(uniq) + 1) + rank.flip(0)
    return uniq[(torch.cummax(key, 0).values % (len(uniq) + 1)).flip(0)]


def coco_evaluate(
    det_scores: Tensor,
    det_labels: Tensor,
    det_images: Tensor,
    det_areas: Tensor,
    gt_labels: Tensor,
    gt_images: Tensor,
    gt_areas: Tensor,
    gt_crowds: Tensor,
    ious: Tensor,
    det_rows: Tensor,
    gt_cols: Tensor,
    iou_thresholds: Sequence[float],
    rec_thresholds: Sequence[float],
    max_dets: Sequence[int],
    backend: str = "pycocotools",
) -> CocoEvaluation:
    """COCOeval's ``evaluate()`` + ``accumulate()`` over all images and classes at once.

    Args:
        det_scores: ``[D]`` float64 scores as pycocotools sees them.
        det_labels: ``[D]`` int64 category ids.
        det_images: ``[D]`` int64 image positions; their order decides score ties across images.
        det_areas: ``[D]`` float64 detection areas.
        gt_labels: ``[G]`` int64 category ids.
        gt_images: ``[G]`` int64 image positions.
        gt_areas: ``[G]`` float64 ground-truth areas (compared with the inclusive area ranges).
        gt_crowds: ``[G]`` bool crowd flags.
        ious: ``[P]`` float64, each image's full detection x ground-truth IoU block, row-major.
        det_rows: ``[D]`` int64 flat offset of each detection's row in ``ious``.
        gt_cols: ``[G]`` int64 column of each ground truth in its image's block.
        iou_thresholds: ``T`` IoU thresholds.
        rec_thresholds: ``R`` recall thresholds.
        max_dets: ``M`` detection caps, ascending.
        backend: ``"pycocotools"`` or ``"faster_coco_eval"`` (precision without ``np.spacing(1)``; a recall point
            out of reach does not zero the later ones).

    Returns:
        The ``precision``, ``recall`` and ``scores`` arrays and the ``classes``.

    Example:
        >>> import torch
        >>> f, i = torch.float64, torch.int64
        >>> ev = coco_evaluate(torch.tensor([0.9], dtype=f), torch.tensor([1]), torch.tensor([0]),
        ...     torch.tensor([100.0], dtype=f), torch.tensor([1]), torch.tensor([0]), torch.tensor([100.0], dtype=f),
        ...     torch.tensor([False]), torch.tensor([0.8], dtype=f), torch.tensor([0]), torch.tensor([0]),
        ...     [0.5, 0.75], [0.0, 1.0], [1, 10, 100])
        >>> ev.recall[:, 0, 0, 2].tolist()
        [1.0, 1.0]
    """
    if backend not in _BACKENDS:
        raise ValueError(f"Expected backend in {_BACKENDS}, got {backend!r}")
    dev, f64 = det_scores.device, torch.float64
    T, A = len(iou_thresholds), len(AREA_RANGES)
    classes = torch.unique(torch.cat([det_labels, gt_labels]))
    K = len(classes)
    det_k, gt_k = torch.searchsorted(classes, det_labels), torch.searchsorted(classes, gt_labels)
    lo, hi = torch.tensor(AREA_RANGES, dtype=f64, device=dev).T
    # detections per (image, class) by descending score, capped at max_dets[-1] (computeIoU / evaluateImg)
    order, d_key, d_rank = _group_sort(det_scores, det_images * K + det_k)
    keep = d_rank < max_dets[-1]
    order, d_key, d_rank = order[keep], d_key[keep], d_rank[keep]
    D = len(order)
    d_k, d_score = det_k[order], det_scores[order]
    # accumulate's order: class, descending score, then image and rank (each image's list concatenated in order)
    acc = torch.sort(d_score, descending=True, stable=True).indices
    acc = acc[torch.sort(d_k[acc], stable=True).indices]
    pos = torch.empty_like(acc)
    pos[acc] = torch.arange(D, device=dev)
    # ground truths per (image, class) in input order; ignored: crowd or area outside the range
    g_order = torch.sort(gt_images * K + gt_k, stable=True).indices
    g_key, g_crowd, g_area = (gt_images * K + gt_k)[g_order], gt_crowds[g_order], gt_areas[g_order]
    g_ign = g_crowd[:, None] | (g_area[:, None] < lo) | (g_area[:, None] > hi)  # [G, A]
    # candidate pairs in the same image and class reaching the lowest threshold, detections by rank
    g_first = torch.searchsorted(g_key, d_key)
    g_count = torch.searchsorted(g_key, d_key, right=True) - g_first
    by_rank = torch.sort(d_rank, stable=True).indices
    pair_d = by_rank.repeat_interleave(g_count[by_rank])
    local = torch.arange(len(pair_d), device=dev) - _starts(g_count[by_rank]).repeat_interleave(g_count[by_rank])
    iou = ious[det_rows[order[pair_d]] + gt_cols[g_order[g_first[pair_d] + local]]]
    thr = torch.tensor(iou_thresholds, dtype=f64, device=dev).clamp(max=1 - 1e-10)
    hit = iou >= thr.min() if T else torch.zeros_like(iou, dtype=torch.bool)
    pair_d, local, iou = pair_d[hit], local[hit], iou[hit]
    n_steps = min(max_dets[-1], int(d_rank.max()) + 1) if D else 0
    code = _match(pair_d, g_first, local, iou, d_rank, pos, g_crowd, g_ign, thr, n_steps)
    # accumulate, per maxDet: detections in accumulate's order
    p_rank, p_score, p_k = d_rank[acc], d_score[acc], d_k[acc]
    p_out = (det_areas[order][acc][:, None] < lo) | (det_areas[order][acc][:, None] > hi)  # [D, A]
    npig = torch.zeros(K * A, dtype=torch.long, device=dev)
    npig.index_add_(0, (gt_k[g_order][:, None] * A + torch.arange(A, device=dev)).flatten(), (~g_ign).long().flatten())
    npig = npig.view(K, A)
    need = _need(npig, torch.tensor(rec_thresholds, dtype=f64, device=dev)).transpose(0, 1)[None]  # [1, A, K, R]
    has_gt = (npig > 0).T[None, :, :, None]  # [1, A, K, 1]
    events = torch.nonzero(code, as_tuple=True)  # sorted by (t, a, position)
    events = (*events, code[events])
    curves = [_curves(events, p_rank < m, p_score, p_k, p_out, need, T, backend) for m in max_dets]
    precision = torch.stack([torch.where(has_gt, q, -1.0).permute(0, 3, 2, 1) for q, _, _ in curves], -1)
    scores = torch.stack([torch.where(has_gt, s, -1.0).permute(0, 3, 2, 1) for _, s, _ in curves], -1)
    recall = [torch.where(has_gt[..., 0], tot[..., 0].double() / npig.T, -1.0).permute(0, 2, 1) for *_, tot in curves]
    return CocoEvaluation(precision, torch.stack(recall, -1), scores, classes)


def _match(
    pair_d: Tensor,
    g_first: Tensor,
    local: Tensor,
    iou: Tensor,
    d_rank: Tensor,
    pos: Tensor,
    g_crowd: Tensor,
    g_ign: Tensor,
    thr: Tensor,
    n_steps: int,
) -> Tensor:
    """The greedy matching of pycocotools: ``[T, A, D]`` int8, 1 true positive, 2 matched an ignored ground truth.

    Per rank, each (image, class) matches its next detection at once. The best candidate is the max of an int64
    key (non-ignored first, then IoU rank, then the later ground truth): exactly pycocotools' loop with its `break`.
    """
    dev, (T, A, D, G) = iou.device, (len(thr), g_ign.shape[1], len(pos), len(g_crowd))
    new_det = torch.ones_like(pair_d, dtype=torch.bool)
    new_det[1:] = pair_d.diff() != 0
    n_before = torch.cat([pair_d.new_zeros(1), torch.cumsum(new_det, 0)])  # distinct detections before each pair
    bounds = torch.searchsorted(d_rank[pair_d], torch.arange(n_steps + 1, device=dev))
    bounds_h, slot0_h = torch.stack([bounds, n_before[bounds]]).tolist()
    uniq_iou, iou_rank = torch.unique(iou, return_inverse=True)
    span = (len(uniq_iou) + 1) * (G + 1)
    pair_g = g_first[pair_d] + local
    pair_key = (~g_ign[pair_g]).long() * span + (iou_rank * (G + 1) + local)[:, None]  # [P, A]
    matched = torch.zeros(G + 1, T, A, dtype=torch.bool, device=dev)  # row G: sink for "no match"
    code = torch.zeros(T, A, D, dtype=torch.int8, device=dev)
    tt, aa = torch.arange(T, device=dev)[:, None], torch.arange(A, device=dev)
    for r in range(n_steps):
        b0, b1, n = bounds_h[r], bounds_h[r + 1], slot0_h[r + 1] - slot0_h[r]
        if b0 == b1:
            continue
        pg, slot = pair_g[b0:b1], n_before[b0 + 1 : b1 + 1] - 1 - slot0_h[r]
        free = g_crowd[pg][:, None, None] | ~matched[pg]  # crowds match again and again
        key = torch.where((iou[b0:b1, None] >= thr)[:, :, None] & free, pair_key[b0:b1, None, :], -1)
        best = torch.full((n, T, A), -1, dtype=torch.long, device=dev)
        best.scatter_reduce_(0, slot[:, None, None].expand_as(key), key, "amax")
        dets = torch.zeros(n, dtype=torch.long, device=dev).scatter_(0, slot, pair_d[b0:b1])
        found = best >= 0
        matched[torch.where(found, g_first[dets][:, None, None] + best % (G + 1), G), tt, aa] = True
        code[:, :, pos[dets]] = torch.where(found, 2 - best // span, 0).to(torch.int8).permute(1, 2, 0)
    return code


def _curves(
    events: tuple[Tensor, ...],
    valid: Tensor,
    p_score: Tensor,
    p_k: Tensor,
    p_out: Tensor,
    need: Tensor,
    num_thr: int,
    backend: str,
) -> tuple[Tensor, Tensor, Tensor]:
    """One maxDet's precision and score at each recall point ``[T, A, K, R]`` and true positives ``[T, A, K, 1]``.

    Only the true positives' precisions matter: the n-th one's is ``n / (n + fp + eps)`` with ``fp`` the unmatched
    in-range detections before it, the envelope is its running max from the right, and recall point ``r`` lands on
    the ``need[r]``-th true positive (the first detection when ``need`` is 0). ``events``: matched detections as
    ``(t, a, position, code)`` sorted by ``(t, a, position)``; ``valid``: the positions within this maxDet.
    """
    T, (A, K), D, zero = num_thr, need.shape[1:3], len(valid), p_score.new_zeros(1)
    k_start = _starts(torch.bincount(p_k, minlength=K))
    inr = (valid[:, None] & ~p_out).long()  # [D, A] detections that count as false positives when unmatched
    cum_inr = torch.cumsum(inr, 0)
    base = torch.cat([inr.new_zeros(1, A), cum_inr])[k_start]  # [K, A] in-range detections before each class
    keep = valid[events[2]]
    t, a, p, c = (e[keep] for e in events)
    k = p_k[p]
    seg = (t * A + a) * K + k
    starts = _starts(torch.bincount(seg, minlength=T * A * K))[seg]
    is_tp = (c == 1).long()
    n_tp = _seg_cumsum(is_tp, starts)
    fp = cum_inr[p, a] - base[k, a] - _seg_cumsum(inr[p, a], starts)
    tp = is_tp.bool()
    n_tp, fp, seg, tp_score = n_tp[tp].double(), fp[tp].double(), seg[tp], p_score[p[tp]]
    pr = n_tp / (n_tp + fp + _EPS) if backend == "pycocotools" else n_tp / (n_tp + fp)
    env = torch.cat([_suffix_max(pr, seg, T * A * K), zero])
    tot = torch.bincount(seg, minlength=T * A * K).view(T, A, K, 1)
    first = _starts(tot.flatten()).view(T, A, K, 1)
    idx = torch.where(need > 0, first + need - 1, first).clamp(max=len(env) - 1)  # [T, A, K, R]
    reach = torch.where(need > 0, need <= tot, torch.bincount(p_k[valid], minlength=K).view(1, 1, K, 1) > 0)
    if backend == "pycocotools":  # its loop stops at the first recall point out of reach
        reach = torch.cummin(reach.int(), -1).values.bool()
    s0 = torch.cat([p_score, zero])[k_start.clamp(max=D)].view(1, 1, K, 1)  # first detection of the class
    s = torch.where(need > 0, torch.cat([tp_score, zero])[idx], s0)
    return torch.where(reach & (tot > 0), env[idx], zero), torch.where(reach, s, zero), tot


def _mean(values: Tensor, keep: Tensor, per_class: bool) -> Tensor:
    """``mean(s[s > -1])`` over the kept entries of ``[..., K]`` (all, or per class), -1 where there is none."""
    keep = keep & (values > -1)
    dims = tuple(range(values.dim() - 1)) if per_class else tuple(range(values.dim()))
    count = keep.sum(dims)
    return torch.where(count > 0, torch.where(keep, values, 0.0).sum(dims) / count.clamp(min=1), -1.0)


def _stats(ev: CocoEvaluation, iou_thresholds: Sequence[float], max_dets: Sequence[int], backend: str, per_class: bool):
    """COCOeval's stats as ``(ap, ar)`` getters over its ``precision`` / ``recall`` arrays."""
    if backend not in _BACKENDS:
        raise ValueError(f"Expected backend in {_BACKENDS}, got {backend!r}")
    thr = torch.tensor(iou_thresholds, dtype=torch.float64, device=ev.precision.device)

    def ap(a: int, m: int | None, iou: float | None = None) -> Tensor:
        s = ev.precision[..., a, 0 if m is None else m]  # [T, R, K]
        t = torch.ones_like(thr, dtype=torch.bool) if iou is None else thr == iou  # np.where(iouThr == p.iouThrs)
        out = _mean(s, t[:, None, None].expand_as(s), per_class)
        return torch.full_like(out, -1.0) if m is None else out

    def ar(a: int, m: int) -> Tensor:
        return _mean(ev.recall[..., a, m], torch.ones_like(ev.recall[..., a, m], dtype=torch.bool), per_class)

    # pycocotools' map looks for maxDets == 100 (-1 when absent); faster-coco-eval's map takes max_dets[-1]
    first = (
        len(max_dets) - 1
        if backend == "faster_coco_eval"
        else next(iter(i for i, m in enumerate(max_dets) if m == 100), None)
    )
    return ap, ar, first


def summarize(ev: CocoEvaluation, iou_thresholds: Sequence[float], max_dets: Sequence[int], backend: str) -> Tensor:
    """``COCOeval.stats``: map, map@.5, map@.75, map small/medium/large, mar@max_dets[0..2], mar small/medium/large.

    Args:
        ev: :func:`coco_evaluate`'s result.
        iou_thresholds: the thresholds it ran with (map@.5 / map@.75 are -1 without 0.5 / 0.75 among them).
        max_dets: its three ascending detection caps.
        backend: ``"pycocotools"`` (map at ``max_dets == 100``) or ``"faster_coco_eval"`` (map at ``max_dets[-1]``).

    Returns:
        ``[12]`` float64.

    Example:
        >>> import torch
        >>> ev = CocoEvaluation(torch.ones(1, 2, 1, 4, 3), torch.ones(1, 1, 4, 3), torch.ones(1, 2, 1, 4, 3),
        ...     torch.tensor([0]))
        >>> summarize(ev, [0.5], [1, 10, 50], "pycocotools")[:3].tolist()
        [-1.0, 1.0, -1.0]
    """
    ap, ar, first = _stats(ev, iou_thresholds, max_dets, backend, per_class=False)
    aps = [ap(0, first), ap(0, 2, 0.5), ap(0, 2, 0.75), ap(1, 2), ap(2, 2), ap(3, 2)]
    return torch.stack([*aps, ar(0, 0), ar(0, 1), ar(0, 2), ar(1, 2), ar(2, 2), ar(3, 2)])


def summarize_per_class(
    ev: CocoEvaluation, iou_thresholds: Sequence[float], max_dets: Sequence[int], backend: str
) -> tuple[Tensor, Tensor]:
    """Per class ``stats[0]`` (map) and ``stats[8]`` (mar@max_dets[2]), as torchmetrics' rerun per class gives them.

    A slice of the same arrays: COCOeval evaluates and accumulates every class independently.

    Args:
        ev: :func:`coco_evaluate`'s result.
        iou_thresholds: the thresholds it ran with.
        max_dets: its three ascending detection caps.
        backend: ``"pycocotools"`` or ``"faster_coco_eval"``.

    Returns:
        ``([K], [K])`` float64.

    Example:
        >>> import torch
        >>> ev = CocoEvaluation(torch.ones(1, 2, 2, 4, 3), torch.ones(1, 2, 4, 3), torch.ones(1, 2, 2, 4, 3),
        ...     torch.tensor([0, 1]))
        >>> [x.tolist() for x in summarize_per_class(ev, [0.5], [1, 10, 100], "pycocotools")]
        [[1.0, 1.0], [1.0, 1.0]]
    """
    ap, ar, first = _stats(ev, iou_thresholds, max_dets, backend, per_class=True)
    return ap(0, first), ar(0, 2)


def ious_by_image_class(
    det_scores: Tensor,
    det_labels: Tensor,
    det_images: Tensor,
    gt_labels: Tensor,
    gt_images: Tensor,
    ious: Tensor,
    det_rows: Tensor,
    gt_cols: Tensor,
    classes: Tensor,
    num_images: int,
    max_det: int,
) -> dict[tuple[int, int], Tensor | list]:
    """``COCOeval.ious`` as torchmetrics returns it: ``{(image, class): float32 [dets, gts] or []}``.

    Detections in descending score order (stable) capped at ``max_det``, ground truths in input order; ``[]`` where
    the image has no detection or no ground truth of the class.

    Example:
        >>> import torch
        >>> f = torch.float64
        >>> out = ious_by_image_class(torch.tensor([0.5, 0.9], dtype=f), torch.tensor([1, 1]), torch.tensor([0, 0]),
        ...     torch.tensor([1]), torch.tensor([0]), torch.tensor([0.25, 0.75], dtype=f), torch.tensor([0, 1]),
        ...     torch.tensor([0]), torch.tensor([1]), 1, 100)
        >>> out[(0, 1)].tolist()
        [[0.75], [0.25]]
    """
    K, dev = len(classes), det_scores.device
    order, d_key, d_rank = _group_sort(det_scores, det_images * K + torch.searchsorted(classes, det_labels))
    order, d_key = order[d_rank < max_det], d_key[d_rank < max_det]
    g_order = torch.sort(gt_images * K + torch.searchsorted(classes, gt_labels), stable=True).indices
    g_key = (gt_images * K + torch.searchsorted(classes, gt_labels))[g_order]
    g_first = torch.searchsorted(g_key, d_key)
    g_count = torch.searchsorted(g_key, d_key, right=True) - g_first
    local = torch.arange(int(g_count.sum()), device=dev) - _starts(g_count).repeat_interleave(g_count)
    rows = det_rows[order].repeat_interleave(g_count)
    values = ious[rows + gt_cols[g_order[g_first.repeat_interleave(g_count) + local]]].float()
    n_det = torch.bincount(d_key, minlength=num_images * K)
    n_gt = torch.bincount(g_key, minlength=num_images * K)
    sizes = torch.stack([n_det, n_gt]).T.tolist()
    keys = [(i, c) for i in range(num_images) for c in classes.tolist()]
    return {
        key: block.view(d, g) if d and g else []
        for key, (d, g), block in zip(keys, sizes, torch.split(values, [d * g for d, g in sizes]), strict=True)
    }
