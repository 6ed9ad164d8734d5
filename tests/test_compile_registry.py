"""Every registered class inside ``torch.compile(fullgraph=True)``: one graph, no recompile, eager's values.

For each registered class, with its example arguments (``tests/examples.py``), a step calling ``update()`` (and one
calling ``forward()``) is compiled with ``fullgraph=True`` (a graph break raises) under ``error_on_recompile`` (a
recompile raises), with Dynamo's ``eager`` backend behind a graph-counting one, and runs :data:`STEPS` batches of new
values with the same shapes; ``compute()``, ``update_count`` and the ``forward()`` outputs must equal an eager twin's.

The classes listed in :data:`tools.coverage_table.COMPILE_CAVEATS` are checked the other way: under their
examples' arguments the listed calls must still fail to stay in one graph, so a caveat that no longer holds fails here
and is removed from the table (and docs/compile.md). The curves listed there for ``thresholds=None`` must compile
to one graph with binned thresholds.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch._dynamo.exc import TorchDynamoException
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from tests._compile import (  # one_thread_per_module: an autouse fixture
    check_metric,
    compile_and_run,
    one_thread_per_module,  # noqa: F401
    registry_case,
    task_origin,
)
from tools.coverage_table import ARGUMENT_COMPILE_CAVEATS, COMPILE_CAVEATS
from torchmetrics_async.accelerate import registry
from torchmetrics_async.classification.curves import CURVE_ORIGINS

# New values at every step; 4 steps are enough for a recompile to show (Dynamo guards fail at the second call) and
# keep the whole file cheap (one trace per class and call dominates its time).
STEPS = 4
CALLS = ("update", "forward")
ORIGINS = sorted(registry(), key=lambda origin: origin.__name__)
# What a compiled step that cannot stay in one graph raises under fullgraph=True and error_on_recompile: a graph
# break (Unsupported), a recompile (RecompileError), a data-dependent guard.
NOT_ONE_GRAPH = (TorchDynamoException, GuardOnDataDependentSymNode)


def _assert_one_graph(origin: type, call: str, **init: Any) -> None:
    make, batches = registry_case(origin, STEPS, **init)
    report = check_metric(make, batches, use_forward=call == "forward")
    assert (report.graphs, report.recompiles, report.graph_breaks) == (1, 0, 0), report


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("origin", ORIGINS, ids=lambda origin: origin.__name__)
def test_registered_class_compiles_to_one_graph_or_is_a_listed_caveat(origin: type, call: str) -> None:
    caveat = COMPILE_CAVEATS.get(origin)
    built = task_origin(origin, registry_case(origin, STEPS)[0])
    if built is not None:  # the same class as its task's case (tested there): only the tables must agree
        assert built in ORIGINS
        assert COMPILE_CAVEATS.get(built) == caveat
        return
    if caveat is None or call not in caveat.calls:
        _assert_one_graph(origin, call)
        return
    # Listed: the caveat must still hold (a fixed one fails here: take it out of COMPILE_CAVEATS).
    _assert_not_one_graph(origin, call)


def _assert_not_one_graph(origin: type, call: str, **init: Any) -> None:
    make, batches = registry_case(origin, STEPS, **init)
    metric = make()

    def step(*args: torch.Tensor) -> Any:
        return metric(*args) if call == "forward" else metric.update(*args)

    try:
        _, report = compile_and_run(step, batches)
    except NOT_ONE_GRAPH:
        return
    assert (report.graphs, report.recompiles, report.graph_breaks) != (1, 0, 0), (
        f"{origin.__name__}.{call}() now compiles to one graph: remove it from tools/coverage_table.py COMPILE_CAVEATS"
    )


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize(
    "origin", [origin for origin in ORIGINS if origin in CURVE_ORIGINS], ids=lambda origin: origin.__name__
)
def test_binned_curves_compile_to_one_graph(origin: type, call: str) -> None:
    """The curves' caveat is about ``thresholds=None``: binned, their states have fixed shapes."""
    if task_origin(origin, registry_case(origin, STEPS, thresholds=5)[0]) is not None:
        return  # a task wrapper: the task class's case covers it
    _assert_one_graph(origin, call, thresholds=5)


def test_caveats_name_registered_classes() -> None:
    """A caveat for a class that is not registered (renamed, dropped) would never be checked."""
    assert set(COMPILE_CAVEATS) <= set(registry())
    for caveat in COMPILE_CAVEATS.values():
        assert caveat.calls
        assert set(caveat.calls) <= set(CALLS)
        assert caveat.reason


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("name", ["StructuralSimilarityIndexMeasure", "MultiScaleStructuralSimilarityIndexMeasure"])
def test_ssim_with_the_default_data_range_is_the_listed_graph_break(name: str, call: str) -> None:
    """tools/coverage_table.py ARGUMENT_COMPILE_CAVEATS: with ``data_range=None`` not one graph (while it holds)."""
    origin = next(origin for origin in ORIGINS if origin.__name__ == name and ".image." in origin.__module__)
    assert any(name in caveat and "data_range=None" in caveat for caveat in ARGUMENT_COMPILE_CAVEATS)
    _assert_not_one_graph(origin, call, data_range=None)
