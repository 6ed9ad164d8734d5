"""Shared by the compile tests and ``benchmarks/compile_sweep.py``: compile a metric step, count graphs, compare.

A step is compiled with ``torch.compile(step, fullgraph=True)`` (a graph break raises) under
``error_on_recompile`` (a recompile raises); a counting backend records how many graphs Dynamo handed over.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from tests.parity import assert_same
from torchmetrics_async._torchmetrics import WrapperMetric

# Compiled kernels may fuse and reorder float operations.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}


class CountingBackend:
    """A ``torch.compile`` backend that counts the graphs it receives and hands them to ``inner``."""

    def __init__(self, inner: str = "eager") -> None:
        self.inner = inner
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        self.graphs += 1
        if self.inner == "eager":
            return gm.forward
        from torch._dynamo.backends.registry import lookup_backend

        return lookup_backend(self.inner)(gm, example_inputs)


@dataclass
class CompileReport:
    """What one compiled run did: graphs compiled, Dynamo frames (1 per compiled frame), recompiles, breaks."""

    graphs: int
    frames: int
    recompiles: int
    graph_breaks: int


def compile_and_run(step: Callable, batches: Sequence[tuple], backend: str = "eager") -> tuple[list, CompileReport]:
    """Compile ``step`` with ``fullgraph=True`` and call it on every batch with recompiles forbidden.

    Returns:
        The step's outputs and the counts.
    """
    torch._dynamo.reset()
    counters.clear()
    counting = CountingBackend(backend)
    compiled = torch.compile(step, fullgraph=True, backend=counting)
    with torch._dynamo.config.patch(error_on_recompile=True):
        outputs = [compiled(*batch) for batch in batches]
    report = CompileReport(
        graphs=counting.graphs,
        frames=int(counters["stats"]["unique_graphs"]),
        recompiles=sum(counters["recompiles"].values()),
        graph_breaks=sum(counters["graph_break"].values()),
    )
    return outputs, report


def check_metric(
    make: Callable[[], Any], batches: Sequence[tuple], use_forward: bool, backend: str = "eager"
) -> CompileReport:
    """A compiled step calling ``update``/``forward`` of one metric: one graph, no recompile, values equal eager.

    ``make`` builds a fresh metric; the compiled metric's step outputs, ``compute()``, ``update_count`` and window count
    are compared with an eager twin's.
    """
    eager, compiled_metric = make(), make()

    def step(*args: Any) -> Any:
        return compiled_metric(*args) if use_forward else compiled_metric.update(*args)

    outputs, report = compile_and_run(step, batches, backend)
    expected = [eager(*b) if use_forward else eager.update(*b) for b in batches]
    if use_forward:
        assert_same(outputs, expected, **TOLERANCE)
    # The window's count (``_update_count``, or a ``Running`` wrapper's ``_num_vals_seen``), read through its property.
    counter = compiled_metric._window_counter
    # A wrapper leaving the counting to its base (MinMaxMetric, as torchmetrics') counts nothing itself.
    uncounted = counter == "_update_count" and isinstance(eager, WrapperMetric)
    assert getattr(compiled_metric, counter) == getattr(eager, counter) == (0 if uncounted else len(batches))
    assert compiled_metric.update_count == eager.update_count
    assert_same(compiled_metric.compute(), eager.compute(), **TOLERANCE)
    return report


def task_origin(origin: type, make: Callable[[], Any]) -> type | None:
    """For a task wrapper (``AUROC(task="multiclass")``), the task class it builds: its own case covers it."""
    from torchmetrics_async.registry import torchmetrics_origin

    built = torchmetrics_origin(type(make()))
    return built if built is not origin else None


def registry_case(origin: type, steps: int, **init: Any) -> tuple[Callable[[], Any], list[tuple]]:
    """A factory for ``origin``'s accelerated class with its example's arguments (and ``init``), and ``steps`` batches.

    The batches (``tests/examples.py``, one seed each) keep their shapes, so a compiled step sees new values only.
    """
    from tests.examples import example_for
    from torchmetrics_async.accelerate import registry

    examples = [example_for(origin, seed) for seed in range(steps)]
    batches = [example.inputs for example in examples]
    assert len({_shapes(batch) for batch in batches}) == 1, "the examples must keep their shapes"
    accelerated, arguments = registry()[origin], {**examples[0].init, **init}
    return lambda: accelerated(**arguments), batches


def _shapes(x: Any) -> Any:
    """The shapes of a batch: tensors, or detection's lists of per-image dicts of them."""
    if isinstance(x, (list, tuple)):
        return tuple(_shapes(item) for item in x)
    if isinstance(x, dict):
        return tuple((key, _shapes(item)) for key, item in x.items())
    return tuple(x.shape)


def assert_same_deferred_error(compiled: Any, eager: Any, update: int) -> None:
    """``compute()`` of both raises the same deferred error (``update``: the first offending one, for the reader)."""
    messages = []
    for metric in (compiled, eager):
        with pytest.raises(RuntimeError, match=r".") as raised:
            metric.compute()
        messages.append(str(raised.value))
    assert messages[0] == messages[1]


@pytest.fixture(autouse=True, scope="module")
def one_thread_per_module() -> Any:
    """Autouse where imported: tiny tensors, so intra-op threads only spin (a third of the CPU time on 2 cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
