"""Markdown ratio table (accelerated / torchmetrics) from a pytest-benchmark JSON of ``benchmarks/``.

``python benchmarks/report.py benchmarks/results/latest.json [--targets]`` prints a header (machine, versions, the
command that produced the JSON) and one row per (metric, call, variant): the median host time per call of each
implementation in µs and their ratio; lower is better, below 1 the accelerated class is faster. The median is used
because it is robust to the stray slow rounds of a noisy machine. ``--targets`` appends a column comparing each ratio
with :data:`TARGETS` and a count of targets met. The numbers are reported, never asserted.

Benchmarks are matched on their ``extra_info`` (``impl``, ``metric``, ``call``, ``variant``), as written by
``benchmarks/test_aggregation_bench.py``; entries without those keys are ignored.

Example:
    >>> def entry(impl, median_s):
    ...     info = {"impl": impl, "metric": "MeanMetric", "call": "update(0-dim)", "variant": "default"}
    ...     return {"extra_info": info, "stats": {"median": median_s}}
    >>> data = {"benchmarks": [entry("torchmetrics", 40e-6), entry("accelerated", 8e-6)]}
    >>> rows = build_rows(data)
    >>> f"{rows[0].ratio:.2f}"
    '0.20'
    >>> print(render_table(rows, targets=True))
    | metric | call | variant | torchmetrics median µs | accelerated median µs | ratio (acc/tm) | target (ratio ≤) |
    |---|---|---|---:|---:|---:|---|
    | MeanMetric | update(0-dim) | default | 40.0 | 8.0 | 0.200 | ≤ 0.25: met |
"""

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CALL_ORDER", "TARGETS", "Row", "build_rows", "main", "render_header", "render_table", "target_for"]

IMPLS = ("torchmetrics", "accelerated")

#: Row order of the calls within a metric; calls not listed come after, alphabetically.
CALL_ORDER = (
    "update(0-dim)",
    "update(float)",
    "update(128)",
    "update(0-dim, weight=0-dim)",
    "update(128, weight=128)",
    "forward(0-dim)",
    "forward(float)",
)
VARIANT_ORDER = ("default", "disable")

#: (metric, call) -> largest acceptable ratio accelerated/torchmetrics; they apply to the ``default`` variant
#: (default constructor, ``nan_strategy="warn"``), the configuration a drop-in user gets.
TARGETS: dict[tuple[str, str], float] = {
    ("MeanMetric", "update(0-dim)"): 0.25,
    ("MeanMetric", "update(float)"): 0.25,
    ("MeanMetric", "forward(0-dim)"): 0.25,
    **{
        (metric, call): 0.3
        for metric in ("SumMetric", "MaxMetric", "MinMetric")
        for call in ("update(0-dim)", "update(float)", "forward(0-dim)", "forward(float)")
    },
    ("MulticlassAccuracy(1000)", "update(logits 128x1000)"): 0.4,
    ("MulticlassF1Score(1000)", "forward(logits 128x1000)"): 0.4,
    ("article step", "5 updates, micro (as the article)"): 0.4,
}

_MISSING = "—"


@dataclass(frozen=True)
class Row:
    """One line of the table: both implementations of one (metric, call, variant).

    Attributes:
        metric: Class name, e.g. ``"MeanMetric"``.
        call: Call name, e.g. ``"update(0-dim)"``.
        variant: ``"default"`` or ``"disable"`` (``nan_strategy="disable"``).
        torchmetrics_us: Median µs per call of the torchmetrics class, ``None`` if not in the JSON.
        accelerated_us: Median µs per call of the accelerated class, ``None`` if not in the JSON.
        torchmetrics_ops: ATen ops one torchmetrics call dispatches, if recorded.
        accelerated_ops: ATen ops one accelerated call dispatches, if recorded.
    """

    metric: str
    call: str
    variant: str
    torchmetrics_us: float | None
    accelerated_us: float | None
    torchmetrics_ops: int | None = None
    accelerated_ops: int | None = None

    @property
    def ratio(self) -> float | None:
        """accelerated / torchmetrics, or ``None`` when either side is missing."""
        if self.torchmetrics_us is None or self.accelerated_us is None or self.torchmetrics_us == 0:
            return None
        return self.accelerated_us / self.torchmetrics_us


def _sort_key(row: Row) -> tuple[Any, ...]:
    call_rank = CALL_ORDER.index(row.call) if row.call in CALL_ORDER else len(CALL_ORDER)
    variant_rank = VARIANT_ORDER.index(row.variant) if row.variant in VARIANT_ORDER else len(VARIANT_ORDER)
    return row.metric, call_rank, row.call, variant_rank, row.variant


def build_rows(data: Mapping[str, Any]) -> list[Row]:
    """Pair the torchmetrics and accelerated medians of a pytest-benchmark JSON document.

    Args:
        data: The parsed JSON (``{"benchmarks": [{"extra_info": {...}, "stats": {"median": seconds}}, ...]}``).

    Returns:
        One :class:`Row` per (metric, call, variant), sorted by metric, then call (in :data:`CALL_ORDER`), then
        variant (``default`` first).

    Example:
        >>> build_rows({"benchmarks": []})
        []
    """
    medians: dict[tuple[str, str, str], dict[str, float]] = {}
    ops: dict[tuple[str, str, str], dict[str, int]] = {}
    for bench in data.get("benchmarks", []):
        info = bench.get("extra_info") or {}
        if info.get("impl") not in IMPLS or not all(key in info for key in ("metric", "call", "variant")):
            continue
        key = (info["metric"], info["call"], info["variant"])
        medians.setdefault(key, {})[info["impl"]] = bench["stats"]["median"] * 1e6
        if "aten_ops" in info:
            ops.setdefault(key, {})[info["impl"]] = info["aten_ops"]
    rows = [
        Row(
            metric,
            call,
            variant,
            pair.get("torchmetrics"),
            pair.get("accelerated"),
            ops.get((metric, call, variant), {}).get("torchmetrics"),
            ops.get((metric, call, variant), {}).get("accelerated"),
        )
        for (metric, call, variant), pair in medians.items()
    ]
    return sorted(rows, key=_sort_key)


