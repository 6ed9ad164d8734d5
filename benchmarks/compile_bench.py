"""An eval step with the article's five metrics under ``torch.compile``, side by side with the same step without them.

The step is the demo's eval step (``tools.demo``: its CPU model ``small_cnn`` on 32x32 images, or
ResNet-18 on 224x224 with ``--model resnet18``): forward, cross-entropy loss, and the five metrics of
``build_metrics`` updated as ``update_metrics`` updates them. Variants, timed in one run, round-robin, median of rounds:

- ``compiled, metrics``: ``torch.compile(step, fullgraph=True)`` (Inductor), accelerated metrics inside the graph;
- ``compiled, no metrics``: the same step without the metric updates (the baseline of the 5% goal);
- ``compiled model, eager metrics``: the model compiled, the accelerated metrics updated eagerly after it;
- ``eager, accelerated``: no compile, accelerated metrics;
- ``eager, torchmetrics``: no compile, torchmetrics' metrics.

Before timing, every variant's metric values after the same batches are checked equal to eager torchmetrics', and the
compiled step's graph and recompile counts are printed (expected: 1 graph, 0 recompiles).

Run: ``python -m benchmarks.compile_bench [--steps 30] [--rounds 7] [--threads 1] [--device cpu]``. ResNet-18 on CPU
defaults to a batch of 8, 4 steps and 3 rounds (about 3 minutes on 2 shared cores; compiling it takes about one):
``python -m benchmarks.compile_bench --model resnet18``. ``--kernels`` prints, without timing, how many kernels (on CPU:
C++ loop nests) Inductor generates for the step with and without the metrics, the numbers
``tests/test_compile_kernels.py`` pins.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo
import torch._inductor.config
import torch._inductor.metrics
from torch import nn
from torch._dynamo.utils import counters

from tests._compile import CountingBackend
from tools.demo import build_metrics, resnet18, small_cnn, update_metrics
from torchmetrics_async import accelerate


def eval_step(model: nn.Module, metrics: dict[str, Any] | None) -> Callable:
    """The demo's eval step: forward, cross-entropy loss and, unless ``metrics`` is None, ``update_metrics``.

    Example:
        >>> eval_step(small_cnn(10).eval(), None)(torch.zeros(2, 3, 32, 32), torch.tensor([1, 2])).shape
        torch.Size([])
    """

    def step(images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            output = model(images)
            loss = nn.functional.cross_entropy(output, labels)
            if metrics is not None:
                update_metrics(metrics, loss, output, labels)
        return loss

    return step


def _split_step(compiled_model: Callable, metrics: dict[str, Any]) -> Callable:
    def step(images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            output = compiled_model(images)
            loss = nn.functional.cross_entropy(output, labels)
            update_metrics(metrics, loss, output, labels)
        return loss

    return step


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str] | None = None) -> int:
    """Build, check, time and print the table (Markdown)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="steps per timed round (30; ResNet-18 on CPU: 4)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds (7; ResNet-18 on CPU: 3)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", choices=["small_cnn", "resnet18"], default=None)
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=None, help="128 on CUDA, 64 on CPU (ResNet-18 on CPU: 8)")
    parser.add_argument("--kernels", action="store_true", help="print Inductor's kernel counts only, no timing")
    opts = parser.parse_args(argv)
    torch.set_num_threads(opts.threads)
    device = torch.device(opts.device)
    cuda = device.type == "cuda"
    model_name = opts.model or ("resnet18" if cuda else "small_cnn")
    image = 224 if model_name == "resnet18" else 32
    # ResNet-18 on CPU takes about a second per step with one thread: few, small steps keep the run to minutes.
    heavy = model_name == "resnet18" and not cuda
    batch = opts.batch_size or (128 if cuda else 8 if heavy else 64)
    opts.steps = opts.steps or (4 if heavy else 30)
    opts.rounds = opts.rounds or (3 if heavy else 7)
    torch.manual_seed(0)
    model = (resnet18 if model_name == "resnet18" else small_cnn)(opts.num_classes).to(device).eval()
    generator = torch.Generator().manual_seed(0)
    data = [
        (
            torch.randn(batch, 3, image, image, generator=generator).to(device),
            torch.randint(0, opts.num_classes, (batch,), generator=generator).to(device),
        )
        for _ in range(opts.steps)
    ]

    def metrics(accelerated: bool) -> dict[str, Any]:
        built = {name: m.to(device) for name, m in build_metrics(opts.num_classes).items()}
        return accelerate(built) if accelerated else built

    if opts.kernels:
        for label, held in (("without metrics", None), ("with metrics", metrics(True))):
            torch._dynamo.reset()
            torch._inductor.metrics.reset()
            with torch._inductor.config.patch(fx_graph_cache=False):
                torch.compile(eval_step(model, held), fullgraph=True)(*data[0])
            print(f"compiled step {label}: {torch._inductor.metrics.generated_kernel_count} generated kernels")
        return 0

    torch._dynamo.reset()
    counters.clear()
    counting = CountingBackend("inductor")
    compiled_metrics = metrics(True)
    t0 = time.perf_counter()
    compiled = torch.compile(eval_step(model, compiled_metrics), fullgraph=True, backend=counting)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for images, labels in data:
            compiled(images, labels)
    _sync(device)
    compile_s = time.perf_counter() - t0
    graphs, recompiles = counting.graphs, sum(counters["recompiles"].values())
    compiled_bare = torch.compile(eval_step(model, None), fullgraph=True)
    compiled_model = torch.compile(model, fullgraph=True)
    split_metrics, eager_metrics, reference = metrics(True), metrics(True), metrics(False)
    variants: dict[str, Callable] = {
        "compiled step, accelerated metrics inside": compiled,
        "compiled step, no metrics": compiled_bare,
        "compiled model, accelerated metrics eager": _split_step(compiled_model, split_metrics),
        "eager, accelerated metrics": eval_step(model, eager_metrics),
        "eager, torchmetrics": eval_step(model, reference),
    }
    # The same batches once through every variant that holds metrics (the compiled one ran them above): equal values.
    for step in variants.values():
        if step is not compiled:
            for images, labels in data:
                step(images, labels)
    for held in (split_metrics, eager_metrics):
        for key in reference:
            torch.testing.assert_close(held[key].compute(), reference[key].compute())
    for key in reference:
        torch.testing.assert_close(compiled_metrics[key].compute(), reference[key].compute())

    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(opts.rounds):
        for name, step in variants.items():
            _sync(device)
            start = time.perf_counter()
            for images, labels in data:
                step(images, labels)
            _sync(device)
            times[name].append((time.perf_counter() - start) / len(data) * 1e3)
    base = statistics.median(times["compiled step, no metrics"])
    print(
        f"device {device}, model {model_name} ({batch}x3x{image}x{image}, {opts.num_classes} classes),"
        f" torch {torch.__version__}, {opts.threads} thread(s); compiled step with metrics: {graphs} graph(s),"
        f" {recompiles} recompiles over {len(data)} steps (compile + first pass {compile_s:.1f} s);"
        f" median of {opts.rounds} rounds of {len(data)} steps\n"
    )
    print("| variant | ms / step | vs compiled step without metrics |")
    print("|---|---:|---:|")
    for name, samples in times.items():
        ms = statistics.median(samples)
        print(f"| {name} | {ms:.2f} | {(ms / base - 1) * 100:+.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
