"""The pytest plugin that runs torchmetrics' own tests against the accelerated classes.

Load it with ``-p tools.conformance_plugin`` (the repository root on ``PYTHONPATH``; :mod:`tools.conformance` does
both): it calls :func:`torchmetrics_async.patch` before pytest imports any conftest or test module, so every
``from torchmetrics... import X`` in the upstream tests gets the accelerated class. ``--tm-async=off`` (or
``TORCHMETRICS_ASYNC_CONFORMANCE=off``) runs the same invocation on plain torchmetrics (the baseline).
``--tm-async-report=PATH`` writes each test's outcome as JSON; ``--tm-async-sample=K`` keeps a fixed sample of about
``1/K`` of each test function's parametrizations.

This module imports neither torch nor torchmetrics at import time.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "ENV_MODE",
    "FAILING",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_load_initial_conftests",
    "pytest_report_header",
    "sample",
]

ENV_MODE = "TORCHMETRICS_ASYNC_CONFORMANCE"
"""Environment variable choosing the mode when ``--tm-async`` is not given: ``patch`` (default) or ``off``."""

FAILING = frozenset({"failed", "error"})
"""Outcomes that count as a failure."""


def pytest_addoption(parser: Any) -> None:
    """Add ``--tm-async``, ``--tm-async-report`` and ``--tm-async-sample``.

    Args:
        parser: pytest's option parser.
    """
    group = parser.getgroup("torchmetrics-async conformance")
    group.addoption(
        "--tm-async",
        choices=("patch", "off"),
        default=None,
        help=f"patch: run under torchmetrics_async.patch() (default; env {ENV_MODE}); off: plain torchmetrics.",
    )
    group.addoption("--tm-async-report", default=None, metavar="PATH", help="write each test's outcome as JSON.")
    group.addoption(
        "--tm-async-sample",
        type=int,
        default=1,
        metavar="K",
        help="keep about 1/K of each test function's parametrizations (a fixed sample, at least one each).",
    )


def _mode(option: Any) -> str:
    mode = getattr(option, "tm_async", None) or os.environ.get(ENV_MODE, "patch")
    if mode not in ("patch", "off"):
        raise ValueError(f"{ENV_MODE} must be 'patch' or 'off', got {mode!r}")
    return mode


def pytest_load_initial_conftests(early_config: Any, parser: Any, args: list[str]) -> None:
    """Call ``torchmetrics_async.patch()`` before any conftest or test module is imported (unless ``off``).

    Args:
        early_config: pytest's config, options parsed so far.
        parser: pytest's option parser.
        args: the command-line arguments.
    """
    if _mode(early_config.known_args_namespace) == "patch":
        import torchmetrics_async

        torchmetrics_async.patch()


def pytest_report_header(config: Any) -> str:
    """Say which torchmetrics the session tests.

    Args:
        config: pytest's config.

    Returns:
        One header line.
    """
    import torchmetrics_async

    state = "patched" if torchmetrics_async.is_patched() else "plain (baseline)"
    return f"torchmetrics-async conformance: torchmetrics is {state}"


def pytest_configure(config: Any) -> None:
    """Register the outcome recorder when ``--tm-async-report`` is given.

    Args:
        config: pytest's config.
    """
    path = config.getoption("tm_async_report")
    if path:
        config.pluginmanager.register(_Recorder(Path(path)), "tm-async-recorder")


def sample(nodeids: Sequence[str], k: int) -> list[str]:
    """A fixed sample of about ``1/k`` of each test function's parametrizations, at least one per function.

    An id is kept when the CRC-32 of its text is divisible by ``k`` (the same ids on every run and machine, spread
    over all parameters rather than strided along the last one); a function none of whose ids qualifies keeps its
    first one.

    Args:
        nodeids: the collected test ids, in collection order.
        k: keep one in about ``k``; 1 keeps all.

    Returns:
        The kept ids, in collection order.

    Example:
        >>> ids = [f"t.py::test_a[{i}]" for i in range(100)] + ["t.py::test_b[x]", "t.py::test_c"]
        >>> kept = sample(ids, 4)
        >>> 10 < sum(i.startswith("t.py::test_a") for i in kept) < 40, kept[-2:]
        (True, ['t.py::test_b[x]', 't.py::test_c'])
    """
    if k <= 1:
        return list(nodeids)
    kept = {n for n in nodeids if zlib.crc32(n.encode()) % k == 0}
    functions_kept = {n.split("[", 1)[0] for n in kept}
    for nodeid in nodeids:
        function = nodeid.split("[", 1)[0]
        if function not in functions_kept:
            kept.add(nodeid)
            functions_kept.add(function)
    return [n for n in nodeids if n in kept]


@pytest.hookimpl(trylast=True)  # after -m/-k deselection, so every function keeps a test that runs
def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Apply ``--tm-async-sample``.

    Args:
        config: pytest's config.
        items: the collected tests; changed in place.
    """
    k = config.getoption("tm_async_sample")
    if k <= 1:
        return
    kept = set(sample([item.nodeid for item in items], k))
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in kept])
    items[:] = [item for item in items if item.nodeid in kept]


class _Recorder:
    """Collects one outcome (and the first failure's message) per test id; written at session end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.outcomes: dict[str, str] = {}
        self.messages: dict[str, str] = {}

    def _set(self, nodeid: str, outcome: str, report: Any) -> None:
        if self.outcomes.get(nodeid) in FAILING:  # the first failure wins (a teardown error after a failed call)
            return
        self.outcomes[nodeid] = outcome
        if outcome in FAILING:
            self.messages[nodeid] = _message(report)

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed:
            self._set(report.nodeid, "failed" if report.when == "call" else "error", report)
        elif report.when == "call" or (report.when == "setup" and report.skipped):
            outcome = report.outcome
            if hasattr(report, "wasxfail"):
                outcome = "xfailed" if report.skipped else "xpassed"
            self._set(report.nodeid, outcome, report)

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self._set(report.nodeid, "error", report)

    def pytest_sessionfinish(self, session: Any) -> None:
        self.path.write_text(json.dumps({"outcomes": self.outcomes, "messages": self.messages}, indent=1))


def _message(report: Any) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message).strip()
    text = str(getattr(report, "longreprtext", "") or "").strip()
    return text.splitlines()[-1] if text else ""
