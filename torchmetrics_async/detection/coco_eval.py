"""COCO evaluation (pycocotools' ``evaluate``/``accumulate``/``summarize``) as vectorized tensor kernels.

Exact to pycocotools 2.0.8 and to faster-coco-eval 1.6.8 (``backend``): every precision, recall and score entry
bit for bit; the stats' final means sum in torch's order (float64 last bits). How: stable orders come from one int64
sort on (group, dense score rank); the greedy matching loops over detection rank only (every (image, class) matches its
next detection at once); accumulate needs only the true positives (the n-th has precision ``n / (n + fp + eps)``), its
envelope is an exact segmented suffix max (int64 key ``segment, value rank`` and cummax), and each recall point is the
integer count of true positives it needs.

"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["CocoEvaluation", "Tables", "coco_evaluate", "ious_by_image_class", "summarize"]

#: pycocotools' area ranges all/small/medium/large, inclusive at both ends (``1e5 ** 2 == 1e10``).
AREA_RANGES = ((0.0, 1e10), (0.0, 32.0**2), (32.0**2, 96.0**2), (96.0**2, 1e10))
_EPS = 2.220446049250313e-16  # np.spacing(1), pycocotools' precision denominator term
_BACKENDS = ("pycocotools", "faster_coco_eval")


class Tables(NamedTuple):
    """The kernels' inputs: flat tables on one device, an entry per detection and per ground truth.

    Scores are float64 as pycocotools sees them; the order of the image numbers decides score ties across images;
    within an image, entries keep the user's order; ground-truth areas are matched against the inclusive area ranges.
    ``pair_ious(d, g)`` gives the float64 IoUs of detections ``d`` and ground truths ``g`` (table indices, same image
    and class): only the pairs that count are computed.
    """

    det_scores: Tensor
    det_labels: Tensor
    det_images: Tensor
    det_areas: Tensor
    gt_labels: Tensor
    gt_images: Tensor
    gt_areas: Tensor
    gt_crowds: Tensor
    pair_ious: Callable[[Tensor, Tensor], Tensor]
    classes: Tensor  #: ``[K]`` the sorted category ids to evaluate (pycocotools' ``catIds``), every label among them


class CocoEvaluation(NamedTuple):
    """``COCOeval.eval``'s arrays: precision/scores ``[T, R, K, A, M]``, recall ``[T, K, A, M]`` (float64).

    A class without a ground truth that counts has -1 everywhere (``K``: the tables' ``classes``).
    """

    precision: Tensor
    recall: Tensor
    scores: Tensor


def _starts(counts: Tensor) -> Tensor:
    """Exclusive cumulative sum: where each segment of ``counts`` starts."""
    return torch.cumsum(counts, 0) - counts


def _seg_cumsum(flags: Tensor, starts: Tensor) -> Tensor:
    """Inclusive cumulative sum of ``flags`` restarting at each entry's segment start (``starts`` per entry)."""
    total = torch.cumsum(flags, 0)
    return total - (total - flags)[starts]


def _group_sort(scores: Tensor, keys: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Order by (key, descending score), ties in input order (pycocotools' mergesort), with one int64 sort.

    Returns the order, the sorted keys, each entry's rank within its key, and the scores' dense descending ranks.
    """
    uniq, rank = torch.unique(scores, return_inverse=True)
    desc = len(uniq) - 1 - rank
    order = torch.sort(keys * len(uniq) + desc, stable=True).indices
    keys = keys[order]
    idx = torch.arange(len(keys), device=keys.device)
    new = torch.ones_like(keys, dtype=torch.bool)
    new[1:] = keys.diff() != 0
    return order, keys, idx - torch.cummax(torch.where(new, idx, 0), 0).values, desc


def _pairs(scores: Tensor, d_key: Tensor, g_key: Tensor, pair_ious: Callable, max_det: int) -> tuple[Tensor, ...]:
    """Detections per key by descending score, capped, and their pairs with the key's ground truths.

    Returns the kept detections' order, rank within their key and dense descending score rank (per input entry), and
    the pairs, detection-major with ground truths in input order: detection position in the order, ground truth, IoU.
    """
    order, d_key, d_rank, desc = _group_sort(scores, d_key)
    keep = d_rank < max_det
    order, d_key, d_rank = order[keep], d_key[keep], d_rank[keep]
    g_order = torch.sort(g_key, stable=True).indices
    g_first = torch.searchsorted(g_key[g_order], d_key)
    g_count = torch.searchsorted(g_key[g_order], d_key, right=True) - g_first
    pair_d = torch.arange(len(order), device=scores.device).repeat_interleave(g_count)
    local = torch.arange(len(pair_d), device=scores.device) - _starts(g_count).repeat_interleave(g_count)
    pair_g = g_order[g_first[pair_d] + local]
    return order, d_rank, desc, pair_d, pair_g, pair_ious(order[pair_d], pair_g)


def _need(npig: Tensor, rec_thr: Tensor) -> Tensor:
    """Per recall point, the least ``n`` with ``n / npig >= thr`` in float64, as pycocotools' ``rc`` compares."""
    npig, rec_thr = npig.double(), rec_thr.view(-1, *(1,) * npig.dim())
    n0 = torch.ceil(rec_thr * npig).clamp(min=0)
    lower = (n0 >= 1) & ((n0 - 1) / npig >= rec_thr)
    return torch.where(lower, n0 - 1, torch.where(n0 / npig >= rec_thr, n0, n0 + 1)).long()


def _suffix_max(values: Tensor, seg: Tensor, num_seg: int) -> Tensor:
    """Exact right-to-left running max within sorted segments: an int64 key ``segment, value rank`` and cummax."""
    uniq, rank = torch.unique(values, return_inverse=True)
    key = (num_seg - 1 - seg).flip(0) * (len(uniq) + 1) + rank.flip(0)
    return uniq[(torch.cummax(key, 0).values % (len(uniq) + 1)).flip(0)]


def coco_evaluate(
    t: Tables, iou_thresholds: Sequence[float], rec_thresholds: Sequence[float], max_dets: Sequence[int], backend: str
) -> CocoEvaluation:
    """COCOeval's ``evaluate()`` + ``accumulate()`` over all images and classes at once (``max_dets`` ascending).

    ``backend="faster_coco_eval"``: precision without ``np.spacing(1)``; a recall point out of reach does not zero the
    later ones.

    Example:
        >>> f, one, area = torch.float64, torch.tensor([1]), torch.tensor([100.0], dtype=torch.float64)
        >>> t = Tables(torch.tensor([0.9], dtype=f), one, one, area, one, one, area, torch.tensor([False]),
        ...     lambda d, g: torch.full(d.shape, 0.8, dtype=f), one)
        >>> coco_evaluate(t, [0.5, 0.75], [0.0, 1.0], [1, 10, 100], "pycocotools").recall[:, 0, 0, 2].tolist()
        [1.0, 1.0]
    """
    if backend not in _BACKENDS:
        raise ValueError(f"Expected backend in {_BACKENDS}, got {backend!r}")
    dev, f64, det_scores, D = t.det_scores.device, torch.float64, t.det_scores.double(), len(t.det_scores)
    T, A = len(iou_thresholds), len(AREA_RANGES)
    K, det_k, gt_k = (
        len(t.classes),
        torch.searchsorted(t.classes, t.det_labels),
        torch.searchsorted(t.classes, t.gt_labels),
    )
    lo, hi = torch.tensor(AREA_RANGES, dtype=f64, device=dev).T
    # detections per (image, class) by descending score capped at max_dets[-1]; ground truths in input order
    keys = t.det_images * K + det_k, t.gt_images * K + gt_k
    order, d_rank, desc, pair_d, pair_g, iou = _pairs(det_scores, *keys, t.pair_ious, max_dets[-1])
    d_k, d_score = det_k[order], det_scores[order]
    # accumulate's order: class, descending score, then image and rank (each image's list concatenated in order)
    acc = torch.sort(d_k * D + desc[order], stable=True).indices
    pos = torch.empty_like(acc)
    pos[acc] = torch.arange(len(acc), device=dev)
    g_area = t.gt_areas[:, None]
    g_ign = t.gt_crowds[:, None] | (g_area < lo) | (g_area > hi)  # [G, A] crowd or out of range
    # candidate pairs: IoU reaching the lowest threshold, by detection rank
    thr = torch.tensor(iou_thresholds, dtype=f64, device=dev).clamp(max=1 - 1e-10)
    hit = iou >= thr.min() if T else torch.zeros_like(iou, dtype=torch.bool)
    pair_d, pair_g, iou = pair_d[hit], pair_g[hit], iou[hit]
    by_rank = torch.sort(d_rank[pair_d], stable=True).indices
    pair_d, pair_g, iou = pair_d[by_rank], pair_g[by_rank], iou[by_rank]
    events = _match(pos[pair_d], d_rank[pair_d], pair_g, iou, t.gt_crowds, g_ign, thr, max_dets[-1])
    # accumulate, per maxDet: detections in accumulate's order
    p_rank, p_score, p_k = d_rank[acc], d_score[acc], d_k[acc]
    p_area = t.det_areas[order][acc][:, None]
    p_out = (p_area < lo) | (p_area > hi)  # [D, A]
    npig = torch.zeros(K, A, dtype=torch.long, device=dev).index_add_(0, gt_k, (~g_ign).long())
    need = _need(npig, torch.tensor(rec_thresholds, dtype=f64, device=dev))[None]  # [1, R, K, A]
    fill = ((npig > 0).double() - 1).expand(T, 1, K, A)  # -1 for a class without ground truth (it has no point)
    curves = [_curves(events, p_rank < m, p_score, p_k, p_out, need, fill, backend) for m in max_dets]
    precision, scores = (torch.stack([c[i] for c in curves], -1) for i in (0, 1))
    recall = torch.stack([torch.where(npig > 0, tot[:, 0].double() / npig, -1.0) for *_, tot in curves], -1)
    return CocoEvaluation(precision, recall, scores)


def _match(
    pos: Tensor, rank: Tensor, gt: Tensor, iou: Tensor, crowd: Tensor, ign: Tensor, thr: Tensor, n_steps: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Pycocotools' greedy matching: the matched detections as ``(t, a, position, code)`` by ``(t, a, position)``.

    Pairs by detection rank (a detection's contiguous): position in accumulate's order, rank, ground truth, IoU.
    ``code`` 1: true positive, 2: matched an ignored ground truth. Per rank, each (image, class) matches its next
    detection at once; the best candidate is the max of an int64 key (non-ignored first, then IoU rank, then the
    later ground truth): exactly pycocotools' loop with its `break`.
    """
    dev, (T, A, G) = iou.device, (len(thr), ign.shape[1], len(crowd))
    new_det = torch.ones_like(pos, dtype=torch.bool)
    new_det[1:] = pos.diff() != 0
    n_before = torch.cat([pos.new_zeros(1), torch.cumsum(new_det, 0)])  # distinct detections before each pair
    bounds = torch.searchsorted(rank, torch.arange(n_steps + 1, device=dev))
    bounds_h, slot0_h = torch.stack([bounds, n_before[bounds]]).tolist()
    uniq_iou, iou_rank = torch.unique(iou, return_inverse=True)
    span = (len(uniq_iou) + 1) * (G + 1)
    # a detection's candidates share an (image, class): the larger index is the later ground truth
    pair_key = (~ign[gt]).long() * span + (iou_rank * (G + 1) + gt)[:, None]  # [P, A]
    det_pos, o = torch.sort(pos[new_det])
    codes = torch.zeros(len(det_pos), T, A, dtype=torch.int8, device=dev)
    matched = torch.zeros(G + 1, T, A, dtype=torch.bool, device=dev)  # row G: sink for "no match"
    tt, aa = torch.arange(T, device=dev)[:, None], torch.arange(A, device=dev)
    for r in range(n_steps):
        (b0, b1), (s0, s1) = bounds_h[r : r + 2], slot0_h[r : r + 2]
        if b0 == b1:
            continue
        pg, slot = gt[b0:b1], n_before[b0 + 1 : b1 + 1] - 1 - s0
        free = crowd[pg][:, None, None] | ~matched[pg]  # crowds match again and again
        key = torch.where((iou[b0:b1, None] >= thr)[:, :, None] & free, pair_key[b0:b1, None, :], -1)
        best = torch.full((s1 - s0, T, A), -1, dtype=torch.long, device=dev)
        best.scatter_reduce_(0, slot[:, None, None].expand_as(key), key, "amax")
        found = best >= 0
        matched[torch.where(found, best % (G + 1), G), tt, aa] = True
        codes[s0:s1] = torch.where(found, 2 - best // span, 0)
    t, a, j = torch.nonzero(codes[o].permute(1, 2, 0), as_tuple=True)
    return t, a, det_pos[j], codes[o][j, t, a]


def _curves(
    events: tuple, valid: Tensor, p_score: Tensor, p_k: Tensor, p_out: Tensor, need: Tensor, fill: Tensor, backend: str
) -> tuple[Tensor, Tensor, Tensor]:
    """One maxDet's precision and score per recall point ``[T, R, K, A]`` (``fill`` out of reach), TPs ``[T, 1, K, A]``.

    Only the true positives' precisions matter: the n-th one's is ``n / (n + fp + eps)`` with ``fp`` the unmatched
    in-range detections before it, the envelope is its running max from the right, and recall point ``r`` lands on
    the ``need[r]``-th true positive (the first detection when ``need`` is 0). ``events``: matched detections as
    ``(t, a, position, code)`` sorted by ``(t, a, position)``; ``valid``: the positions within this maxDet.
    """
    (T, _, K, A), D, zero = fill.shape, len(valid), p_score.new_zeros(1)
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
    count = torch.bincount(seg, minlength=T * A * K)
    tot, first = (x.view(T, A, K).transpose(1, 2)[:, None] for x in (count, _starts(count)))  # [T, 1, K, A]
    idx = (first + (need - 1).clamp(min=0)).clamp_(max=len(env) - 1)  # [T, R, K, A]
    has_det = torch.bincount(p_k[valid], minlength=K).view(1, 1, K, 1) > 0
    # pycocotools' loop stops at the first recall point out of reach: a point needs as many as any point before it
    bar = torch.cummax(need, 1).values if backend == "pycocotools" else need
    reach = (bar <= tot) & ((need > 0) | has_det)
    s0 = torch.cat([p_score, zero])[k_start.clamp(max=D)].view(1, 1, K, 1)  # first detection of the class
    s = torch.where(need > 0, torch.cat([tp_score, zero])[idx], s0)
    return torch.where(reach & (tot > 0), env[idx], fill), torch.where(reach, s, fill), tot


def summarize(
    ev: CocoEvaluation, iou_thresholds: Sequence[float], max_dets: Sequence[int], backend: str, per_class: bool = False
) -> Tensor:
    """``COCOeval.stats`` ``[12]`` float64, or ``[12, K]`` ``per_class`` (COCOeval evaluates every class alone).

    map, map@.5, map@.75, map small/medium/large, mar@max_dets[0..2], mar small/medium/large. pycocotools' map is at
    ``max_dets == 100`` (-1 without), faster-coco-eval's at ``max_dets[-1]``; map@.5 / map@.75 are -1 without
    those thresholds.

    Example:
        >>> ones = torch.ones
        >>> ev = CocoEvaluation(ones(1, 2, 1, 4, 3), ones(1, 1, 4, 3), ones(1, 2, 1, 4, 3))
        >>> summarize(ev, [0.5], [1, 10, 50], "pycocotools")[:3].tolist()
        [-1.0, 1.0, -1.0]
    """
    if backend not in _BACKENDS:
        raise ValueError(f"Expected backend in {_BACKENDS}, got {backend!r}")
    thr = torch.tensor(iou_thresholds, dtype=torch.float64, device=ev.precision.device)

    def mean(s: Tensor, keep: Tensor | bool = True) -> Tensor:  # mean(s[s > -1]) over the kept entries, or -1
        keep = (s > -1) & keep
        dims = tuple(range(s.dim() - per_class))
        count = keep.sum(dims)
        return torch.where(count > 0, torch.where(keep, s, 0.0).sum(dims) / count.clamp(min=1), -1.0)

    def ap(a: int, m: int | None, iou: float | None = None) -> Tensor:
        s = ev.precision[..., a, 0 if m is None else m]  # [T, R, K]
        out = mean(s, True if iou is None else (thr == iou)[:, None, None])  # np.where(iouThr == p.iouThrs)
        return torch.full_like(out, -1.0) if m is None else out

    # pycocotools' map looks for maxDets == 100 (-1 when absent); faster-coco-eval's map takes max_dets[-1]
    fast = backend == "faster_coco_eval"
    first = len(max_dets) - 1 if fast else next((i for i, m in enumerate(max_dets) if m == 100), None)
    aps = [ap(0, first), ap(0, 2, 0.5), ap(0, 2, 0.75), ap(1, 2), ap(2, 2), ap(3, 2)]
    ars = [mean(ev.recall[..., a, m]) for a, m in ((0, 0), (0, 1), (0, 2), (1, 2), (2, 2), (3, 2))]
    return torch.stack([*aps, *ars])


def ious_by_image_class(t: Tables, num_images: int, max_det: int) -> dict[tuple[int, int], Tensor | list]:
    """``COCOeval.ious`` as torchmetrics returns it: ``{(image, class): float32 [dets, gts] or []}``.

    Detections in descending score order (stable) capped at ``max_det``, ground truths in input order; ``[]`` where
    the image has no detection or no ground truth of the class.

    Example:
        >>> ious, one, zero = torch.tensor([0.25, 0.75], dtype=torch.float64), torch.tensor([1]), torch.tensor([0])
        >>> t = Tables(torch.tensor([0.5, 0.9]), one.repeat(2), zero.repeat(2), None, one, zero, None, None,
        ...     lambda d, g: ious[d], one)
        >>> ious_by_image_class(t, 1, 100)[(0, 1)].tolist()
        [[0.75], [0.25]]
    """
    K = len(t.classes)
    d_key = t.det_images * K + torch.searchsorted(t.classes, t.det_labels)
    g_key = t.gt_images * K + torch.searchsorted(t.classes, t.gt_labels)
    order, *_, iou = _pairs(t.det_scores, d_key, g_key, t.pair_ious, max_det)
    sizes = torch.stack([torch.bincount(k, minlength=num_images * K) for k in (d_key[order], g_key)]).T.tolist()
    keys = [(i, c) for i in range(num_images) for c in t.classes.tolist()]
    blocks = torch.split(iou.float(), [d * g for d, g in sizes])
    return {key: block.view(d, g) if d and g else [] for key, (d, g), block in zip(keys, sizes, blocks, strict=True)}
