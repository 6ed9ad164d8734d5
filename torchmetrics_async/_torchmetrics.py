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


__all__ = [
    "ALREADY_SYNCED_MESSAGE",
    "DEVICE_MISMATCH_MARKER",
    "FORWARD_WHILE_SYNCED_MESSAGE",
    "NAN_ERROR_MESSAGE",
    "NAN_WARN_MESSAGE",
    "BaseAggregator",
    "Metric",
    "MetricCollection",
    "Running",
    "TorchMetricsUserError",
    "_squeeze_if_scalar",
    "device_mismatch_message",
    "dim_zero_cat",
    "dim_zero_max",
    "dim_zero_mean",
    "dim_zero_min",
    "dim_zero_sum",
    "gather_all_tensors",
    "jit_distributed_available",
    "rank_zero_warn",
]
