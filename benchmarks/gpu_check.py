"""GPU proof kit: one run that measures every CUDA claim of the package and writes ``report.json`` + ``report.md``.

``scripts/gpu-check [--device cuda|cpu] [--quick] OUTDIR`` (or ``python -m benchmarks.gpu_check ...`` from the
repository root) runs, in order, and writes the report after each section (a run cut short keeps what it measured):

- ``environment``: versions, the device, where ``torchmetrics_async`` was imported from;
- ``cuda_tests``: ``pytest -m cuda tests/cuda`` in a subprocess (JUnit XML parsed: passed, failed, xfailed with
  reasons, skipped); on the CPU the tests are collected and skipped, and the section says so;
- ``demo``: :func:`tools.demo.run` with its three modes (torchmetrics, accelerated, accelerated_async)
  on the device: step time, host syncs per step and per log, and whether the final values are identical;
- ``table``: the article's table (:func:`benchmarks.step_share.step_table`): per model and batch size, the step time
  with no metrics, torchmetrics, accelerated, and accelerated with the collector, interleaved over repeated rounds;
  the metrics' share of the step (``(mode - none) / none``) with its spread, and host syncs per step and per log;
- ``overlap`` (CUDA only): a ``torch.profiler`` trace (CUDA activity) of the collector mode's ResNet-18 loop (batch
  128, logging every 20 steps), summarised as how much of the side stream's work ran while main-stream kernels ran,
  how long the main stream sat idle while the side stream worked, the main stream's busy share of the loop, and the
  host time of each logging step;
- ``cuda_graphs`` (CUDA only): a training step whose forward, loss and metric updates (accuracy, F1, mean loss) are one
  ``torch.compile(mode="reduce-overhead", fullgraph=True)`` graph: graph breaks, CUDA-graph skips, values against
  eager, step time against the same step without metrics; and a ``torch.cuda.graph`` capture of the updates;
- ``benchmarks``: per-call time of a handful of the ``benchmarks/`` cases, torchmetrics and accelerated, on the
  device (CUDA events on CUDA, ``perf_counter`` on the CPU) and their ratio;
- ``compile``: ``torch._dynamo.explain`` of the demo's metric updates (graph breaks and their reasons);
- ``detection`` (CUDA only): ``MeanAveragePrecision`` on 5,000 COCO-shaped images (500 with ``--quick``):
  ``compute()`` time (issue 28's target: at most 1 s for 5,000) and host syncs in ``update()``, counted and under
  ``torch.cuda.set_sync_debug_mode("error")`` (:func:`benchmarks.detection_bench.device_check`).

``--device cpu`` is a dry run that works anywhere: the CUDA-only parts are reported as ``skipped: no CUDA device``.
``--device cuda`` without a CUDA device exits with status 2 and a message. Nothing is installed: the script runs on the
interpreter that starts it, with the repository on ``PYTHONPATH``.

Example:
    >>> overlap = _interval_overlap([(0.0, 2.0), (5.0, 6.0)], [(1.0, 5.5)])
    >>> overlap
    1.5
    >>> _union([(0.0, 2.0), (1.0, 3.0), (4.0, 5.0)])
    [(0.0, 3.0), (4.0, 5.0)]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = (
    "environment",
    "cuda_tests",
    "demo",
    "table",
    "overlap",
    "cuda_graphs",
    "benchmarks",
    "compile",
    "detection",
)
NO_CUDA = "skipped: no CUDA device"

__all__ = ["NO_CUDA", "SECTIONS", "main", "render_markdown", "run_check"]


# --------------------------------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------------------------------


def _version(module: str) -> str | None:
    try:
        imported = __import__(module)
    except Exception:
        return None
    return str(getattr(imported, "__version__", "unknown"))


def section_environment(device: str, quick: bool, outdir: Path) -> dict[str, Any]:
    import torch

    import torchmetrics_async

    commit = None
    with contextlib.suppress(Exception):
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    info: dict[str, Any] = {
        "status": "ok",
        "device": device,
        "quick": quick,
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torchmetrics": _version("torchmetrics"),
        "torchvision": _version("torchvision"),
        "lightning": _version("lightning"),
        "torchmetrics_async_from": str(Path(torchmetrics_async.__file__).parent),
        "git_commit": commit,
    }
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_capability"] = list(torch.cuda.get_device_capability(0))
        info["nccl"] = bool(torch.distributed.is_available() and torch.distributed.is_nccl_available())
    return info


def _parse_junit(path: Path) -> dict[str, Any]:
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "xfailed": 0}
    failures: list[str] = []
    xfails: list[str] = []
    skip_reasons: dict[str, int] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        children = {child.tag: child for child in case}
        if "failure" in children or "error" in children:
            tag = "failure" if "failure" in children else "error"
            counts["failed" if tag == "failure" else "errors"] += 1
            message = (children[tag].get("message") or "").strip().splitlines()
            failures.append(f"{name}: {message[0][:300] if message else tag}")
        elif "skipped" in children:
            skipped = children["skipped"]
            message = (skipped.get("message") or "").strip()
            if skipped.get("type") == "pytest.xfail":
                counts["xfailed"] += 1
                xfails.append(f"{name}: {message[:500]}")
            else:
                counts["skipped"] += 1
                skip_reasons[message] = skip_reasons.get(message, 0) + 1
        else:
            counts["passed"] += 1
    return {**counts, "failures": failures, "xfails": xfails, "skip_reasons": skip_reasons}


def section_cuda_tests(device: str, quick: bool, outdir: Path) -> dict[str, Any]:
    xml = outdir / "cuda-tests.xml"
    command = [sys.executable, "-m", "pytest", "-m", "cuda", "tests/cuda", "-p", "no:cacheprovider", "-q", "-rfEX"]
    command.append(f"--junitxml={xml}")
    if any(importlib.util.find_spec(plugin) is None for plugin in ("pytest_benchmark", "xdist")):
        # pyproject's addopts name pytest-benchmark's and pytest-xdist's flags; a bare machine lacks them
        command += ["-o", "addopts=-ra"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=420, check=False)
    (outdir / "cuda-tests.log").write_text(proc.stdout + proc.stderr)
    result: dict[str, Any] = {
        "command": " ".join(["python", *command[1:]]),
        "exit_code": proc.returncode,
        "wall_s": round(time.perf_counter() - start, 1),
        "log": "cuda-tests.log",
    }
    if not xml.exists():
        result["status"] = "error: pytest wrote no JUnit XML (see cuda-tests.log)"
        return result
    result.update(_parse_junit(xml))
    ran = result["passed"] + result["failed"] + result["errors"] + result["xfailed"]
    if not ran:
        result["status"] = f"{NO_CUDA} (collected {result['skipped']} tests, all skipped)"
    elif result["failed"] or result["errors"]:
        result["status"] = "failed"
    else:
        result["status"] = "ok"
    return result


def section_demo(device: str, quick: bool, outdir: Path) -> dict[str, Any]:
    from tools import demo

    modes = (*demo.MODES, demo.ASYNC_MODE)
    if device == "cuda":
        steps, log_every, image_size = (30, 10, 0) if quick else (100, 25, 0)
    else:
        steps, log_every, image_size = (6, 2, 8) if quick else (40, 10, 0)
    report = demo.run(steps=steps, device=device, log_every=log_every, modes=modes, image_size=image_size)
    match = demo._values_match(report)
    base = report["modes"]["torchmetrics"]["step_ms"]
    for result in report["modes"].values():
        result["step_ratio_to_torchmetrics"] = result["step_ms"] / base if base else None
    accelerated_syncs = {mode: report["modes"][mode]["host_syncs_per_step"] for mode in modes[1:]}
    if device == "cuda":
        model = "resnet18 (the demo's own torchvision-free copy of torchvision's layout), batch 128, 224x224 images"
    else:
        model = f"small_cnn (the demo's CPU model), batch 64, {image_size or 32}x{image_size or 32} images"
    return {
        "status": "ok" if match and not any(accelerated_syncs.values()) else "failed",
        "model": model,
        "torchvision_present": _version("torchvision") is not None,
        "steps": steps,
        "log_every": log_every,
        "values_identical": match,
        "table": demo.format_report(report),
        "report": report,
    }


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _interval_overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length of the intersection of two interval sets (each merged first)."""
    a, b = _union(a), _union(b)
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, end - start)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def summarize_trace(trace: dict[str, Any]) -> dict[str, Any]:
    """Stream activity of a chrome trace: the main stream is the one with the most GPU time, the rest is side work.

    Args:
        trace: a ``torch.profiler`` chrome trace (``traceEvents``), times in µs.

    Returns:
        Busy, concurrent and idle times in ms.

    Example:
        >>> events = [
        ...     {"ph": "X", "cat": "kernel", "ts": 0, "dur": 10, "args": {"stream": 7}},
        ...     {"ph": "X", "cat": "kernel", "ts": 12, "dur": 8, "args": {"stream": 7}},
        ...     {"ph": "X", "cat": "kernel", "ts": 8, "dur": 6, "args": {"stream": 13}},
        ... ]
        >>> s = summarize_trace({"traceEvents": events})
        >>> s["side_busy_ms"], s["side_concurrent_ms"], s["main_idle_during_side_ms"]
        (0.006, 0.004, 0.002)
    """
    per_stream: dict[Any, list[tuple[float, float]]] = {}
    for event in trace.get("traceEvents", []):
        if event.get("ph") != "X" or event.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        stream = (event.get("args") or {}).get("stream")
        start = float(event["ts"])
        per_stream.setdefault(stream, []).append((start, start + float(event.get("dur", 0))))
    if not per_stream:
        return {"streams": 0}
    busy = {stream: sum(e - s for s, e in _union(iv)) for stream, iv in per_stream.items()}
    main = max(busy, key=busy.__getitem__)
    side = [iv for stream, ivs in per_stream.items() if stream != main for iv in ivs]
    side_union = _union(side)
    side_busy = sum(e - s for s, e in side_union)
    concurrent = _interval_overlap(side_union, per_stream[main])
    # the main stream's idle time inside each stretch of side work
    idle = sum(e - s for s, e in side_union) - concurrent
    return {
        "streams": len(per_stream),
        "main_stream": main,
        "side_streams": sorted(str(stream) for stream in per_stream if stream != main),
        "main_busy_ms": busy[main] / 1000,
        "side_busy_ms": side_busy / 1000,
        "side_concurrent_ms": concurrent / 1000,
        "side_concurrent_fraction": concurrent / side_busy if side_busy else None,
        "main_idle_during_side_ms": idle / 1000,
        "side_events": len(side),
    }


