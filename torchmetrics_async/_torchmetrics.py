"""The one seam to torchmetrics internals.

Everything torchmetrics-async needs from torchmetrics beyond its public classes is imported (and re-exported: F401 is
off for this module) or restated here, so a torchmetrics upgrade breaks one place (the seam tests check each).
"""

from lightning_utilities import apply_to_collection
from torch import Tensor
from torchmetrics.aggregation import BaseAggregator
from torchmetrics.collections import MetricCollection
from torchmetrics.detection.helpers import (
    CocoBackend,
    _fix_empty_tensors,
    _input_validator,
    _validate_iou_type_arg,
    _warning_on_too_many_detections,
)
from torchmetrics.detection.mean_ap import MeanAveragePrecision as TorchmetricsMeanAveragePrecision
from torchmetrics.functional.classification.accuracy import _accuracy_reduce
from torchmetrics.functional.classification.auroc import _binary_auroc_compute, _reduce_auroc
from torchmetrics.functional.classification.average_precision import (
    _binary_average_precision_compute,
    _reduce_average_precision,
)
from torchmetrics.functional.classification.calibration_error import _ce_compute
from torchmetrics.functional.classification.cohen_kappa import _cohen_kappa_reduce
from torchmetrics.functional.classification.confusion_matrix import (
    _confusion_matrix_reduce,
    _multiclass_confusion_matrix_format,
)
from torchmetrics.functional.classification.f_beta import _fbeta_reduce
from torchmetrics.functional.classification.hamming import _hamming_distance_reduce
from torchmetrics.functional.classification.jaccard import _jaccard_index_reduce
from torchmetrics.functional.classification.logauc import _reduce_logauc
from torchmetrics.functional.classification.negative_predictive_value import _negative_predictive_value_reduce
from torchmetrics.functional.classification.precision_recall import _precision_recall_reduce
from torchmetrics.functional.classification.precision_recall_curve import (
    _binary_precision_recall_curve_compute,
    _multiclass_precision_recall_curve_compute,
    _multilabel_precision_recall_curve_compute,
)
from torchmetrics.functional.classification.roc import (
    _binary_roc_compute,
    _multiclass_roc_compute,
    _multilabel_roc_compute,
)
from torchmetrics.functional.classification.specificity import _specificity_reduce
from torchmetrics.functional.classification.stat_scores import (
    _multiclass_stat_scores_format,
    _multiclass_stat_scores_tensor_validation,
)
from torchmetrics.functional.clustering.utils import _validate_intrinsic_cluster_data, check_cluster_labels
from torchmetrics.functional.detection._panoptic_quality_common import _validate_inputs as _panoptic_validate_inputs
from torchmetrics.functional.image.rase import _rase_compute
from torchmetrics.functional.image.scc import _hp_2d_laplacian, _local_variance_covariance, _scc_update
from torchmetrics.functional.image.ssim import _get_normalized_sim_and_cs, _ssim_check_inputs, _ssim_update
from torchmetrics.functional.image.utils import _uniform_weight_bias_conv2d
from torchmetrics.functional.image.vif import _filter as _vif_filter
from torchmetrics.functional.regression.crps import _crps_update
from torchmetrics.functional.regression.csi import _critical_success_index_update
from torchmetrics.functional.regression.explained_variance import _explained_variance_update
from torchmetrics.functional.regression.log_cosh import _unsqueeze_tensors
from torchmetrics.functional.regression.log_mse import _mean_squared_log_error_update
from torchmetrics.functional.regression.mae import _mean_absolute_error_update
from torchmetrics.functional.regression.mape import _mean_absolute_percentage_error_update
from torchmetrics.functional.regression.minkowski import _minkowski_distance_update
from torchmetrics.functional.regression.mse import _mean_squared_error_update
from torchmetrics.functional.regression.pearson import _pearson_corrcoef_update
from torchmetrics.functional.regression.r2 import _r2_score_update
from torchmetrics.functional.regression.symmetric_mape import _symmetric_mean_absolute_percentage_error_update
from torchmetrics.functional.regression.utils import _check_data_shape_to_num_outputs
from torchmetrics.functional.regression.wmape import _weighted_mean_absolute_percentage_error_update
from torchmetrics.functional.segmentation.dice import _dice_score_compute, _dice_score_update
from torchmetrics.functional.segmentation.generalized_dice import _generalized_dice_compute
from torchmetrics.functional.segmentation.mean_iou import _mean_iou_reshape_args, _mean_iou_update
from torchmetrics.functional.segmentation.utils import _check_mixed_shape, _ignore_background
from torchmetrics.functional.text.perplexity import _check_shape_and_type_consistency
from torchmetrics.metric import CompositionalMetric, Metric, jit_distributed_available
from torchmetrics.regression.pearson import _final_aggregation
from torchmetrics.utilities import rank_zero_warn
from torchmetrics.utilities.checks import _check_same_shape
from torchmetrics.utilities.compute import _auc_compute_without_check, _safe_divide
from torchmetrics.utilities.data import (
    _squeeze_if_scalar,
    dim_zero_cat,
    dim_zero_max,
    dim_zero_mean,
    dim_zero_min,
    dim_zero_sum,
    interp,
)
from torchmetrics.utilities.distributed import gather_all_tensors
from torchmetrics.utilities.exceptions import TorchMetricsUserError
from torchmetrics.utilities.imports import _TORCHVISION_AVAILABLE
from torchmetrics.wrappers.abstract import WrapperMetric
from torchmetrics.wrappers.bootstrapping import BootStrapper, _bootstrap_sampler
from torchmetrics.wrappers.minmax import MinMaxMetric
from torchmetrics.wrappers.running import Running
from torchmetrics.wrappers.tracker import MetricTracker

