"""``python -m tools.demo --world-size 2``: the CLI end to end, on 2 spawned gloo ranks, kept tiny.

One run for the module (spawning the ranks costs seconds); each test checks one property of its JSON or its output.
No timing is asserted: step and sync times are reported, not checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(), reason="needs gloo"
)

ROOT = Path(__file__).resolve().parents[2]
MODES = ("torchmetrics", "accelerated", "accelerated_async")
KEYS = {"step_ms", "host_syncs_per_step", "host_syncs_per_log", "collectives_per_log", "sync_ms", "metrics"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, dict[str, Any]]:
    path = tmp_path_factory.mktemp("demo") / "report.json"
    command = [sys.executable, "-m", "tools.demo", "--world-size", "2", "--steps", "6"]
    command += ["--log-every", "3", "--image-size", "8", "--json", str(path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done, json.loads(path.read_text())


def test_report_has_every_mode_and_the_distributed_keys(demo):
    _, report = demo
    assert report["world_size"] == 2
    assert report["device"] == "cpu"
    assert tuple(report["modes"]) == MODES
    for mode, result in report["modes"].items():
        assert set(result) == KEYS, mode
        assert sorted(result["metrics"]) == ["accuracy", "avg_loss", "f1_score", "precision", "recall"]
        assert result["sync_ms"] > 0


def test_final_values_match_across_modes_and_ranks(demo):
    _, report = demo
    values = [result["metrics"] for result in report["modes"].values()]
    assert values[1] == values[0]
    assert values[2] == values[0]  # the async mode's last window was collected before reporting
    assert report["ranks_agree"] is True


def test_fused_sync_makes_fewer_collectives_than_torchmetrics(demo):
    _, report = demo
    modes = report["modes"]
    assert modes["accelerated"]["collectives_per_log"] < modes["torchmetrics"]["collectives_per_log"]
    # the collector launches the same fused round, one schedule per log and nothing more at collect, less the plan
    # check's all_gather: the plan was agreed at bind(), and the window's check rides in the mean's float32 sum bucket
    assert modes["accelerated_async"]["collectives_per_log"] == modes["accelerated"]["collectives_per_log"] - 1


def test_rank_zero_prints_the_table_once(demo):
    done, _ = demo
    lines = done.stdout.splitlines()
    assert lines[0] == "device cpu, world size 2, model small_cnn, 6 steps, average micro"
    assert "colls/log" in lines[1]
    assert "sync ms" in lines[1]
    assert [line.split()[0] for line in lines[2:5]] == list(MODES)
    assert lines[5] == "final metric values match across modes and ranks"
    assert len(lines) == 6
