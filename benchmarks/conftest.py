"""pytest-benchmark hooks for ``benchmarks/``: record what ``benchmarks/report.py`` prints in its header.

The JSON written by ``--benchmark-json`` gets, in ``machine_info``, the platform string, the CPU count, torch's
intra-op thread count and the torch / torchmetrics / torchmetrics-async versions, and at the top level the pytest
``command`` that produced it. Nothing here changes what is timed.
"""

import os
import platform
import shlex
from importlib import metadata
from typing import Any

import pytest
import torch
import torchmetrics


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    machine_info["platform"] = platform.platform()
    machine_info["cpu_count"] = os.cpu_count()
    machine_info["torch_num_threads"] = torch.get_num_threads()
    machine_info["torch"] = torch.__version__
    machine_info["torchmetrics"] = torchmetrics.__version__
    machine_info["torchmetrics_async"] = _version("torchmetrics-async")


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict[str, Any]) -> None:
    output_json["command"] = shlex.join(["python", "-m", "pytest", *config.invocation_params.args])
