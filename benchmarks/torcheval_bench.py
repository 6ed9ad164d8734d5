"""torchmetrics, accelerated and torcheval ``update()`` side by side: host time (interleaved, medians) and ATen ops.

Run (``scripts/bench`` runs it; torcheval comes from the ``bench`` extra)::

    python -m benchmarks.torcheval_bench [--json PATH] [--rounds N] [-k SUBSTRING] [--ops]

For every pair of :mod:`benchmarks.torcheval_pairs` it builds the three metrics, warms each up, counts the ATen ops one
``update`` dispatches (a ``TorchDispatchMode``: top-level ops, i.e. what the dispatcher sees and a GPU launches;
deterministic) and the Python functions it enters (``sys.setprofile``: its Python path, also deterministic), then
times rounds of one block of calls per implementation (:data:`CALLS_PER_BLOCK` calls, fewer where that would take
more than :data:`BLOCK_US`), interleaved ABBA-style: A B C in one round, C B A in the next,
so drift and bursts of load hit all three alike. Per implementation the median block
time per call is reported; the ratios are the medians of the per-round ratios (each round's three blocks ran within
a few milliseconds of one another). Torch runs on one intra-op thread (as the issue's figures), and every
implementation updates in the caller's default grad mode.

``--ops`` prints only the op and Python call counts (and the torcheval counts to record in
:data:`benchmarks.torcheval_pairs.TORCHEVAL_OPS`). The targets (issue 11) are checked in the printed table:

- ``default`` (torchmetrics' defaults): time ≤ 1.25x torcheval's and ops ≤ torcheval's + 2;
- ``checks off`` (``nan_strategy="disable"`` / ``validate_args=False``): time ≤ torcheval's.
"""

import argparse
import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks.timing import count_aten_ops, count_python_calls
from benchmarks.torcheval_pairs import TORCHEVAL_OPS, Pair, batch, pairs

__all__ = ["IMPLS", "main", "measure", "meets_targets", "render"]

IMPLS = ("torchmetrics", "accelerated", "torcheval")
CALLS_PER_BLOCK = 20
BLOCK_US = 2000.0
WARMUP = 30
#: Time ratio targets: accelerated / torcheval.
TIME_TARGET = {"default": 1.25, "checks off": 1.0}
#: Op targets: accelerated ops - torcheval ops (``checks off`` has none: its target is time only).
OPS_TARGET = {"default": 2}


def _makers(pair: Pair) -> dict[str, Callable[[], Any]]:
    return {
        "torchmetrics": pair.make_torchmetrics,
        "accelerated": pair.make_accelerated,
        "torcheval": pair.make_torcheval,
    }


