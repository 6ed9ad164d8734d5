"""A training step's forward, loss and ``MetricCollection`` updates in one ``torch.compile(fullgraph=True)`` graph.

The CPU half of ``scripts/gpu-check``'s ``cuda_graphs`` section (:func:`benchmarks.step_share.compiled_step`): there the
same step runs under ``mode="reduce-overhead"`` (CUDA graphs). Here: one graph (a graph break raises), no recompile
over steps whose weights change, and the collection's values equal an eager twin's updated with the same logits.
"""

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from benchmarks.step_share import compiled_step, step_metrics, update_step_metrics
from tests._compile import TOLERANCE, CountingBackend
from tests.parity import assert_same
from tools.demo import small_cnn

NUM_CLASSES = 10


@pytest.mark.slow
def test_training_step_with_metric_updates_is_one_graph_with_eager_values():
    torch.manual_seed(0)
    model = small_cnn(NUM_CLASSES)
    metrics, twin = step_metrics(NUM_CLASSES), step_metrics(NUM_CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(0)
    batches = [
        (torch.randn(8, 3, 8, 8, generator=generator), torch.randint(0, NUM_CLASSES, (8,), generator=generator))
        for _ in range(5)
    ]
    torch._dynamo.reset()
    counters.clear()
    backend = CountingBackend("aot_eager")
    step = torch.compile(compiled_step(model, metrics), fullgraph=True, backend=backend)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for images, labels in batches:
            optimizer.zero_grad()
            loss, logits = step(images, labels)
            loss.backward()  # outside the graph, as the GPU check runs it
            optimizer.step()
            update_step_metrics(twin, loss, logits, labels)
    assert backend.graphs == 1
    assert sum(counters["graph_break"].values()) == 0
    assert sum(counters["recompiles"].values()) == 0
    assert [metrics[name].update_count for name in metrics] == [len(batches)] * 3
    assert_same(metrics.compute(), twin.compute(), **TOLERANCE)
