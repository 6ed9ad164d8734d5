"""Detection metrics: box kernels, the IoU family and mean average precision, computed on the states' device."""