from torchmetrics_async.errors import ShapeMismatchError

# The private torchmetrics names this package reads, sets or overrides (the seam tests check each, and no other).
METRIC_INTERNALS = frozenset(
    {
        "_cache",  # the local states kept while synced (sync/unsync)
        "_computed",  # compute()'s cached value
        "_defaults",  # add_state's defaults: the state registry
        "_device",
        "_enable_grad",
        "_filter_kwargs",
        "_forward_cache",
        "_is_synced",
        "_move_list_states_to_cpu",
        "_persistent",
        "_reduce_states",  # merge_state's fold, overridden
        "_reductions",  # add_state's dist_reduce_fx
        "_should_unsync",
        "_copy_state_dict",
        "_sync_dist",  # overridden: the fused sync
        "_to_sync",
        "_update_count",
        "_update_signature",
        "_wrap_compute",  # overridden
        "_wrap_update",  # overridden
    }
)
COLLECTION_INTERNALS = frozenset(
    {
        "_compute_groups_create_state_ref",
        "_enable_compute_groups",
        "_equal_metric_states",  # replaced by patch() (see torchmetrics_async.compute_groups)
        "_groups",
        "_groups_checked",
        "_state_is_copy",
    }
)
AGGREGATOR_INTERNALS = frozenset({"_cast_and_nan_check_input"})

#: torchmetrics' compute-group test (a staticmethod of MetricCollection), kept before patch() replaces it.
equal_metric_states = MetricCollection.__dict__["_equal_metric_states"].__func__

# Restated from torchmetrics.aggregation.BaseAggregator._cast_and_nan_check_input, which raises/warns them inline.
NAN_ERROR_MESSAGE = "Encountered `nan` values in tensor"
NAN_WARN_MESSAGE = "Encountered `nan` values in tensor. Will be removed."

# Restated from torchmetrics.metric.Metric.forward.
FORWARD_WHILE_SYNCED_MESSAGE = (
    "The Metric shouldn't be synced when performing ``forward``. HINT: Did you forget to call ``unsync`` ?."
)

# Restated from torchmetrics.metric.Metric.sync, which raises it when a synced metric is synced again.
ALREADY_SYNCED_MESSAGE = "The Metric has already been synced."

# Restated from torchmetrics.metric.Metric._wrap_update: the hint it gives when inputs sit on another device.
DEVICE_MISMATCH_MARKER = "Expected all tensors to be on"


