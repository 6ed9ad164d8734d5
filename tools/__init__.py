"""Developer tools of torchmetrics-async (not in the wheel): the differential fuzzer (``python -m tools.fuzz``)."""
