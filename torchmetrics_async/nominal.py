"""Sync-free nominal metrics: Cramér's V, Tschuprow's T, Pearson's contingency coefficient, Theil's U, Fleiss' kappa.

Tables are counted with ``index_add_`` (a row dropped for a NaN weighs 0), out-of-range categories are deferred
checks, and the statistics mask empty rows and columns. ``compute()`` reads one flag where torchmetrics' result
depends on one (bias-correction NaN and warning, Theil's integer 0), except under ``AsyncMetricCollector``.
"""

from collections.abc import Callable

import torch
import torchmetrics.nominal as tm
from torch import Tensor

from torchmetrics_async._torchmetrics import ONE_HOT_RANGE_MESSAGE, rank_zero_warn
from torchmetrics_async.batch_stats import BatchStats, SyncFreeBatchStats
from torchmetrics_async.classification.multiclass import contingency_table, merge_confmat_bins
from torchmetrics_async.deferred import DEFERRED_RAISE_OWNED
from torchmetrics_async.errors import ShapeMismatchError

__all__ = [
    "CramersV",
    "FleissKappa",
    "PearsonsContingencyCoefficient",
    "TheilsU",
    "TschuprowsT",
    "chi_squared",
    "contingency_bins",
    "contingency_table",
    "cramers_v",
    "fleiss_counts",
    "pearsons_contingency_coefficient",
    "theils_u",
    "tschuprows_t",
]

# Deferred-check state names and messages. A negative category makes torchmetrics' bincount fail with torch's message.
NEGATIVE_CATEGORY = "invalid_negative_category"
NEGATIVE_CATEGORY_MESSAGE = "bincount only supports 1-d non-negative integral inputs."
LARGE_CATEGORY = "invalid_large_category"


def large_category_message(num_classes: int) -> str:
    """The message for a category ``>= num_classes`` (torchmetrics' reshape error names a size only the data knows)."""
    return (
        f"Expected `preds` and `target` to hold categories in [0, {num_classes}) (`num_classes={num_classes}`), but"
        f" found a larger one: torchmetrics cannot reshape its counts to shape '[{num_classes}, {num_classes}]' then,"
        " or miscounts it."
    )