def device_mismatch_message(class_name: str) -> str:
    """Return the message torchmetrics raises when an update mixes devices."""
    return (
        "Encountered different devices in metric calculation (see stacktrace for details)."
        " This could be due to the metric class not being on the same device as input."
        f" Instead of `metric={class_name}(...)` try to do"
        f" `metric={class_name}(...).to(device)` where"
        " device corresponds to the device of the input."
    )


# Restated from torchmetrics' binary/multilabel stat_scores validation: shape checks stay eager (metadata only).
BINARY_SAMPLEWISE_NDIM_MESSAGE = "Expected input to be at least 2D when multidim_average is set to `samplewise`"
MULTILABEL_SAMPLEWISE_NDIM_MESSAGE = "Expected input to be at least 3D when multidim_average is set to `samplewise`"


def num_labels_mismatch_message(got: int, expected: int) -> str:
    """Return the message torchmetrics raises (``ValueError``) when ``preds.shape[1]`` is not ``num_labels``."""
    return (
        "Expected both `target.shape[1]` and `preds.shape[1]` to be equal to the number of labels"
        f" but got {got} and expected {expected}"
    )


def binary_target_values_message(ignore_index: int | None) -> str:
    """The binary/multilabel "target values" error, deferred to ``compute()``: the allowed set, not the values found.

    Example:
        >>> binary_target_values_message(1).split(": ")[1]
        'values outside {0, 1} but expected only the following values [1].'
    """
    allowed = "{0, 1}" if ignore_index in (None, 0, 1) else f"{{0, 1, {ignore_index}}}"  # not {0, 1, 0}
    expected = [0, 1] if ignore_index is None else [ignore_index]
    return (
        f"Detected the following values in `target`: values outside {allowed} but expected only"
        f" the following values {expected}."
    )


def label_preds_values_message(quoted: bool) -> str:
    """The "integer ``preds`` not in {0, 1}" error, deferred to ``compute()``; the unique values replaced as above."""
    name = "`preds`" if quoted else "preds"
    return (
        "Detected the following values in `preds`: values outside {0, 1} but expected only"
        f" the following values [0,1] since {name} is a label tensor."
    )


# Restated from torchmetrics' multiclass tensor validation: shape checks eager, value checks deferred (see below).
MULTICLASS_NUM_CLASSES_SHAPE_MESSAGE = (
    "If `preds` have one dimension more than `target`, `preds.shape[1]` should be equal to number of classes."
)


def multiclass_values_message(name: str, num_classes: int, ignore_index: int | None) -> str:
    """The multiclass "unique values" error, deferred to ``compute()``: the allowed range, not the values found.

    Example:
        >>> multiclass_values_message("target", 3, -1)
        'Detected more unique values in `target` than expected. Expected only values in {0, ..., 2} or the \
`ignore_index` -1 but found other values in `target`.'
    """
    allowed = "{0}" if num_classes == 1 else f"{{0, ..., {num_classes - 1}}}"
    if name == "target" and ignore_index is not None and not 0 <= ignore_index < num_classes:
        allowed += f" or the `ignore_index` {ignore_index}"
    where = " where `target` is not `ignore_index`" if name == "preds" and ignore_index is not None else ""
    return (
        f"Detected more unique values in `{name}` than expected. Expected only values in {allowed}{where} but found"
        f" other values in `{name}`."
    )


def confusion_matrix_nan_message(count: int) -> str:
    """Return the warning torchmetrics gives when normalizing a confusion matrix produced NaNs (set to zero)."""
    return f"{count} NaN values found in confusion matrix have been replaced with zeros."


def float_preds_message(dtype: object) -> str:
    """The error (``ValueError``) calibration error and hinge loss raise for ``preds`` that are not floating point."""
    return (
        f"Expected argument `preds` to be floating tensor with probabilities/logits but got tensor with dtype {dtype}"
    )


def check_same_shape(preds: Tensor, target: Tensor) -> None:
    """Torchmetrics' ``_check_same_shape``, raising :class:`~torchmetrics_async.errors.ShapeMismatchError` instead."""
    try:
        _check_same_shape(preds, target)
    except RuntimeError as err:
        raise ShapeMismatchError(*err.args) from None