def section_table(device: str, quick: bool, outdir: Path) -> dict[str, Any]:
    from benchmarks.step_share import format_table, step_table

    if device == "cuda":
        configs = [("small_cnn", 64, 32), ("resnet18", 32, 224), ("resnet18", 128, 224)]
        settings = {"steps_per_block": 20 if quick else 40, "log_every": 20, "repeats": 3 if quick else 5}
    else:
        # CPU rows: the table's code path on a scale a CPU runs in seconds (its times say nothing about a GPU)
        # (--quick: the tiny CNN only; ResNet-18's SGD step over 11.7 M parameters takes seconds on a shared CPU)
        configs = [("small_cnn", 8, 16)] if quick else [("small_cnn", 64, 32), ("resnet18", 8, 32)]
        settings = {"steps_per_block": 2 if quick else 20, "log_every": 2 if quick else 10, "repeats": 3}
    table = step_table(configs, device, **settings)
    ours = [row["modes"][mode] for row in table["rows"] for mode in ("accelerated", "accelerated_async")]
    return {
        "status": "ok" if not any(result["syncs_per_step"] for result in ours) else "failed: syncs in our updates",
        "markdown": format_table(table),
        **table,
    }


def section_overlap(device: str, quick: bool, outdir: Path) -> dict[str, Any]:
    if device != "cuda":
        return {"status": "n/a on cpu"}
    from benchmarks.step_share import overlap_trace

    summary = overlap_trace(outdir, steps=40 if quick else 60, log_every=20)
    return {
        "status": "ok" if summary.get("side_events") else "failed: no side-stream GPU work in the trace",
        "how": "main stream = the stream with the most GPU time in the trace; every other stream's kernels and"
        " copies count as the collector's side-stream work (sync, compute, device-to-host copy)",
        **summary,
    }


