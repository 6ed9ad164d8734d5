"""The timing method both benchmark suites share, so torchmetrics and accelerated are measured identically.

Build the metric, warm it up with :data:`WARMUP_CALLS` calls, estimate the cost of one call, then time rounds of
:data:`ITERATIONS` calls for as many rounds as fit in :data:`BUDGET_S` (clamped to ``[MIN_ROUNDS, MAX_ROUNDS]``).
pytest-benchmark stores each round's time per call; the report uses the median round, so a burst of load from other
processes moves only the rounds it hits.

Example:
    >>> import torch
    >>> count_aten_ops(lambda: torch.ones(2).add_(1))
    2
"""

import gc
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = [
    "BUDGET_S",
    "ITERATIONS",
    "WARMUP_CALLS",
    "count_aten_ops",
    "count_python_calls",
    "foreach_launches",
    "plan_rounds",
    "time_call",
]

#: Timed wall-clock budget per case in seconds (override with ``TORCHMETRICS_ASYNC_BENCH_SECONDS``).
BUDGET_S = float(os.environ.get("TORCHMETRICS_ASYNC_BENCH_SECONDS", "0.25"))
ITERATIONS = 10
MIN_ROUNDS = 100
MAX_ROUNDS = 2000
WARMUP_CALLS = 20


class _OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.count += foreach_launches(func, args)
        return func(*args, **(kwargs or {}))


def foreach_launches(func: Any, args: tuple) -> int:
    """How many kernels an op launches on a GPU: 1, or for a ``torch._foreach_*`` op what CUDA makes of its lists.

    CUDA runs a ``_foreach_`` op as one fused multi-tensor kernel only when every tensor of its lists shares dtype and
    device and the lists match shape for shape; otherwise it falls back to one kernel per list entry. Counting that
    keeps the op count a launch count (on the CPU every ``_foreach_`` op is one dispatcher call).

    Args:
        func: the ATen op.
        args: its arguments.

    Returns:
        The kernels it stands for.

    Example:
        >>> import torch
        >>> x, flag, add = torch.zeros(2), torch.zeros((), dtype=torch.bool), torch.ops.aten._foreach_add_.List
        >>> foreach_launches(add, ([x, x], [x, x])), foreach_launches(add, ([x, flag], [x, flag]))
        (1, 2)
    """
    if "_foreach_" not in str(func):
        return 1
    lists = [arg for arg in args if isinstance(arg, (list, tuple)) and arg and isinstance(arg[0], Tensor)]
    if not lists:
        return 1
    first = lists[0]
    fused = all(
        t.dtype == first[0].dtype and t.device == first[0].device and t.shape == first[i].shape
        for tensors in lists
        for i, t in enumerate(tensors)
    )
    return 1 if fused else len(first)


def count_aten_ops(fn: Callable[[], Any]) -> int:
    """How many ATen ops one call of ``fn`` dispatches (deterministic, unlike its time).

    Args:
        fn: the call.

    Returns:
        The number of ops the dispatcher saw.
    """
    with _OpCounter() as counter:
        fn()
    return counter.count


def count_python_calls(fn: Callable[[], Any]) -> int:
    """How many Python functions one call of ``fn`` enters, ``fn`` itself not counted (deterministic).

    The host time of an update that ATen ops do not explain is mostly its Python path: each function entered
    (a wrapper layer, a helper, a property) costs its frame on top of what it does. Counted with ``sys.setprofile``
    (``"call"`` events; builtins and ATen ops, ``"c_call"`` events, are not counted).

    Args:
        fn: the call.

    Returns:
        The number of Python function calls below ``fn``.

    Example:
        >>> def twice():
        ...     return abs(-1) + len("ab")
        >>> count_python_calls(lambda: twice())
        1
    """
    calls = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    # A garbage collection during fn() would run finalizers (a generator closed, a __del__) as Python calls of its
    # own, depending on what earlier code left as garbage: collected before and held off during the count.
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(previous)
        if gc_was_enabled:
            gc.enable()
    return calls - 1  # fn's own frame


def plan_rounds(
    per_call_s: float,
    iterations: int = ITERATIONS,
    budget_s: float | None = None,
    min_rounds: int = MIN_ROUNDS,
    max_rounds: int = MAX_ROUNDS,
) -> int:
    """How many rounds of ``iterations`` calls fit in the timed budget, clamped to ``[min_rounds, max_rounds]``.

    Args:
        per_call_s: estimated seconds per call (after warm-up).
        iterations: calls per round.
        budget_s: timed budget in seconds (``None``: :data:`BUDGET_S`).
        min_rounds: fewest rounds, however slow the call.
        max_rounds: most rounds, however fast the call.

    Returns:
        The number of rounds.

    Example:
        >>> plan_rounds(1e-3, iterations=10, budget_s=0.25), plan_rounds(1e-9), plan_rounds(1.0)
        (100, 2000, 100)
    """
    budget = BUDGET_S if budget_s is None else budget_s
    return max(min_rounds, min(max_rounds, int(budget / (max(per_call_s, 1e-12) * iterations))))


def time_call(benchmark: Any, fn: Callable[[], Any], teardown: Callable[[], None] | None = None) -> None:
    """Warm up ``fn``, size the rounds to the budget and time it with ``benchmark.pedantic``.

    Args:
        benchmark: the pytest-benchmark fixture.
        fn: the call to time.
        teardown: run after each round, untimed (pytest-benchmark's pedantic ``teardown``).
    """
    for _ in range(WARMUP_CALLS):
        fn()
    start = time.perf_counter()
    for _ in range(WARMUP_CALLS):
        fn()
    per_call = (time.perf_counter() - start) / WARMUP_CALLS
    rounds = plan_rounds(per_call)
    benchmark.pedantic(fn, teardown=teardown, rounds=rounds, iterations=ITERATIONS)


def run_case(benchmark: Any, metric_name: str, call: str, impl: str, fn: Callable[[], Any]) -> None:
    """Time one (metric, call) case of one implementation, recording what the report groups and counts by.

    Args:
        benchmark: pytest-benchmark's fixture.
        metric_name: the row's metric.
        call: the row's call (``"update(128 probs)"``, ...).
        impl: which implementation (``"torchmetrics"``, ``"accelerated"``, ...).
        fn: the call to time.
    """
    benchmark.group = f"{metric_name}.{call}[default]"
    benchmark.extra_info.update(
        {"impl": impl, "metric": metric_name, "call": call, "variant": "default", "aten_ops": count_aten_ops(fn)}
    )
    time_call(benchmark, fn)
