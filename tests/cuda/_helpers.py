"""Shared by the CUDA tests: device sleeps, and constructor arguments and inputs for every registered class."""

from __future__ import annotations

from typing import Any

import torch

NUM_CLASSES = 5
NUM_LABELS = 3
BATCH = 16
#: Task wrappers: the ``task`` values torchmetrics accepts for each.
WRAPPER_TASKS = {"ExactMatch": ("multiclass", "multilabel")}


def cycles_per_ms() -> float:
    """GPU cycles per millisecond, measured with CUDA events around ``torch.cuda._sleep`` (as PyTorch's tests do)."""
    torch.cuda.synchronize()
    rates = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(1_000_000)
        end.record()
        end.synchronize()
        rates.append(1_000_000 / start.elapsed_time(end))
    return sorted(rates)[1]


def sleep_ms(cycles: float, ms: float) -> None:
    """Queue about ``ms`` milliseconds of spinning on the current stream (no host wait)."""
    torch.cuda._sleep(int(cycles * ms))


def family(torchmetrics_class: type) -> str:
    """``aggregation``, ``binary``, ``multiclass``, ``multilabel`` or ``wrapper`` (a task wrapper)."""
    name = torchmetrics_class.__name__
    if torchmetrics_class.__module__ == "torchmetrics.aggregation":
        return "aggregation"
    for prefix in ("Binary", "Multiclass", "Multilabel"):
        if name.startswith(prefix):
            return prefix.lower()
    return "wrapper"


def class_kwargs(torchmetrics_class: type, task: str | None = None) -> dict[str, Any]:
    """Constructor arguments a registered class cannot do without (``task`` for a wrapper)."""
    name = torchmetrics_class.__name__
    kind = task or family(torchmetrics_class)
    kwargs: dict[str, Any] = {"task": task} if task else {}
    if "FBeta" in name:
        kwargs["beta"] = 2.0
    if kind == "multiclass":
        kwargs["num_classes"] = NUM_CLASSES
    elif kind == "multilabel":
        kwargs["num_labels"] = NUM_LABELS
    return kwargs


def registry_cases() -> list[tuple[str, type, dict[str, Any], str]]:
    """``(id, torchmetrics class, kwargs, input kind)`` for every registered class (wrappers once per task)."""
    from torchmetrics_async.accelerate import registry

    cases = []
    for origin in registry():
        kind = family(origin)
        if kind == "wrapper":
            for task in WRAPPER_TASKS.get(origin.__name__, ("binary", "multiclass", "multilabel")):
                cases.append((f"{origin.__name__}[{task}]", origin, class_kwargs(origin, task), task))
        else:
            cases.append((origin.__name__, origin, class_kwargs(origin), kind))
    return cases


def batches(kind: str, device: torch.device, n: int = 3, seed: int = 0) -> list[tuple[Any, ...]]:
    """``n`` update argument tuples for the input kind, generated on ``device`` by kernels (no host data)."""
    generator = torch.Generator(device=device).manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=generator, device=device)

    def randint(high: int, *shape: int) -> torch.Tensor:
        return torch.randint(0, high, shape, generator=generator, device=device)

    out: list[tuple[Any, ...]] = []
    for _ in range(n):
        if kind == "aggregation":
            out.append((rand(BATCH) * 4 - 2,))
        elif kind == "binary":
            out.append((rand(BATCH), randint(2, BATCH)))
        elif kind == "multiclass":
            out.append((rand(BATCH, NUM_CLASSES) * 6 - 3, randint(NUM_CLASSES, BATCH)))
        else:
            out.append((rand(BATCH, NUM_LABELS), randint(2, BATCH, NUM_LABELS)))
    return out


def build_pair(origin: type, kwargs: dict[str, Any], device: torch.device) -> tuple[Any, Any]:
    """(torchmetrics metric, accelerated metric), same arguments, on ``device``."""
    from torchmetrics_async.accelerate import registry

    accelerated = registry()[origin]
    return origin(**kwargs).to(device), accelerated(**kwargs).to(device)


def as_python(value: Any) -> Any:
    """A computed value as Python numbers/lists (the collector's output form)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().tolist()
    if isinstance(value, dict):
        return {key: as_python(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(as_python(item) for item in value)
    return value


__all__ = [
    "BATCH",
    "NUM_CLASSES",
    "NUM_LABELS",
    "as_python",
    "batches",
    "build_pair",
    "class_kwargs",
    "cycles_per_ms",
    "family",
    "registry_cases",
    "sleep_ms",
]