def _block(fn: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls / 1e3


def measure(pair: Pair, rounds: int, ops_only: bool = False) -> dict[str, Any]:
    """Op counts and (unless ``ops_only``) interleaved timings of one pair.

    Args:
        pair: the pair.
        rounds: timed rounds (each one block per implementation, ABC then CBA alternately).
        ops_only: count ops only.

    Returns:
        ``{"ops": {impl: n}, "python_calls": {impl: n}, "us": {impl: median µs}, "ratio_te": median acc/te,
        "ratio_tm": median acc/tm}`` (Python calls: functions entered per update, see ``count_python_calls``).
    """
    data = batch()
    fns = {}
    for impl, make in _makers(pair).items():
        fn = pair.call_of(make(), data)
        for _ in range(WARMUP):
            fn()
        fns[impl] = fn
    result: dict[str, Any] = {
        "ops": {impl: count_aten_ops(fn) for impl, fn in fns.items()},
        "python_calls": {impl: count_python_calls(fn) for impl, fn in fns.items()},
    }
    if ops_only:
        return result
    # Blocks of up to CALLS_PER_BLOCK calls and about BLOCK_US each, so that a slow implementation (torchmetrics'
    # macro multiclass update takes milliseconds) does not stretch a round to seconds.
    calls = {impl: max(1, min(CALLS_PER_BLOCK, int(BLOCK_US / _block(fn, 5)))) for impl, fn in fns.items()}
    samples: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    for r in range(rounds):
        order = IMPLS if r % 2 == 0 else IMPLS[::-1]
        for impl in order:
            samples[impl].append(_block(fns[impl], calls[impl]))
    result["us"] = {impl: statistics.median(values) for impl, values in samples.items()}
    acc = samples["accelerated"]
    result["ratio_te"] = statistics.median(a / t for a, t in zip(acc, samples["torcheval"], strict=True))
    result["ratio_tm"] = statistics.median(a / t for a, t in zip(acc, samples["torchmetrics"], strict=True))
    return result


def meets_targets(variant: str, result: dict[str, Any]) -> tuple[bool | None, bool | None]:
    """``(time target met, op target met)`` of a measured pair; ``None`` where there is no such target.

    Example:
        >>> meets_targets("default", {"ops": {"accelerated": 8, "torcheval": 6}, "ratio_te": 1.3})
        (False, True)
    """
    ratio = result.get("ratio_te")
    time_ok = None if ratio is None else ratio <= TIME_TARGET[variant]
    budget = OPS_TARGET.get(variant)
    ops = result["ops"]
    ops_ok = None if budget is None else ops["accelerated"] <= ops["torcheval"] + budget
    return time_ok, ops_ok


def _cell(ok: bool | None) -> str:
    return "—" if ok is None else ("met" if ok else "NOT met")


def render(rows: Sequence[tuple[Pair, dict[str, Any]]]) -> str:
    """The Markdown table of measured pairs (one line per pair)."""
    timed = all("us" in result for _, result in rows)
    header = ["metric", "call", "variant"]
    align = ["---", "---", "---"]
    if timed:
        header += ["torchmetrics µs", "accelerated µs", "torcheval µs", "acc/te", "acc/tm"]
        align += ["---:"] * 5
    header += [
        "ATen ops tm",
        "acc",
        "te",
        "Python calls tm",
        "acc",
        "te",
        "target time (acc/te)",
        "target ops (≤ te + 2)",
    ]
    align += ["---:"] * 6 + ["---", "---"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for pair, result in rows:
        cells = [pair.metric, pair.call, pair.variant]
        if timed:
            us = result["us"]
            cells += [f"{us[impl]:.1f}" for impl in IMPLS]
            cells += [f"{result['ratio_te']:.2f}", f"{result['ratio_tm']:.2f}"]
        ops = result["ops"]
        cells += [str(ops[impl]) for impl in IMPLS]
        cells += [str(result["python_calls"][impl]) for impl in IMPLS]
        time_ok, ops_ok = meets_targets(pair.variant, result)
        time_cell = f"≤ {TIME_TARGET[pair.variant]:g}: {_cell(time_ok)}" if timed else "—"
        cells += [time_cell, _cell(ops_ok)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every pair (or those matching ``-k``), print the table, optionally write JSON.

    Args:
        argv: command-line arguments (default ``sys.argv[1:]``).

    Returns:
        0 (a report, not a check).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=200, help="timed rounds per pair (default 200)")
    parser.add_argument("-k", default="", help="only pairs whose metric name contains this")
    parser.add_argument("--ops", action="store_true", help="op counts only (fast, deterministic)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")  # torchmetrics' compute-before-update and similar notices
    torch.set_num_threads(1)
    rows = []
    for pair in pairs():
        if args.k and args.k not in pair.metric:
            continue
        rows.append((pair, measure(pair, args.rounds, ops_only=args.ops)))
        print(f"measured {pair.metric} {pair.call} [{pair.variant}]", file=sys.stderr)
    print(
        f"torch {torch.__version__}, 1 intra-op thread; times: median of {args.rounds} interleaved rounds of up to "
        f"{CALLS_PER_BLOCK} calls (µs per update); acc/te, acc/tm: medians of the per-round ratios."
    )
    print()
    print(render(rows))
    judged = [meets_targets(pair.variant, result) for pair, result in rows]
    checks = [ok for pair_ok in judged for ok in pair_ok if ok is not None]
    print()
    print(f"Targets met: {sum(checks)}/{len(checks)}")
    if args.ops:
        stale = {p.key: r["ops"]["torcheval"] for p, r in rows if TORCHEVAL_OPS.get(p.key) != r["ops"]["torcheval"]}
        if stale:
            print("\nTORCHEVAL_OPS entries to record/update:")
            for key, count in stale.items():
                print(f"    {key!r}: {count},")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = [{"key": list(pair.key), **result} for pair, result in rows]
        args.json.write_text(json.dumps({"torch": torch.__version__, "pairs": payload}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