def target_for(row: Row) -> float | None:
    """The target ratio of a row, if it has one.

    Args:
        row: A table row.

    Returns:
        The largest acceptable accelerated/torchmetrics ratio, or ``None`` (no target: other calls, ``disable``).

    Example:
        >>> target_for(Row("SumMetric", "forward(float)", "default", 100.0, 20.0))
        0.3
        >>> target_for(Row("SumMetric", "forward(float)", "disable", 100.0, 20.0)) is None
        True
    """
    if row.variant != "default":
        return None
    return TARGETS.get((row.metric, row.call))


def _fmt(value: float | None, spec: str) -> str:
    return _MISSING if value is None else format(value, spec)


def _target_cell(row: Row) -> str:
    target = target_for(row)
    if target is None:
        return _MISSING
    if row.ratio is None:
        return f"≤ {target:g}: NOT measured"
    return f"≤ {target:g}: {'met' if row.ratio <= target else 'NOT met'}"


def render_table(rows: Sequence[Row], targets: bool = False) -> str:
    """Render rows as a Markdown table.

    Args:
        rows: Rows from :func:`build_rows`.
        targets: Append the ``target (ratio ≤)`` column (``met``/``NOT met``; ``—`` where there is no target).

    Returns:
        The table, one line per row after the two header lines, without a trailing newline.

    Example:
        >>> print(render_table([Row("MaxMetric", "update(128)", "default", 30.0, None)]))
        | metric | call | variant | torchmetrics median µs | accelerated median µs | ratio (acc/tm) |
        |---|---|---|---:|---:|---:|
        | MaxMetric | update(128) | default | 30.0 | — | — |
    """
    header = ["metric", "call", "variant", "torchmetrics median µs", "accelerated median µs", "ratio (acc/tm)"]
    align = ["---", "---", "---", "---:", "---:", "---:"]
    with_ops = any(row.torchmetrics_ops is not None or row.accelerated_ops is not None for row in rows)
    if with_ops:
        header += ["ATen ops tm", "ATen ops acc"]
        align += ["---:", "---:"]
    if targets:
        header.append("target (ratio ≤)")
        align.append("---")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for row in rows:
        cells = [
            row.metric,
            row.call,
            row.variant,
            _fmt(row.torchmetrics_us, ".1f"),
            _fmt(row.accelerated_us, ".1f"),
            _fmt(row.ratio, ".3f"),
        ]
        if with_ops:
            cells += [_fmt(row.torchmetrics_ops, "d"), _fmt(row.accelerated_ops, "d")]
        if targets:
            cells.append(_target_cell(row))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_header(data: Mapping[str, Any]) -> str:
    """Describe the machine and the command behind a benchmark JSON, as Markdown lines.

    Args:
        data: The parsed JSON; ``machine_info`` entries and ``command`` are added by ``benchmarks/conftest.py``.

    Returns:
        A ``Machine:`` line and a ``Command:`` line.

    Example:
        >>> print(render_header({"machine_info": {"platform": "Linux-x86_64", "cpu_count": 2, "torch": "2.13.0"}}))
        Machine: Linux-x86_64 · 2 CPUs · torch 2.13.0 · torchmetrics ? · torchmetrics-async ?
        Command: `?`
    """
    info = data.get("machine_info") or {}
    plat = info.get("platform") or " ".join(str(info.get(k, "")) for k in ("system", "release", "machine")).strip()
    parts = [plat or "?", f"{info.get('cpu_count', '?')} CPUs"]
    if "torch_num_threads" in info:
        parts.append(f"{info['torch_num_threads']} torch threads")
    if "python_version" in info:
        parts.append(f"Python {info['python_version']}")
    parts += [f"torch {info.get('torch', '?')}", f"torchmetrics {info.get('torchmetrics', '?')}"]
    parts.append(f"torchmetrics-async {info.get('torchmetrics_async', '?')}")
    lines = ["Machine: " + " · ".join(parts)]
    if data.get("datetime"):
        lines[0] += f" · {data['datetime']}"
    lines.append(f"Command: `{data.get('command', '?')}`")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report for a pytest-benchmark JSON file.

    Args:
        argv: Command-line arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0, whether or not targets are met (this is a report, not a check).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("json", type=Path, help="pytest-benchmark JSON (--benchmark-json=PATH)")
    parser.add_argument("--targets", action="store_true", help="append the target column and a met count")
    args = parser.parse_args(argv)

    data = json.loads(args.json.read_text())
    rows = build_rows(data)
    print(render_header(data))
    print()
    print(
        "Median host time per call; ratio = accelerated / torchmetrics (lower is better). "
        'Variant `default` = default constructor (`nan_strategy="warn"`), `disable` = `nan_strategy="disable"`.'
    )
    print()
    print(render_table(rows, targets=args.targets))
    if args.targets:
        judged = [row for row in rows if target_for(row) is not None]
        met = sum(row.ratio is not None and row.ratio <= target_for(row) for row in judged)
        missing = sorted(set(TARGETS) - {(row.metric, row.call) for row in judged})
        print()
        note = f" ({len(missing)} not measured)" if missing else ""
        print(f"Targets met: {met}/{len(TARGETS)}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
