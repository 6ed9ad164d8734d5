"""Every registered class that compiles alone also compiles inside an accelerated ``MetricCollection``.

For each registered class outside :data:`tools.coverage_table.COMPILE_CAVEATS` (for the call), two instances
with the example's arguments form an accelerated ``MetricCollection`` (two equal members: torchmetrics would make them
a compute group, which a collection updated inside compiled code leaves unformed). One compiled step
(``fullgraph=True``, recompiles forbidden) calls ``update()`` or ``forward()`` of several such collections, one per
class, so a trace covers a chunk of classes; it must make one graph with no recompile, and each collection's
``forward()`` outputs, ``compute()`` and update counts must equal an eager twin's. When a chunk fails, each of its
classes is checked alone, so the failure names the class.
"""

from __future__ import annotations

from typing import Any

import pytest
import torchmetrics

from tests._compile import (  # one_thread_per_module: an autouse fixture
    TOLERANCE,
    compile_and_run,
    one_thread_per_module,  # noqa: F401
    registry_case,
    task_origin,
)
from tests.parity import assert_same
from tools.coverage_table import COMPILE_CAVEATS
from torchmetrics_async import accelerate
from torchmetrics_async.accelerate import registry

STEPS = 4
CALLS = ("update", "forward")
# Classes per compiled step: a trace per chunk instead of per class (a failing chunk is re-run class by class).
CHUNK = 8


def _compiling_alone(call: str) -> list[type]:
    """Registered classes that compile to one graph alone for ``call`` (task wrappers: their task class's case)."""
    origins = sorted(registry(), key=lambda origin: origin.__name__)
    return [
        origin
        for origin in origins
        if call not in getattr(COMPILE_CAVEATS.get(origin), "calls", ())
        and task_origin(origin, registry_case(origin, 1)[0]) is None
    ]


def _chunks(call: str) -> list[tuple[type, ...]]:
    origins = _compiling_alone(call)
    return [tuple(origins[i : i + CHUNK]) for i in range(0, len(origins), CHUNK)]


def _collection(make: Any) -> Any:
    return accelerate(torchmetrics.MetricCollection({"first": make(), "second": make()}))


def _check(origins: tuple[type, ...], call: str) -> None:
    cases = [registry_case(origin, STEPS) for origin in origins]
    compiled = [_collection(make) for make, _ in cases]
    eager = [_collection(make) for make, _ in cases]

    def step(*per_class: tuple) -> list:
        return [
            collection(*args) if call == "forward" else collection.update(*args)
            for collection, args in zip(compiled, per_class, strict=True)
        ]

    steps = [tuple(batches[i] for _, batches in cases) for i in range(STEPS)]
    outputs, report = compile_and_run(step, steps)
    assert (report.graphs, report.recompiles, report.graph_breaks) == (1, 0, 0), report
    for index, (origin, collection, twin) in enumerate(zip(origins, compiled, eager, strict=True)):
        expected = [twin(*args) if call == "forward" else twin.update(*args) for args in (s[index] for s in steps)]
        if call == "forward":
            assert_same([output[index] for output in outputs], expected, **TOLERANCE)
        assert_same(collection.compute(), twin.compute(), **TOLERANCE)
        for name in twin:
            assert collection[name].update_count == twin[name].update_count, origin.__name__


@pytest.mark.parametrize(
    ("call", "origins"),
    [(call, chunk) for call in CALLS for chunk in _chunks(call)],
    ids=lambda value: value if isinstance(value, str) else f"{value[0].__name__}..{value[-1].__name__}",
)
def test_registered_classes_compile_inside_a_metric_collection(call: str, origins: tuple[type, ...]) -> None:
    try:
        _check(origins, call)
    except Exception:  # name the class: each alone
        for origin in origins:
            try:
                _check((origin,), call)
            except Exception as error:
                raise AssertionError(f"{origin.__name__}.{call}() inside a MetricCollection: {error}") from error
        raise
