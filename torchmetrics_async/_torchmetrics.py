"""The one seam to torchmetrics internals.

Everything torchmetrics-async needs from torchmetrics beyond its public classes is imported or restated here, so a
torchmetrics upgrade breaks one place. ``tests/test_torchmetrics_seam.py`` checks every name and every restated
message against the installed torchmetrics.

Example:
    >>> from torchmetrics_async._torchmetrics import NAN_ERROR_MESSAGE
    >>> NAN_ERROR_MESSAGE
    'Encountered `nan` values in tensor'
"""

from torchmetrics.aggregation import BaseAggregator
from torchmetrics.collections import MetricCollection
from torchmetrics.metric import Metric, jit_distributed_available
from torchmetrics.utilities import rank_zero_warn
from torchmetrics.utilities.checks import _check_same_shape
from torchmetrics.utilities.data import (
    _squeeze_if_scalar,
    dim_zero_cat,
    dim_zero_max,
    dim_zero_mean,
    dim_zero_min,
    dim_zero_sum,
)
from torchmetrics.utilities.distributed import gather_all_tensors
from torchmetrics.utilities.exceptions import TorchMetricsUserError
from torchmetrics.wrappers.running import Running

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
    """Return the message torchmetrics raises when an update mixes devices.

    Args:
        class_name: the metric's class name.

    Returns:
        The message, as ``Metric._wrap_update`` words it.

    Example:
        >>> device_mismatch_message("MeanMetric").startswith("Encountered different devices")
        True
    """
    return (
        "Encountered different devices in metric calculation (see stacktrace for details)."
        " This could be due to the metric class not being on the same device as input."
        f" Instead of `metric={class_name}(...)` try to do"
        f" `metric={class_name}(...).to(device)` where"
        " device corresponds to the device of the input."
    )


# Restated from torchmetrics.functional.classification.stat_scores (binary/multilabel tensor validation): the shape
# checks, which stay eager (ValueError) because they read only metadata.
BINARY_SAMPLEWISE_NDIM_MESSAGE = "Expected input to be at least 2D when multidim_average is set to `samplewise`"
MULTILABEL_SAMPLEWISE_NDIM_MESSAGE = "Expected input to be at least 3D when multidim_average is set to `samplewise`"


def num_labels_mismatch_message(got: int, expected: int) -> str:
    """Return the message torchmetrics raises (``ValueError``) when ``preds.shape[1]`` is not ``num_labels``.

    Args:
        got: ``preds.shape[1]``.
        expected: ``num_labels``.

    Returns:
        The message, as the multilabel tensor validations word it.

    Example:
        >>> num_labels_mismatch_message(2, 3).endswith("but got 2 and expected 3")
        True
    """
    return (
        "Expected both `target.shape[1]` and `preds.shape[1]` to be equal to the number of labels"
        f" but got {got} and expected {expected}"
    )


def binary_target_values_message(ignore_index: int | None) -> str:
    """The binary/multilabel "target values" error, deferred to ``compute()``.

    torchmetrics lists the target's unique values (a host read in ``update``); this names the allowed set instead and
    keeps the rest of its wording, including the ``expected only`` list it prints (``[ignore_index]`` when one is set).

    Args:
        ignore_index: the metric's ``ignore_index``.

    Returns:
        The message.

    Example:
        >>> binary_target_values_message(None).split(": ")[1]
        'values outside {0, 1} but expected only the following values [0, 1].'
    """
    allowed = "{0, 1}" if ignore_index is None else f"{{0, 1, {ignore_index}}}"
    expected = [0, 1] if ignore_index is None else [ignore_index]
    return (
        f"Detected the following values in `target`: values outside {allowed} but expected only"
        f" the following values {expected}."
    )


def label_preds_values_message(quoted: bool) -> str:
    """The "integer ``preds`` not in {0, 1}" error, deferred to ``compute()``; the unique values replaced as above.

    Args:
        quoted: whether the name is in backticks (torchmetrics' binary stat scores) or not (everywhere else).

    Returns:
        The message.

    Example:
        >>> label_preds_values_message(quoted=False).endswith("since preds is a label tensor.")
        True
    """
    name = "`preds`" if quoted else "preds"
    return (
        "Detected the following values in `preds`: values outside {0, 1} but expected only"
        f" the following values [0,1] since {name} is a label tensor."
    )


__all__ = [
    "ALREADY_SYNCED_MESSAGE",
    "BINARY_SAMPLEWISE_NDIM_MESSAGE",
    "DEVICE_MISMATCH_MARKER",
    "FORWARD_WHILE_SYNCED_MESSAGE",
    "MULTILABEL_SAMPLEWISE_NDIM_MESSAGE",
    "NAN_ERROR_MESSAGE",
    "NAN_WARN_MESSAGE",
    "BaseAggregator",
    "Metric",
    "MetricCollection",
    "Running",
    "TorchMetricsUserError",
    "_check_same_shape",
    "_squeeze_if_scalar",
    "binary_target_values_message",
    "device_mismatch_message",
    "dim_zero_cat",
    "dim_zero_max",
    "dim_zero_mean",
    "dim_zero_min",
    "dim_zero_sum",
    "gather_all_tensors",
    "jit_distributed_available",
    "label_preds_values_message",
    "num_labels_mismatch_message",
    "rank_zero_warn",
]
