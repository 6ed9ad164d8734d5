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
        timeout=300,
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
    for heading in ("## Environment", "## CUDA tests", "## Demo", "## Overlap", "## Benchmarks", "## Compile"):
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