def contingency_bins(
    preds: Tensor, target: Tensor, num_classes: int, nan_strategy: str, nan_replace_value: float | None
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """Torchmetrics' nominal update as each entry's bin ``target * C + preds`` (clamped), its weight, the checks.

    Example:
        >>> preds = torch.tensor([0.0, float("nan")])
        >>> bins, weight, checks = contingency_bins(preds, torch.tensor([1, 1]), 2, "drop", None)
        >>> bins.tolist(), weight.tolist(), sorted(checks)
        ([2, 2], [True, False], ['invalid_large_category', 'invalid_negative_category'])
    """
    if preds.ndim in (1, 2) and target.ndim in (1, 2) and preds.shape[0] != target.shape[0]:
        _mismatch(preds, target)  # before the argmax: its dtype errors must not hide the batch-size mismatch
    preds = preds.argmax(1) if preds.ndim == 2 else preds
    target = target.argmax(1) if target.ndim == 2 else target
    if nan_strategy == "replace" and {preds.shape, target.shape} == {torch.Size(()), torch.Size((1,))}:
        preds, target = preds.reshape(1), target.reshape(1)  # one entry: torchmetrics broadcasts a 0-dim side
    if preds.shape != target.shape:
        _mismatch(preds, target)
    if nan_strategy == "replace":
        if preds.ndim != 1:
            raise RuntimeError(NEGATIVE_CATEGORY_MESSAGE)  # torchmetrics' bincount of a table that is not 1-D
        if preds.is_floating_point():
            preds = preds.nan_to_num(nan_replace_value)
        if target.is_floating_point():
            target = target.nan_to_num(nan_replace_value)
        keep = torch.ones((), dtype=torch.bool, device=preds.device).expand(preds.shape)
    else:  # torchmetrics' boolean-mask drop flattens: here every entry stays, a dropped one with weight 0
        keep = ~(preds.isnan() | target.isnan()).reshape(-1)
        preds, target = preds.reshape(-1), target.reshape(-1)
    preds, target = preds.long(), target.long()  # torchmetrics' .to(torch.long): floats truncated
    negative = ((preds < 0) | (target < 0)) & keep
    large = ((preds >= num_classes) | (target >= num_classes)) & keep
    bins = target.clamp(0, num_classes - 1) * num_classes + preds.clamp(0, num_classes - 1)
    return bins, keep, {NEGATIVE_CATEGORY: negative, LARGE_CATEGORY: large}


def _mismatch(preds: Tensor, target: Tensor) -> None:
    raise ShapeMismatchError(
        f"Expected `preds` and `target` to have the same number of entries, but got shapes {tuple(preds.shape)}"
        f" and {tuple(target.shape)} (2-D scores count as their argmax over dimension 1)."
    )


def chi_squared(confmat: Tensor, bias_correction: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Torchmetrics' ``_compute_chi_squared`` with empty rows and columns masked: chi-squared, total, rows, columns.

    Example:
        >>> table = torch.tensor([[2.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 2.0]])
        >>> chi, total, rows, cols = chi_squared(table, False)
        >>> round(float(chi), 4), float(total), int(rows), int(cols)
        (0.6667, 6.0, 2, 2)
    """
    rows, cols = confmat.sum(1), confmat.sum(0)
    total = confmat.sum()
    kept_rows, kept_cols = rows != 0, cols != 0
    num_rows, num_cols = kept_rows.sum(), kept_cols.sum()
    expected = torch.einsum("r, c -> rc", rows, cols) / total
    df = (num_rows - 1) * (num_cols - 1)
    if bias_correction:
        direction = (expected - confmat).sign()
        corrected = confmat + direction * torch.minimum(0.5 * torch.ones_like(direction), direction.abs())
        confmat = torch.where(df == 1, corrected, confmat)
    terms = torch.where(kept_rows[:, None] & kept_cols[None, :], (confmat - expected) ** 2 / expected, 0)
    return torch.where(df == 0, 0, terms.sum()), total, num_rows, num_cols


def _phi_statistic(confmat: Tensor, bias_correction: bool, scale: Callable) -> tuple[Tensor, Tensor | None]:
    """``sqrt(phi**2 / scale(rows - 1, cols - 1))``, bias-corrected as torchmetrics, and where correction failed."""
    chi, total, rows, cols = chi_squared(confmat, bias_correction)
    phi_squared = chi / total
    if not bias_correction:
        return (phi_squared / scale(rows - 1, cols - 1)).sqrt().clamp(0.0, 1.0), None
    # torchmetrics' _compute_bias_corrected_values; it cannot correct where min(rows, cols) becomes 1.
    phi_corrected = (phi_squared - (rows - 1) * (cols - 1) / (total - 1)).clamp(min=0.0)
    rows_corrected = rows - (rows - 1) ** 2 / (total - 1)
    cols_corrected = cols - (cols - 1) ** 2 / (total - 1)
    unable = torch.minimum(rows_corrected, cols_corrected) == 1
    value = (phi_corrected / scale(rows_corrected - 1, cols_corrected - 1)).sqrt().clamp(0.0, 1.0)
    return value.masked_fill(unable, float("nan")), unable


def cramers_v(confmat: Tensor, bias_correction: bool) -> tuple[Tensor, Tensor | None]:
    """Torchmetrics' ``_cramers_v_compute`` without a host read; also whether bias correction failed (value NaN).

    Example:
        >>> cramers_v(torch.tensor([[2.0, 1.0], [0.0, 3.0]]), False)
        (tensor(0.7071), None)
    """
    return _phi_statistic(confmat, bias_correction, torch.minimum)


def tschuprows_t(confmat: Tensor, bias_correction: bool) -> tuple[Tensor, Tensor | None]:
    """Torchmetrics' ``_tschuprows_t_compute`` without a host read; also whether bias correction failed (value NaN).

    Example:
        >>> tschuprows_t(torch.tensor([[2.0, 1.0], [0.0, 3.0]]), False)
        (tensor(0.7071), None)
    """
    return _phi_statistic(confmat, bias_correction, lambda rows, cols: (rows * cols).sqrt())


def pearsons_contingency_coefficient(confmat: Tensor) -> Tensor:
    """Torchmetrics' ``_pearsons_contingency_coefficient_compute`` without a host read.

    Example:
        >>> pearsons_contingency_coefficient(torch.tensor([[2.0, 1.0], [0.0, 3.0]]))
        tensor(0.5774)
    """
    chi, total, _, _ = chi_squared(confmat, False)
    phi_squared = chi / total
    return (phi_squared / (1 + phi_squared)).sqrt().clamp(0.0, 1.0)


def theils_u(confmat: Tensor) -> tuple[Tensor, Tensor]:
    """Torchmetrics' ``_theils_u_compute`` without a host read; also where ``preds`` has zero entropy (value 0.0).

    Example:
        >>> theils_u(torch.tensor([[2.0, 1.0], [0.0, 3.0]]))
        (tensor(0.5000), tensor(False))
    """
    rows, cols = confmat.sum(1), confmat.sum(0)
    total = confmat.sum()
    p_xy = confmat / total
    p_y = (rows / total).unsqueeze(1).expand_as(p_xy)
    conditional = torch.nansum(p_xy * torch.log(p_y / p_xy))
    p_x = cols / total
    entropy = -torch.sum(torch.where(cols != 0, p_x * torch.log(p_x), 0))
    zero = entropy == 0
    return torch.where(zero, 0, (entropy - conditional) / entropy), zero


class _SyncFreeNominal(SyncFreeBatchStats):
    """Tables and checks; ``_statistic`` gives the value, and the flag under which ``compute`` returns ``_flagged``."""

    _stat_states = ("confmat",)

    def _deferred_checks(self) -> dict[str, str]:
        return {NEGATIVE_CATEGORY: NEGATIVE_CATEGORY_MESSAGE, LARGE_CATEGORY: large_category_message(self.num_classes)}

    def _batch_stats(self, preds: Tensor, target: Tensor) -> BatchStats:
        bins, weight, violations = contingency_bins(
            preds, target, self.num_classes, self.nan_strategy, self.nan_replace_value
        )
        return BatchStats(((bins, weight),), violations)

    def _merge_stats(self, stats: BatchStats) -> None:
        merge_confmat_bins(self, stats)

    def _batch_value(self, stats: BatchStats) -> Tensor:
        ((bins, weight),), _ = stats
        # torchmetrics computes the batch value from a fresh state, of the state's dtype (set_dtype follows).
        return self._statistic(contingency_table(bins, weight, self.num_classes, self.confmat.dtype))[0]

    def compute(self) -> Tensor:
        """Raise deferred value errors, then the statistic as torchmetrics computes it (one flag read)."""
        self._raise_deferred_checks()
        value, flag = self._statistic(self.confmat)
        if flag is not None and not self.__dict__.get(DEFERRED_RAISE_OWNED, False) and bool(flag):
            return self._flagged(value)
        return value


class _BiasCorrected(_SyncFreeNominal):
    """Cramér's V and Tschuprow's T: torchmetrics warns, and returns a float32 NaN, where bias correction fails."""

    def _flagged(self, value: Tensor) -> Tensor:
        rank_zero_warn(
            f"Unable to compute {self._display_name} using bias correction. Please consider to set"
            " `bias_correction=False`.",
            UserWarning,
        )
        return torch.full((), float("nan"), device=value.device)


class CramersV(_BiasCorrected, tm.CramersV):
    """A degenerate batch's ``forward()`` value is NaN, without torchmetrics' bias-correction warning."""

    _display_name = "Cramer's V"

    def _statistic(self, confmat: Tensor) -> tuple[Tensor, Tensor | None]:
        return cramers_v(confmat, self.bias_correction)


class TschuprowsT(_BiasCorrected, tm.TschuprowsT):
    """A degenerate batch's ``forward()`` value is NaN, without torchmetrics' bias-correction warning."""

    _display_name = "Tschuprow's T"

    def _statistic(self, confmat: Tensor) -> tuple[Tensor, Tensor | None]:
        return tschuprows_t(confmat, self.bias_correction)


class PearsonsContingencyCoefficient(_SyncFreeNominal, tm.PearsonsContingencyCoefficient):
    """No host sync in ``update()``, ``forward()`` or ``compute()``."""

    def _statistic(self, confmat: Tensor) -> tuple[Tensor, Tensor | None]:
        return pearsons_contingency_coefficient(confmat), None


class TheilsU(_SyncFreeNominal, tm.TheilsU):
    """Where ``preds`` has zero entropy, ``forward()`` gives 0.0 in the state's dtype (``compute()``: int64 0)."""

    def _statistic(self, confmat: Tensor) -> tuple[Tensor, Tensor | None]:
        return theils_u(confmat)

    def _flagged(self, value: Tensor) -> Tensor:
        return torch.zeros((), dtype=torch.long, device=value.device)


# FleissKappa(mode="probs") one-hot encodes with num_classes = n_raters: torch's one_hot rejects a larger category.
RATER_CATEGORY = "invalid_rater_category"


def fleiss_counts(ratings: Tensor, mode: str) -> tuple[Tensor, dict[str, Tensor]]:
    """Torchmetrics' ``_fleiss_kappa_update`` without a host read, and the categories its one-hot encoding rejects.

    Example:
        >>> scores = torch.tensor([[[0.9, 0.1], [0.1, 0.9]]])  # 1 sample, 2 categories, 2 raters
        >>> counts, checks = fleiss_counts(scores, "probs")
        >>> counts.tolist(), bool(checks[RATER_CATEGORY].any())
        ([[1, 1]], False)
    """
    if mode == "probs":
        if ratings.ndim != 3 or not ratings.is_floating_point():
            raise ValueError(
                "If argument ``mode`` is 'probs', ratings must have 3 dimensions with the format"
                " [n_samples, n_categories, n_raters] and be floating point."
            )
        labels = ratings.argmax(dim=1)  # (n_samples, n_raters)
        classes = labels.shape[1]
        one_hot = labels.unsqueeze(-1) == torch.arange(classes, device=labels.device)
        return one_hot.long().sum(dim=1), {RATER_CATEGORY: labels >= classes}
    if mode == "counts" and (ratings.ndim != 2 or ratings.is_floating_point()):
        raise ValueError(
            "If argument ``mode`` is `counts`, ratings must have 2 dimensions with the format"
            " [n_samples, n_categories] and be none floating point."
        )
    return ratings, {}


class FleissKappa(SyncFreeBatchStats, tm.FleissKappa):
    """``mode="probs"`` one-hot encodes by comparison; a category ``one_hot`` rejects is raised by ``compute()``."""

    _stat_states = ("counts",)

    def _deferred_checks(self) -> dict[str, str]:
        return {RATER_CATEGORY: ONE_HOT_RANGE_MESSAGE} if self.mode == "probs" else {}

    def update(self, ratings: Tensor) -> None:
        """Accumulate a batch of ratings without a host sync."""
        self._merge_stats(self._batch_stats(ratings))

    def _batch_stats(self, ratings: Tensor) -> BatchStats:
        counts, violations = fleiss_counts(ratings, self.mode)
        return BatchStats((counts,), violations)
