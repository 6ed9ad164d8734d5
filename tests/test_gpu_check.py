"""The GPU proof kit (``scripts/gpu-check``) end to end as a CPU dry run, and its pieces that need no GPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_check

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_cpu_quick_dry_run_writes_every_section(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(
        [str(ROOT / "scripts" / "gpu-check"), "--device", "cpu", "--quick", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,  # a hang guard, not a timing: the dry run took 140 s on a loaded 2-core machine
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["device"] == "cpu"
    assert report["quick"] is True
    sections = report["sections"]
    assert list(sections) == list(gpu_check.SECTIONS)
    if not torch.cuda.is_available():
        assert sections["cuda_tests"]["status"].startswith(gpu_check.NO_CUDA)
        assert sections["cuda_tests"]["skipped"] > 0
    assert sections["overlap"]["status"] == "n/a on cpu"
    assert sections["cuda_graphs"]["status"] == "n/a on cpu"
    assert sections["detection"]["status"] == "n/a on cpu"
    table = sections["table"]
    assert table["status"] == "ok"
    assert [(row["model"], len(row["modes"])) for row in table["rows"]] == [("small_cnn", 4)]
    demo = sections["demo"]
    assert demo["status"] == "ok"
    assert demo["values_identical"] is True
    assert set(demo["report"]["modes"]) == {"torchmetrics", "accelerated", "accelerated_async"}
    assert demo["report"]["modes"]["accelerated"]["host_syncs_per_step"] == 0
    rows = sections["benchmarks"]["rows"]
    assert rows
    assert all(row["ratio"] > 0 for row in rows)
    assert "graph_breaks" in sections["compile"]
    markdown = (tmp_path / "report.md").read_text()
    for heading in (
        "## Environment",
        "## CUDA tests",
        "## Demo",
        "## Metrics' share",
        "## Overlap",
        "## Benchmarks",
        "## Compile",
    ):
        assert heading in markdown


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_without_a_device_exits_non_zero(tmp_path, capsys):
    assert gpu_check.main(["--device", "cuda", str(tmp_path)]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "report.json").exists()


def test_trace_summary_splits_main_and_side_streams():
    events = [
        {"ph": "X", "cat": "kernel", "ts": 0, "dur": 100, "args": {"stream": 7}},
        {"ph": "X", "cat": "kernel", "ts": 150, "dur": 100, "args": {"stream": 7}},
        {"ph": "X", "cat": "kernel", "ts": 80, "dur": 40, "args": {"stream": 13}},
        {"ph": "X", "cat": "gpu_memcpy", "ts": 240, "dur": 30, "args": {"stream": 13}},
        {"ph": "X", "cat": "cpu_op", "ts": 0, "dur": 1000, "args": {}},
    ]
    summary = gpu_check.summarize_trace({"traceEvents": events})
    assert summary["main_stream"] == 7
    assert summary["side_events"] == 2
    assert summary["side_busy_ms"] == pytest.approx(0.070)
    assert summary["side_concurrent_ms"] == pytest.approx(0.030)
    assert summary["main_idle_during_side_ms"] == pytest.approx(0.040)


def test_step_table_counts_the_syncs_of_every_mode_on_cpu():
    """The table's code on the CPU at a tiny scale: its structure, and sync counts equal to the demo's own counts."""
    from benchmarks.step_share import MODES, NO_METRICS, format_table, step_table
    from tools import demo

    table = step_table([("small_cnn", 4, 8)], "cpu", steps_per_block=2, log_every=2, repeats=3, warmup_blocks=1)
    assert (table["repeats"], table["log_every"], table["steps_per_block"]) == (3, 2, 2)
    (row,) = table["rows"]
    assert (row["model"], row["batch_size"], row["image_size"]) == ("small_cnn", 4, 8)
    modes = row["modes"]
    assert tuple(modes) == MODES
    for mode, result in modes.items():
        assert len(result["step_ms_per_round"]) == 3
        step = result["step_ms"]
        assert step["min"] <= step["median"] <= step["max"]
        assert (result["share_pct"] is None) == (mode == NO_METRICS)
    assert (modes[NO_METRICS]["syncs_per_step"], modes[NO_METRICS]["syncs_per_log"]) == (0, 0)
    # The demo counts the same loop's syncs its own way (every step, counters on throughout).
    reference = demo.run(steps=2, device="cpu", log_every=2, modes=(*demo.MODES, demo.ASYNC_MODE), image_size=8)
    for mode in ("torchmetrics", "accelerated"):
        counted = reference["modes"][mode]
        assert modes[mode]["syncs_per_step"] == counted["host_syncs_per_step"], mode
        assert modes[mode]["syncs_per_log"] == counted["host_syncs_per_log"], mode
    assert modes["torchmetrics"]["syncs_per_step"] > 0  # the article's syncs: the count sees them
    assert modes["accelerated"]["syncs_per_step"] == 0
    # the collector's steady state: each log collects the window before (one read) and schedules this one
    assert (modes["accelerated_async"]["syncs_per_step"], modes["accelerated_async"]["syncs_per_log"]) == (0, 1)
    lines = format_table(table).splitlines()
    assert len(lines) == 2 + len(MODES)
    assert all(line.count("|") == lines[0].count("|") for line in lines)


def test_step_table_needs_whole_logging_intervals_and_three_rounds():
    from benchmarks.step_share import step_table

    with pytest.raises(ValueError, match="multiple of log_every"):
        step_table([("small_cnn", 2, 8)], "cpu", steps_per_block=3, log_every=2)
    with pytest.raises(ValueError, match="at least 3"):
        step_table([("small_cnn", 2, 8)], "cpu", steps_per_block=2, log_every=2, repeats=2)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([(0.0, 1.0)], [(1.0, 2.0)], 0.0),  # touching: no overlap
        ([(0.0, 10.0)], [(2.0, 3.0), (5.0, 7.0)], 3.0),  # nested
        ([(5.0, 7.0), (2.0, 3.0)], [(0.0, 10.0)], 3.0),  # unsorted
        ([(0.0, 4.0), (2.0, 6.0)], [(3.0, 5.0)], 2.0),  # overlapping within a set: merged first, not counted twice
        ([(0.0, 1.0), (2.0, 3.0), (4.0, 5.0)], [(0.5, 4.5)], 2.0),  # one interval across several
        ([], [(0.0, 1.0)], 0.0),
    ],
)
def test_interval_overlap(a, b, expected):
    assert gpu_check._interval_overlap(a, b) == pytest.approx(expected)
    assert gpu_check._interval_overlap(b, a) == pytest.approx(expected)


def _kernel(stream, start, duration, cat="kernel"):
    return {"ph": "X", "cat": cat, "ts": start, "dur": duration, "args": {"stream": stream}}


def test_trace_summary_two_side_streams_counted_once_where_they_overlap():
    events = [
        _kernel(7, 0, 1000),  # the main stream: 0..1000 and 1500..2000
        _kernel(7, 1500, 500),
        _kernel(21, 900, 200),  # side work 900..1100 on two streams, 1000..1100 outside main-stream kernels
        _kernel(22, 950, 150, "gpu_memcpy"),
        _kernel(22, 1600, 100, "gpu_memset"),  # fully concurrent
        {"ph": "X", "cat": "cuda_runtime", "ts": 1000, "dur": 400, "args": {"stream": 22}},  # not GPU work
    ]
    summary = gpu_check.summarize_trace({"traceEvents": events})
    assert summary["main_stream"] == 7
    assert summary["side_streams"] == ["21", "22"]
    assert summary["side_events"] == 3
    assert summary["side_busy_ms"] == pytest.approx(0.3)
    assert summary["side_concurrent_ms"] == pytest.approx(0.2)
    assert summary["side_concurrent_fraction"] == pytest.approx(2 / 3)
    assert summary["main_idle_during_side_ms"] == pytest.approx(0.1)


def test_trace_summary_side_work_entirely_inside_or_outside_main_kernels():
    inside = gpu_check.summarize_trace({"traceEvents": [_kernel(1, 0, 100), _kernel(2, 10, 20), _kernel(2, 40, 5)]})
    assert inside["side_concurrent_fraction"] == pytest.approx(1.0)
    assert inside["main_idle_during_side_ms"] == pytest.approx(0.0)
    outside = gpu_check.summarize_trace({"traceEvents": [_kernel(1, 0, 100), _kernel(2, 100, 20)]})
    assert outside["side_concurrent_fraction"] == 0.0
    assert gpu_check.summarize_trace({"traceEvents": []}) == {"streams": 0}


@pytest.mark.slow
def test_step_table_loop_trains_resnet18_on_cpu():
    """The table's ResNet-18 rows (run on the GPU) use the same loop: one tiny block and one counted interval here."""
    from benchmarks.step_share import Loop, _batches

    cpu = torch.device("cpu")
    loop = Loop("accelerated", "resnet18", cpu, log_every=2, batches=_batches(1, 2, 16, cpu, 0))
    assert loop.block(2) > 0
    assert loop.count(2) == (0.0, 10.0)  # no sync in the updates; five compute() reads and five .item() per log
    assert loop.steps == 4
