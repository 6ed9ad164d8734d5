"""``torch.compile(mode="reduce-overhead")`` over the demo's metric updates: captured in CUDA graphs, equal to eager.

Not run in CI without a GPU (``tests/cuda/conftest.py`` skips them); ``scripts/gpu-check`` runs them on one.

What "captured" needs: Dynamo traces each update as whole graphs (``torch._dynamo.explain`` reports no graph break)
and Inductor records no ``cudagraph_skips``. Where Dynamo breaks the graph today, the test is an expected failure
whose reason is Dynamo's own break reasons (read at run time), so it turns into a pass when the library stops
breaking the graph.
"""

import pytest
import torch

from tools.demo import build_metrics, update_metrics
from torchmetrics_async import accelerate

pytestmark = pytest.mark.cuda

NUM_CLASSES = 10


def _inputs(device, steps):
    generator = torch.Generator(device=device).manual_seed(0)
    return [
        (
            torch.rand((), generator=generator, device=device),
            torch.randn(32, NUM_CLASSES, generator=generator, device=device),
            torch.randint(0, NUM_CLASSES, (32,), generator=generator, device=device),
        )
        for _ in range(steps)
    ]


def test_reduce_overhead_captures_the_updates(device):
    import torch._dynamo
    from torch._dynamo.utils import counters

    eager = accelerate({k: m.to(device) for k, m in build_metrics(NUM_CLASSES).items()})
    compiled = accelerate({k: m.to(device) for k, m in build_metrics(NUM_CLASSES).items()})

    def step(loss, output, target):
        update_metrics(compiled, loss, output, target)

    data = _inputs(device, 12)
    probe = accelerate({k: m.to(device) for k, m in build_metrics(NUM_CLASSES).items()})
    explained = torch._dynamo.explain(lambda *a: update_metrics(probe, *a))(*data[0])
    if explained.graph_break_count:
        reasons = sorted({reason.reason.splitlines()[0] for reason in explained.break_reasons})
        pytest.xfail(f"Dynamo breaks the update graph {explained.graph_break_count} times: {'; '.join(reasons)}")

    torch._dynamo.reset()
    counters.clear()
    fn = torch.compile(step, mode="reduce-overhead")
    for args in data:
        update_metrics(eager, *args)
        fn(*args)
    torch.cuda.synchronize()
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
    for name in eager:
        torch.testing.assert_close(compiled[name].compute(), eager[name].compute())


def test_reduce_overhead_eval_step_is_one_captured_graph_updating_states_in_place(device):
    """The eval step with the five demo metrics under ``mode="reduce-overhead"`` and ``fullgraph=True``.

    One graph, no recompile over 20 steps, no CUDA-graph skip (the states are marked static addresses and updated in
    place: their ``data_ptr`` does not move), values equal to eager.
    """
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(NUM_CLASSES * 2, 64), torch.nn.ReLU(), torch.nn.Linear(64, NUM_CLASSES))
    model = model.to(device).eval()
    compiled_metrics = accelerate({k: m.to(device) for k, m in build_metrics(NUM_CLASSES).items()})
    eager_metrics = accelerate({k: m.to(device) for k, m in build_metrics(NUM_CLASSES).items()})

    def step(metrics, x, y):
        with torch.no_grad():
            output = model(x)
            loss = torch.nn.functional.cross_entropy(output, y)
            update_metrics(metrics, loss, output, y)
        return loss

    generator = torch.Generator(device=device).manual_seed(1)
    data = [
        (
            torch.randn(32, NUM_CLASSES * 2, generator=generator, device=device),
            torch.randint(0, NUM_CLASSES, (32,), generator=generator, device=device),
        )
        for _ in range(20)
    ]
    addresses = {
        (name, attr): getattr(metric, attr).data_ptr()
        for name, metric in compiled_metrics.items()
        for attr in metric._defaults
    }
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(lambda x, y: step(compiled_metrics, x, y), mode="reduce-overhead", fullgraph=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        losses = [compiled(x, y).clone() for x, y in data]
    expected = [step(eager_metrics, x, y) for x, y in data]
    torch.cuda.synchronize()
    assert int(counters["stats"]["unique_graphs"]) == 1, dict(counters["stats"])
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
    for (name, attr), address in addresses.items():
        assert getattr(compiled_metrics[name], attr).data_ptr() == address, (name, attr)
    torch.testing.assert_close(torch.stack(losses), torch.stack(expected))
    for name in eager_metrics:
        torch.testing.assert_close(compiled_metrics[name].compute(), eager_metrics[name].compute())
        assert compiled_metrics[name].update_count == eager_metrics[name].update_count == len(data)