def section_cuda_graphs(device: str, quick: bool, outdir: Path) -> dict[str, Any]:
    if device != "cuda":
        return {"status": "n/a on cpu"}
    from benchmarks.step_share import cuda_graph_check

    result = cuda_graph_check(steps=20 if quick else 30, repeats=3 if quick else 5)
    captured = not result["graph_breaks"] and not result["cudagraph_skips"]
    ok = captured and result["values_equal_eager"]
    return {"status": "ok" if ok else "failed: graph breaks, CUDA-graph skips or values differ", **result}


def _to(obj: Any, device: str) -> Any:
    if isinstance(obj, dict):
        return {key: value.to(device) for key, value in obj.items()}
    return obj.to(device)


def _bench_cases(device: str, quick: bool) -> list[tuple[str, str, Callable[[str], Callable[[], Any]]]]:
    """``(metric, call, make(impl) -> fn)``, from the definitions in ``benchmarks/``, inputs on ``device``."""
    import torch

    from benchmarks import test_aggregation_bench as agg
    from benchmarks import test_classification_bench as cls

    def aggregation(metric_name: str, call: str) -> Callable[[str], Callable[[], Any]]:
        def make(impl: str) -> Callable[[], Any]:
            metric = getattr(agg.IMPLS[impl], metric_name)().to(device)
            _, is_forward, names = agg.CALLS[call]
            inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in agg._inputs().items()}
            args = tuple(inputs[name] for name in names)
            target = metric if is_forward else metric.update
            return lambda: target(*args)

        return make

    def classification(key: tuple[str, str]) -> Callable[[str], Callable[[], Any]]:
        def make(impl: str) -> Callable[[], Any]:
            obj, make_call = cls.CASES[key]()
            batch = {k: v.to(device) for k, v in cls._batch().items()}
            return make_call(cls.IMPLS[impl](_to(obj, device)), batch)

        return make

    cases = [
        ("MeanMetric", "update(0-dim)", aggregation("MeanMetric", "update(0-dim)")),
        ("SumMetric", "update(float)", aggregation("SumMetric", "update(float)")),
        ("MulticlassAccuracy(1000)", "update(logits 128x1000)", None),
        ("article step", "5 updates, micro (as the article)", None),
    ]
    if not quick:
        cases[2:2] = [
            ("MeanMetric", "forward(0-dim)", aggregation("MeanMetric", "forward(0-dim)")),
            ("MaxMetric", "update(128)", aggregation("MaxMetric", "update(128)")),
        ]
        cases += [
            ("MulticlassF1Score(1000)", "forward(logits 128x1000)", None),
            ("BinaryAccuracy", "update(128 probs)", None),
        ]
    return [(m, c, make or classification((m, c))) for m, c, make in cases]


