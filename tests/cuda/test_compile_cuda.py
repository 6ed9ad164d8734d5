"""``torch.compile(mode="reduce-overhead")`` over the demo's metric updates: captured in CUDA graphs, equal to eager.

What "captured" needs: Dynamo traces each update as whole graphs (``torch._dynamo.explain`` reports no graph break)
and Inductor records no ``cudagraph_skips``. Where Dynamo breaks the graph today, the test is an expected failure
whose reason is Dynamo's own break reasons (read at run time), so it turns into a pass when the library stops
breaking the graph.
"""

import pytest
import torch

from torchmetrics_async import accelerate
from torchmetrics_async.demo import build_metrics, update_metrics

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
