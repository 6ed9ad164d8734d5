"""CUDA-only tests (``pytest -m cuda tests/cuda``): every test here is marked ``cuda`` and skipped without a GPU.

``scripts/gpu-check`` runs them on a GPU machine and puts the outcome in its report. They are never needed for the
normal suite to pass: without CUDA they are skipped at collection, before any CUDA call.
"""

import pytest
import torch

from tests.cuda._helpers import cycles_per_ms


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> torch.device:
    torch.ones(1, device="cuda")  # CUDA's lazy init happens here, outside the checked regions
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="session")
def cycles() -> float:
    """GPU clock cycles per millisecond, for ``torch.cuda._sleep``."""
    return cycles_per_ms()