def _time_per_call(fn: Callable[[], Any], cuda: bool, rounds: int, iterations: int, warmup: int) -> dict[str, float]:
    import torch

    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    host_us: list[float] = []
    device_us: list[float] = []
    for _ in range(rounds):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        for _ in range(iterations):
            fn()
        host_us.append(1e6 * (time.perf_counter() - t0) / iterations)
        if cuda:
            end.record()
            end.synchronize()
            device_us.append(1000 * start.elapsed_time(end) / iterations)
    out = {"host_us": statistics.median(host_us)}
    if cuda:
        out["cuda_event_us"] = statistics.median(device_us)
    return out


def section_benchmarks(device: str, quick: bool, outdir: Path) -> dict[str, Any]:
    cuda = device == "cuda"
    rounds, iterations, warmup = (3, 5, 5) if quick else (15, 10, 20)
    key = "cuda_event_us" if cuda else "host_us"
    rows = []
    for metric, call, make in _bench_cases(device, quick):
        timings = {
            impl: _time_per_call(make(impl), cuda, rounds, iterations, warmup)
            for impl in ("torchmetrics", "accelerated")
        }
        base = timings["torchmetrics"][key]
        rows.append(
            {
                "metric": metric,
                "call": call,
                "torchmetrics": timings["torchmetrics"],
                "accelerated": timings["accelerated"],
                "ratio": timings["accelerated"][key] / base if base else None,
            }
        )
    return {
        "status": "ok",
        "method": (
            "median over rounds of the per-call time of a round of back-to-back calls; "
            + (
                "CUDA events around the round (device timeline, ratio on it) and perf_counter (host_us)"
                if cuda
                else "perf_counter"
            )
        ),
        "rounds": rounds,
        "iterations": iterations,
        "ratio_of": key,
        "rows": rows,
    }