def binary_curve_tensor_validation(preds: Tensor, target: Tensor) -> None:
    """Run torchmetrics' binary (and multilabel) curve tensor validation without its value check."""
    check_same_shape(preds, target)
    if target.is_floating_point():
        raise ValueError(
            "Expected argument `target` to be an int or long tensor with ground truth labels"
            f" but got tensor with dtype {target.dtype}"
        )
    if not preds.is_floating_point():
        raise ValueError(
            "Expected argument `preds` to be an floating tensor with probability/logit scores,"
            f" but got tensor with dtype {preds.dtype}"
        )


def multiclass_curve_tensor_validation(
    preds: Tensor, target: Tensor, num_classes: int, check_dtypes: bool = True
) -> None:
    """Run torchmetrics' multiclass curve tensor validation without its value check (same errors, same order)."""
    if not preds.ndim == target.ndim + 1:
        raise ValueError(
            f"Expected `preds` to have one more dimension than `target` but got {preds.ndim} and {target.ndim}"
        )
    if check_dtypes and target.is_floating_point():
        raise ValueError(
            f"Expected argument `target` to be an int or long tensor, but got tensor with dtype {target.dtype}"
        )
    if check_dtypes and not preds.is_floating_point():
        raise ValueError(f"Expected `preds` to be a float tensor, but got {preds.dtype}")
    if preds.shape[1] != num_classes:
        raise ValueError(
            "Expected `preds.shape[1]` to be equal to the number of classes but"
            f" got {preds.shape[1]} and {num_classes}."
        )
    if preds.shape[0] != target.shape[0] or preds.shape[2:] != target.shape[1:]:
        raise ValueError(
            "Expected the shape of `preds` should be (N, C, ...) and the shape of `target` should be (N, ...)"
            f" but got {preds.shape} and {target.shape}"
        )


def multiclass_curve_values_message(num_classes: int, ignore_index: int | None) -> str:
    """The multiclass curves' "unique target values" error, deferred to ``compute()``: "more", not how many.

    Example:
        >>> multiclass_curve_values_message(3, None)
        'Detected more unique values in `target` than `num_classes`. Expected only 3 but found more in `target`.'
    """
    allowed = num_classes if ignore_index is None else num_classes + 1
    return (
        "Detected more unique values in `target` than `num_classes`. Expected only"
        f" {allowed} but found more in `target`."
    )


# Restated from torch's one_hot, which the binned and micro multiclass curves call on targets (whatever validate_args).
ONE_HOT_NEGATIVE_MESSAGE = "Class values must be non-negative."
ONE_HOT_RANGE_MESSAGE = "Class values must be smaller than num_classes."


# Restated from torchmetrics.functional.regression.r2._r2_score_compute, which raises/warns them inline.
R2_TOO_FEW_SAMPLES_MESSAGE = "Needs at least two samples to calculate r2 score."
R2_ADJUSTED_TOO_LARGE_MESSAGE = (
    "More independent regressions than data points in adjusted r2 score. Falls back to standard r2 score."
)
R2_ADJUSTED_DIVISION_MESSAGE = "Division by zero in adjusted r2 score. Falls back to standard r2 score."
# Restated from _binary_logauc_compute (a warning) and _multilabel_ranking_tensor_validation (a ValueError).
LOGAUC_TOO_FEW_POINTS_MESSAGE = (
    "At least two values on for the fpr and tpr are required to compute the log AUC. Returns 0 score."
)
RANKING_FLOAT_PREDS_MESSAGE = "Expected preds tensor to be floating point, but received input with dtype {}"


def tweedie_domain_message(power: float) -> str | None:
    """The error ``_tweedie_deviance_score_update`` raises (``ValueError``) for inputs outside the power's domain."""
    if power == 0:
        return None
    if power == 1:
        return f"For power={power}, 'preds' has to be strictly positive and 'targets' cannot be negative."
    if power < 0:
        return f"For power={power}, 'preds' has to be strictly positive."
    if 1 < power < 2:
        return f"For power={power}, 'targets' has to be strictly positive and 'preds' cannot be negative."
    return f"For power={power}, both 'preds' and 'targets' have to be strictly positive."
