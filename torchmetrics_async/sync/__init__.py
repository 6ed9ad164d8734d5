"""The fused sync engine, below the metric base; :mod:`torchmetrics_async.distributed` exports its public names."""
