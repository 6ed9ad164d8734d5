"""What the metrics add to an Inductor-compiled step: labels of scores without ``argmax``, and pinned kernel counts.

Inside compiled CPU code the multiclass metrics take the labels of scores as two plain reductions
(:func:`~torchmetrics_async.classification.multiclass.first_max_index`) instead of ``argmax``, which Inductor's
CPU code runs about twice as slowly (``benchmarks/README.md``, "What the metrics cost inside a compiled step"). These
tests check that the two give the same labels on ties, NaNs and infinities, eagerly and compiled by Inductor, that the
metrics' values stay torchmetrics', and count what the demo's eval step compiles to, so a change that brings ``argmax``
back or adds kernels fails here.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch._dynamo
import torch._inductor.config
import torch._inductor.metrics

from benchmarks.compile_bench import eval_step
from tests._compile import TOLERANCE, compile_and_run
from tests.parity import assert_same
from tools.demo import build_metrics, small_cnn
from torchmetrics_async import accelerate
from torchmetrics_async.classification.multiclass import first_max_index


def _hard_scores(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Scores with ties, NaNs, infinities and all-equal rows along dim 1."""
    generator = torch.Generator().manual_seed(1)
    scores = torch.randint(0, 3, shape, generator=generator).to(dtype)  # few distinct values: many ties
    flat = scores.movedim(1, -1).reshape(-1, shape[1])
    flat[0] = -math.inf
    flat[1, 2] = math.nan
    flat[2, -1] = math.inf
    flat[3, :2] = math.nan
    flat[4] = 7.0
    flat[5, 1] = math.inf
    flat[5, 3] = math.nan
    return flat.reshape(*scores.movedim(1, -1).shape).movedim(-1, 1).contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape", [(8, 5), (8, 5, 3)])
def test_first_max_index_is_argmax(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    scores = _hard_scores(shape, dtype)
    expected = scores.argmax(1)
    assert torch.equal(first_max_index(scores), expected)
    torch._dynamo.reset()
    compiled = torch.compile(first_max_index, fullgraph=True, backend="inductor")
    assert torch.equal(compiled(scores), expected)


@pytest.mark.parametrize("average", ["micro", "macro"])
def test_compiled_multiclass_scores_keep_torchmetrics_values_on_ties_and_nans(average: str) -> None:
    """Inductor-compiled updates of the four demo scores equal eager torchmetrics' on inputs where labels need care."""
    batches = [(_hard_scores((16, 6)) + step, torch.arange(16) % 6) for step in range(3)]
    compiled = accelerate(build_metrics(6, average=average))
    reference = build_metrics(6, average=average)
    compiled.pop("avg_loss"), reference.pop("avg_loss")

    def step(preds: torch.Tensor, target: torch.Tensor) -> None:
        for metric in compiled.values():
            metric.update(preds, target)

    _, report = compile_and_run(step, batches, backend="inductor")
    assert (report.graphs, report.recompiles, report.graph_breaks) == (1, 0, 0), report
    for preds, target in batches:
        for metric in reference.values():
            metric.update(preds, target)
    for name, metric in reference.items():
        assert_same(compiled[name].compute(), metric.compute(), **TOLERANCE)


# What the demo's eval step (small_cnn, 1000 classes, the five metrics) compiles to with torch 2.13 on CPU; measured,
# not derived. Inductor's CPU backend puts all metric work into the kernel of the loss (one C++ function), as loop
# nests; ``generated_kernel_count`` counts the loop nests. Update these when Inductor changes, after looking at the
# output code (``python -m benchmarks.compile_bench --kernels`` prints both counts).
STEP_KERNELS_WITHOUT_METRICS = 11
# 42 (was 37): each metric's compiled-update counter (`COMPILED_UPDATES.add_(1)`) is now its own one-value loop nest.
# The first-offending-update index that read the counter, and so fused it with the flag OR, was dropped in the
# redesign; the scalar work per checked metric went down (one kernel of ~8 ops and 3 stores became two of 1 op each).
STEP_KERNELS_WITH_METRICS = 42


def _compiled_step_counts(with_metrics: bool) -> tuple[int, dict[str, int]]:
    """Generated kernels and post-grad ATen op counts of the demo's eval step compiled by Inductor (no cache)."""
    torch.manual_seed(0)
    model = small_cnn(1000).eval()
    metrics = accelerate(build_metrics(1000)) if with_metrics else None
    ops: dict[str, int] = {}

    def count_ops(graph: torch.fx.Graph) -> None:
        for node in graph.nodes:
            if node.op == "call_function":
                name = str(node.target)
                ops[name] = ops.get(name, 0) + 1

    torch._dynamo.reset()
    torch._inductor.metrics.reset()
    patch: dict[str, Any] = {"fx_graph_cache": False, "post_grad_custom_post_pass": count_ops}
    with torch._inductor.config.patch(patch):
        images, labels = torch.randn(64, 3, 32, 32), torch.randint(0, 1000, (64,))
        torch.compile(eval_step(model, metrics), fullgraph=True)(images, labels)
    return torch._inductor.metrics.generated_kernel_count, ops


def test_demo_eval_step_kernels_are_pinned() -> None:
    """No ``argmax`` in the compiled step, and the kernel count of the step with and without the metrics as pinned."""
    bare_kernels, _ = _compiled_step_counts(with_metrics=False)
    kernels, ops = _compiled_step_counts(with_metrics=True)
    assert not [name for name in ops if "argmax" in name], ops
    assert (bare_kernels, kernels) == (STEP_KERNELS_WITHOUT_METRICS, STEP_KERNELS_WITH_METRICS)