def section_compile(device: str, quick: bool, outdir: Path) -> dict[str, Any]:
    import torch
    import torch._dynamo

    from tools.demo import build_metrics, update_metrics
    from torchmetrics_async import accelerate

    metrics = accelerate({name: metric.to(device) for name, metric in build_metrics(10).items()})
    generator = torch.Generator(device=device).manual_seed(0)
    args = (
        torch.rand((), generator=generator, device=device),
        torch.randn(32, 10, generator=generator, device=device),
        torch.randint(0, 10, (32,), generator=generator, device=device),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Dynamo warns once per untraceable builtin; the break reasons say it
        explained = torch._dynamo.explain(lambda *a: update_metrics(metrics, *a))(*args)
    torch._dynamo.reset()
    reasons: dict[str, int] = {}
    for reason in explained.break_reasons:
        text = " ".join(line.strip() for line in reason.reason.splitlines()[:2])[:300]
        reasons[text] = reasons.get(text, 0) + 1
    return {
        "status": "ok: no graph breaks" if not explained.graph_break_count else "graph breaks",
        "what": "torch._dynamo.explain over the demo's five metric updates (accelerated, 10 classes)",
        "graphs": explained.graph_count,
        "graph_breaks": explained.graph_break_count,
        "break_reasons": reasons,
    }


def section_detection(device: str, quick: bool, outdir: Path) -> dict[str, Any]:
    if device != "cuda":
        return {"status": "n/a on cpu"}
    from benchmarks.detection_bench import device_check
    from tools.detection_scenes import ours_class

    cls = ours_class()
    if cls is None:
        return {"status": "failed: torchmetrics_async.detection.MeanAveragePrecision is not importable"}
    result = device_check(cls, "cuda", 500 if quick else 5000)
    ok = not result["update_host_syncs"] and result["update_sync_debug_error"] is None and result["compute_s"] <= 1.0
    return {"status": "ok" if ok else "failed: a host sync in update() or compute() over 1 s", **result}


RUNNERS: dict[str, Callable[[str, bool, Path], dict[str, Any]]] = {
    "environment": section_environment,
    "cuda_tests": section_cuda_tests,
    "demo": section_demo,
    "table": section_table,
    "overlap": section_overlap,
    "cuda_graphs": section_cuda_graphs,
    "benchmarks": section_benchmarks,
    "compile": section_compile,
    "detection": section_detection,
}


# --------------------------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def render_markdown(report: dict[str, Any]) -> str:
    """``report.md``: a summary of each section's status, then one section per part of the run.

    Args:
        report: the ``report.json`` document.

    Returns:
        Markdown text.

    Example:
        >>> text = render_markdown({"device": "cpu", "quick": True, "started": "t", "sections": {}})
        >>> text.splitlines()[0]
        '# GPU proof kit report'
    """
    sections = report["sections"]
    lines = ["# GPU proof kit report", ""]
    lines.append(
        f"Device: `{report['device']}`{' (--quick)' if report.get('quick') else ''}; started {report['started']}"
    )
    if "total_s" in report:
        lines[-1] += f"; total {report['total_s']:.1f} s"
    lines += ["", "| section | status | seconds |", "|---|---|---:|"]
    for name in SECTIONS:
        if name in sections:
            lines.append(f"| {name} | {sections[name].get('status')} | {_fmt(sections[name].get('seconds'), 1)} |")
    env = sections.get("environment")
    if env:
        lines += ["", "## Environment", ""]
        keys = ("python", "torch", "torch_cuda", "torchmetrics", "torchvision", "lightning", "gpu", "nccl")
        lines += [
            f"- {key}: `{env.get(key)}`" for key in (*keys, "torchmetrics_async_from", "git_commit") if key in env
        ]
    tests = sections.get("cuda_tests")
    if tests:
        lines += ["", "## CUDA tests", "", f"Status: {tests.get('status')}", ""]
        if "passed" in tests:
            counts = ", ".join(f"{tests[k]} {k}" for k in ("passed", "failed", "errors", "xfailed", "skipped"))
            lines += [f"`{tests.get('command')}`: {counts} (exit code {tests.get('exit_code')})"]
        lines += [f"- FAILED {line}" for line in tests.get("failures", [])]
        lines += [f"- XFAIL {line}" for line in tests.get("xfails", [])]
        lines += [f"- skipped ({n}): {reason}" for reason, n in tests.get("skip_reasons", {}).items()]
        _error(lines, tests)
    demo = sections.get("demo")
    if demo:
        lines += ["", "## Demo", "", f"Status: {demo.get('status')}"]
        if "table" in demo:
            lines += ["", f"Model: {demo['model']}; torchvision present: {demo['torchvision_present']}"]
            if report.get("quick"):
                lines += ["", "--quick: few steps and no warm-up steps excluded, so the step times are not meaningful."]
            lines += [""]
            lines += ["```", demo["table"], "```"]
            ratios = {mode: r.get("step_ratio_to_torchmetrics") for mode, r in demo["report"]["modes"].items()}
            lines += ["", "Step time / torchmetrics: " + ", ".join(f"{m} {_fmt(v, 3)}" for m, v in ratios.items())]
        _error(lines, demo)
    table = sections.get("table")
    if table:
        lines += ["", "## Metrics' share of the step", "", f"Status: {table.get('status')}"]
        if "markdown" in table:
            lines += [
                "",
                f"Device `{table['device']}`; {table['repeats']} rounds of one {table['steps_per_block']}-step"
                f" block per mode (modes interleaved, order rotated), logging every {table['log_every']} steps; share ="
                " (mode - none) / none per round, median [min, max]; spread = (max - min) / median of the step time.",
                "",
                table["markdown"],
            ]
        _error(lines, table)
    overlap = sections.get("overlap")
    if overlap:
        lines += ["", "## Overlap", "", f"Status: {overlap.get('status')}"]
        if "side_busy_ms" in overlap:
            lines += [
                "",
                f"- loop: {overlap['model']}, {overlap['steps']} steps profiled, logging every {overlap['log_every']}",
                f"- side-stream GPU work (sync + compute + copy): {_fmt(overlap['side_busy_ms'], 3)} ms"
                f" ({overlap['side_events']} kernels/copies)",
                f"- of it concurrent with main-stream kernels: {_fmt(overlap['side_concurrent_ms'], 3)} ms"
                f" ({_fmt(100 * (overlap['side_concurrent_fraction'] or 0), 1)} %)",
                f"- main stream idle while the side stream worked: {_fmt(overlap['main_idle_during_side_ms'], 3)} ms",
                f"- main stream busy: {_fmt(overlap['main_busy_ms'], 1)} ms of a {_fmt(overlap['profiled_loop_ms'], 1)}"
                f" ms profiled loop ({_fmt(overlap['main_busy_pct_of_loop'], 1)} %)",
                "- host time per logging step (ms): " + ", ".join(_fmt(v, 3) for v in overlap["host_ms_per_log"]),
                f"- method: {overlap['how']}; trace: `{overlap['trace']}`",
            ]
        _error(lines, overlap)
    graphs = sections.get("cuda_graphs")
    if graphs:
        lines += ["", "## Metric updates in CUDA graphs", "", f"Status: {graphs.get('status')}"]
        if "graph_breaks" in graphs:
            steps = graphs["step_ms"]
            share = graphs["metrics_share_pct"]
            lines += [
                "",
                f"torch {graphs['torch']}; {graphs['model']}; forward, loss and the updates of accuracy, F1 and mean"
                ' loss in one `torch.compile(mode="reduce-overhead", fullgraph=True)` graph, backward and SGD outside.',
                "",
                f"- graph breaks: {graphs['graph_breaks']}; CUDA-graph skips: {graphs['cudagraph_skips']}",
                f"- values equal eager (twin updated with the same logits, {graphs['steps_checked']} steps):"
                f" {graphs['values_equal_eager']}",
                f"- step ms with metrics {_fmt(steps['with_metrics']['median'], 3)}, without"
                f" {_fmt(steps['without_metrics']['median'], 3)}; share {_fmt(share['median'], 1)} %"
                f" [{_fmt(share['min'], 1)}, {_fmt(share['max'], 1)}]",
                f"- torch.cuda.graph capture of the updates: {graphs['raw_capture']}",
            ]
        _error(lines, graphs)
    bench = sections.get("benchmarks")
    if bench:
        lines += ["", "## Benchmarks", "", f"Status: {bench.get('status')}"]
        if "rows" in bench:
            unit = bench["ratio_of"]
            lines += ["", f"Method: {bench['method']}; {bench['rounds']} rounds of {bench['iterations']} calls.", ""]
            lines += [
                f"| metric | call | torchmetrics {unit} | accelerated {unit} | ratio (acc/tm) |",
                "|---|---|---:|---:|---:|",
            ]
            for row in bench["rows"]:
                lines.append(
                    f"| {row['metric']} | {row['call']} | {_fmt(row['torchmetrics'][unit], 1)} |"
                    f" {_fmt(row['accelerated'][unit], 1)} | {_fmt(row['ratio'], 3)} |"
                )
        _error(lines, bench)
    comp = sections.get("compile")
    if comp:
        lines += ["", "## Compile readiness", "", f"Status: {comp.get('status')}"]
        if "graphs" in comp:
            lines += ["", f"{comp['what']}: {comp['graphs']} graphs, {comp['graph_breaks']} graph breaks", ""]
            lines += [f"- ({n}x) {reason}" for reason, n in comp["break_reasons"].items()]
        _error(lines, comp)
    det = sections.get("detection")
    if det:
        lines += ["", "## Detection (MeanAveragePrecision)", "", f"Status: {det.get('status')}"]
        if "compute_s" in det:
            lines += [
                "",
                f"{det['images']} images: `compute()` {det['compute_s']:.3f} s (median of {det['compute_runs_s']});"
                f' `update()` host syncs {det["update_host_syncs"]}, under `set_sync_debug_mode("error")`:'
                f" {det['update_sync_debug_error'] or 'none'}",
            ]
        _error(lines, det)
    return "\n".join(lines) + "\n"


def _error(lines: list[str], section: dict[str, Any]) -> None:
    if "traceback" in section:
        lines += ["", "```", section["traceback"].rstrip(), "```"]


def _write(outdir: Path, report: dict[str, Any]) -> None:
    (outdir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (outdir / "report.md").write_text(render_markdown(report))


def run_check(device: str, quick: bool, outdir: Path, sections: Sequence[str] = SECTIONS) -> dict[str, Any]:
    """Run the sections on ``device``, writing ``report.json`` and ``report.md`` into ``outdir`` after each one.

    Args:
        device: ``"cuda"`` or ``"cpu"``.
        quick: the short variant (fewer steps, rounds and cases).
        outdir: where the report goes (created).
        sections: which sections, in :data:`SECTIONS` order.

    Returns:
        The report.
    """
    outdir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "device": device,
        "quick": quick,
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "sections": {},
    }
    begin = time.perf_counter()
    for name in SECTIONS:
        if name not in sections:
            continue
        print(f"gpu-check: {name} ...", flush=True)
        start = time.perf_counter()
        try:
            result = RUNNERS[name](device, quick, outdir)
        except Exception as err:
            result = {"status": f"error: {type(err).__name__}: {err}"[:500], "traceback": traceback.format_exc()}
        result["seconds"] = time.perf_counter() - start
        report["sections"][name] = result
        print(f"gpu-check: {name}: {result['status']} ({result['seconds']:.1f} s)", flush=True)
        report["total_s"] = time.perf_counter() - begin
        _write(outdir, report)
    return report


def _failed(report: dict[str, Any]) -> list[str]:
    ok = ("ok", "n/a on cpu", NO_CUDA, "graph breaks")
    return [name for name, s in report["sections"].items() if not str(s.get("status", "")).startswith(ok)]


def main(argv: Sequence[str] | None = None) -> int:
    """``scripts/gpu-check [--device cuda|cpu] [--quick] OUTDIR``.

    Args:
        argv: arguments without the program name (``None``: ``sys.argv[1:]``).

    Returns:
        0 when every section that ran is ok (graph breaks in ``compile`` are reported, not failed), 1 when one
        failed or errored, 2 when ``--device cuda`` has no CUDA device.
    """
    parser = argparse.ArgumentParser(prog="scripts/gpu-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="default cuda; cpu is a dry run")
    parser.add_argument("--quick", action="store_true", help="short run (fewer steps, rounds and cases)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="default: all")
    parser.add_argument("outdir", type=Path, help="where report.json and report.md are written")
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            f"gpu-check: --device cuda, but torch {torch.__version__} sees no CUDA device"
            f" (torch.version.cuda={torch.version.cuda}); use --device cpu for a dry run.",
            file=sys.stderr,
        )
        return 2
    report = run_check(args.device, args.quick, args.outdir, args.sections)
    failed = _failed(report)
    print(f"gpu-check: report in {args.outdir}/report.md ({report['total_s']:.1f} s)", flush=True)
    if failed:
        print(f"gpu-check: failed sections: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
