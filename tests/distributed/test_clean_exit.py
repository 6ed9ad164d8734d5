"""Clean exits of 2-rank gloo runs (issue 14, point 5: "terminate called without an active exception", SIGABRT).

The cause (docs/exit-crash.md): gloo's worker threads still running when the interpreter
finalizes can abort the process, and ``destroy_process_group()`` stops them only if nothing else references the
group. This package used to import ``torch.distributed.checkpoint``, whose import chain reaches
``torch.distributed.nn.functional``, whose functions take ``group=group.WORLD`` as a default argument: imported after
``init_process_group()``, those defaults kept the group (and its threads) alive through ``destroy_process_group()``.
The abort itself is a race (rare when every work was waited), so these tests check its precondition, which is
deterministic: the threads a rank has left after ``destroy_process_group()``. Crash counts come from
``scripts/exit-crash-check --runs 50``.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest
import torch
from torch.distributed.checkpoint.stateful import Stateful

from torchmetrics_async import AsyncMetricCollector, MeanMetric
from torchmetrics_async.checkpoint import PerRankState

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "exit_crash_check.py")


def _check():
    spec = importlib.util.spec_from_file_location("exit_crash_check", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_check_sees_a_crash():
    # The check must be able to fail: a run whose rank exits non-zero is reported as a crash with its reason.
    check = _check()
    bad, why = check.run_once("no-such-variant")
    assert bad
    assert "exit 1" in why


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names are read from /proc (Linux)")
def test_destroy_process_group_stops_gloo_threads_with_the_package_imported_after_init():
    check = _check()
    # The probe must see a group kept alive: torch alone, torch.distributed.nn imported after init_process_group().
    held = check.lingering_threads("torch-held")
    assert all(any(name.startswith("pt_gloo") for name in threads) for threads in held), held
    # This package imported after init_process_group(): the fused sync; the collector, a window in flight + shutdown().
    for variant in ("accelerated", "inflight"):
        assert check.lingering_threads(variant) == [[], []], variant


def test_checkpointable_objects_stay_stateful_without_subclassing_it():
    # Not subclassing Stateful (whose import keeps the group alive) must keep DCP's isinstance check satisfied.
    metric = MeanMetric()
    metric.update(torch.tensor(1.0))
    assert isinstance(AsyncMetricCollector(metric), Stateful)
    assert isinstance(PerRankState(metric), Stateful)
