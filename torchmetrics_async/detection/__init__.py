"""Detection metrics: box kernels, the IoU family and mean average precision, computed on the states' device."""

from torchmetrics_async.detection.mean_ap import MeanAveragePrecision

__all__ = ["MeanAveragePrecision"]
