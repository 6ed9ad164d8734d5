"""Print torchmetrics' and torchmetrics-async's collective counts for the same syncs on 2 gloo ranks.

Run from the repository root: ``python -m tests.distributed.report``.
"""

from __future__ import annotations

from typing import Any

from tests.distributed import harness, scenarios

CASES = (
    ("collection", "four", "MetricCollection(Mean, Sum, Max, Cat).compute()"),
    ("collection", "all", "MetricCollection(Mean, Sum, Max, Cat, Min, RunningMean).compute()"),
    ("mixed_states", None, "Metric with 14 states (fp16/bf16/fp32/fp64/int32/int64/bool; cat, custom, None).sync()"),
    ("aggregation_parity", "MeanMetric", "MeanMetric.compute()"),
    ("aggregation_parity", "CatMetric", "CatMetric.compute()"),
)


def counts(rank: int, world_size: int) -> dict[str, Any]:
    """Only the scenarios the report needs."""
    # dict.fromkeys, not a set: every rank must run the scenarios (and their collectives) in the same order
    return {name: getattr(scenarios, name)(rank, world_size) for name in dict.fromkeys(case[0] for case in CASES)}


def main() -> None:
    """Spawn the ranks and print one line per case (rank 0's counts; rank 1's are the same)."""
    results = harness.run(counts)[0]
    width = max(len(label) for *_, label in CASES)
    print(f"{'sync':<{width}}  torchmetrics -> torchmetrics-async")
    for name, key, label in CASES:
        result = results[name] if key is None else results[name][key]
        theirs, ours = result["tm_count"], result["our_count"]
        print(f"{label:<{width}}  {sum(theirs.values()):>2} {theirs} -> {sum(ours.values())} {ours}")


if __name__ == "__main__":
    main()
