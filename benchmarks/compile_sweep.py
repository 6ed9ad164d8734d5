"""Every registered class under ``torch.compile(fullgraph=True)``: graphs, recompiles, breaks, values against eager.

For each accelerated class, a grid of arguments (every ``nan_strategy`` for the aggregators, 0-dim and batched
values, tensor weights; ``average``/``top_k``/``ignore_index``/``multidim_average``/``normalize`` and the like for the
classification metrics), and both ``update()`` and ``forward()``, a step is compiled with ``fullgraph=True`` under
``error_on_recompile`` and run on ``--steps`` batches of new values with the same shapes (``tests/_compile.py``).
A case passes when Dynamo hands over exactly one graph and the outputs, ``compute()`` and ``update_count`` equal an
eager twin's. Growing states (list states: ``CatMetric``, samplewise multilabel/multiclass/binary scores; the running
window of ``RunningMean``/``RunningSum``) are expected to fail here: see docs/compile.md.

Run: ``python -m benchmarks.compile_sweep [--steps 20] [--backend eager] [-k NAME]``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from tests._compile import check_metric
from tests.example_families import is_task_wrapper as _is_task_wrapper
from torchmetrics_async.accelerate import registry
from torchmetrics_async.registry import torchmetrics_origin

STRATEGIES: list[Any] = ["warn", "error", "ignore", "disable", 0.5]
NUM_CLASSES = 4
NUM_LABELS = 3
BATCH = 8


def _aggregator_cases(cls: type) -> Iterator[tuple[str, Callable, Callable]]:
    name = cls.__name__
    extra = {"window": 3} if name.startswith("Running") else {}
    for strategy, shape in itertools.product(STRATEGIES, [(), (BATCH,)]):

        def batches(steps: int, shape: tuple = shape) -> list[tuple]:
            g = torch.Generator().manual_seed(0)
            out = []
            for i in range(steps):
                x = torch.randn(shape, generator=g)
                if i == 3:  # a NaN in the window: the strategy acts (under "error" compute() raises: no NaN there)
                    x = x.fill_(math.nan) if not shape else x.index_fill_(0, torch.tensor([0]), math.nan)
                out.append((x,))
            return out

        def make(strategy: Any = strategy) -> Any:
            return cls(nan_strategy=strategy, **extra)

        if strategy == "error":  # compute() raises on the NaN: keep the values clean for the value comparison

            def batches(steps: int, shape: tuple = shape) -> list[tuple]:
                g = torch.Generator().manual_seed(0)
                return [(torch.randn(shape, generator=g),) for _ in range(steps)]

        yield f"nan_strategy={strategy!r} shape={shape}", make, batches
    if name in ("MeanMetric", "RunningMean"):

        def weighted(steps: int) -> list[tuple]:
            g = torch.Generator().manual_seed(1)
            return [(torch.randn(BATCH, generator=g), torch.rand(BATCH, generator=g)) for _ in range(steps)]

        yield "tensor weights", lambda: cls(**extra), weighted


def _classification_grid(name: str) -> list[dict[str, Any]]:
    common = [{}]
    if "ConfusionMatrix" in name:
        return [{"normalize": n} for n in (None, "true", "pred", "all")] + [{"ignore_index": -1}]
    if "ExactMatch" in name:
        return [{}, {"multidim_average": "samplewise"}, {"ignore_index": -1}]
    grid: list[dict[str, Any]] = []
    if name.startswith("Binary"):
        grid = [{}, {"threshold": 0.3}, {"ignore_index": -1}, {"multidim_average": "samplewise"}]
    else:
        averages = ["micro", "macro", "weighted", "none"]
        grid = [{"average": a} for a in averages] + [{"ignore_index": -1}, {"multidim_average": "samplewise"}]
        if name.startswith("Multiclass"):
            grid.append({"top_k": 2})
    if "FBeta" in name:
        grid = [{**g, "beta": 2.0} for g in grid]
    return grid or common


def _classification_batches(name: str, kwargs: dict[str, Any]) -> Callable[[int], list[tuple]]:
    samplewise = kwargs.get("multidim_average") == "samplewise"
    ignore = kwargs.get("ignore_index") is not None

    def batches(steps: int) -> list[tuple]:
        g = torch.Generator().manual_seed(2)
        out = []
        extra = (5,) if samplewise else ()
        for _ in range(steps):
            if name.startswith("Binary"):
                preds, target = (
                    torch.rand(BATCH, *extra, generator=g),
                    torch.randint(0, 2, (BATCH, *extra), generator=g),
                )
            elif name.startswith("Multilabel"):
                preds = torch.rand(BATCH, NUM_LABELS, *extra, generator=g)
                target = torch.randint(0, 2, (BATCH, NUM_LABELS, *extra), generator=g)
            else:
                preds = torch.randn(BATCH, NUM_CLASSES, *extra, generator=g)
                target = torch.randint(0, NUM_CLASSES, (BATCH, *extra), generator=g)
            if ignore:
                target = target.index_fill(0, torch.tensor([1]), -1)
            out.append((preds, target))
        return out

    return batches


def _classification_cases(cls: type, origin: type) -> Iterator[tuple[str, Callable, Callable]]:
    name = origin.__name__
    if _is_task_wrapper(origin):
        name = f"Multiclass{name}"
    for kwargs in _classification_grid(name):
        init = dict(kwargs)
        if _is_task_wrapper(origin):
            init = {"task": "multiclass", "num_classes": NUM_CLASSES, **init}
        elif name.startswith("Multiclass"):
            init["num_classes"] = NUM_CLASSES
        elif name.startswith("Multilabel"):
            init["num_labels"] = NUM_LABELS

        def make(init: dict = init) -> Any:
            return cls(**init)

        yield (
            ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) or "defaults",
            make,
            _classification_batches(name, kwargs),
        )


def cases() -> Iterator[tuple[str, str, Callable, Callable]]:
    """(class name, arguments, factory, batches(steps)) for every registered class and argument combination."""
    for origin, cls in sorted(registry().items(), key=lambda item: item[1].__name__):
        if origin.__module__.startswith("torchmetrics.aggregation"):
            family = _aggregator_cases(cls)
        else:
            family = _classification_cases(cls, torchmetrics_origin(cls) or origin)
        label = origin.__name__ if _is_task_wrapper(origin) else cls.__name__
        for args, make, batches in family:
            yield label, args, make, batches


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and print one line per case and a summary; exit status 1 if an unexpected case failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--backend", default="eager")
    parser.add_argument("-k", default="", help="only classes whose name contains this")
    opts = parser.parse_args(argv)
    results: list[tuple[str, str, str, str]] = []
    start = time.perf_counter()
    for label, args, make, batches in cases():
        if opts.k and opts.k not in label:
            continue
        for mode in ("update", "forward"):
            try:
                report = check_metric(make, batches(opts.steps), use_forward=mode == "forward", backend=opts.backend)
                outcome = "ok" if report.graphs == 1 and not report.recompiles else f"graphs={report.graphs}"
            except Exception as err:
                outcome = f"FAIL {type(err).__name__}: {str(err).strip().splitlines()[0][:110]}"
            results.append((label, args, mode, outcome))
            print(f"{label:36} {mode:7} {args:42} {outcome}", flush=True)
    passed = sum(r[3] == "ok" for r in results)
    expected = [r for r in results if r[3] != "ok" and _growing(r[0], r[1])]
    unexpected = [r for r in results if r[3] != "ok" and not _growing(r[0], r[1])]
    print(
        f"\n{passed}/{len(results)} cases: one graph, no recompile, eager's values; {len(expected)} expected failures"
        f" (growing list states / running window); {len(unexpected)} unexpected; {time.perf_counter() - start:.0f} s"
    )
    for r in unexpected:
        print("UNEXPECTED:", *r)
    return 1 if unexpected else 0


def _growing(label: str, args: str) -> bool:
    """Cases with states that grow or move per update (README: they cannot keep one graph)."""
    return label in ("CatMetric", "RunningMean", "RunningSum") or "samplewise" in args


if __name__ == "__main__":
    sys.exit(main())
