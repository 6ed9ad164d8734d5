"""2-rank gloo runs with this package exit with status 0 (issue 14, point 5), re-run as fresh processes.

Each run starts two interpreters through ``scripts/exit_crash_check.py`` (the one-command re-measurement); the
crash is timing-dependent, so a few runs per variant are a smoke check and the 50-run figure comes from
``scripts/exit-crash-check``.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

RUNS = 3
_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "exit_crash_check.py")


def _check():
    spec = importlib.util.spec_from_file_location("exit_crash_check", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("variant", ["collector", "inflight"])
def test_two_rank_runs_exit_cleanly(variant):
    check = _check()
    failures = [why for bad, why in (check.run_once(variant) for _ in range(RUNS)) if bad]
    assert not failures, f"{len(failures)}/{RUNS} runs of {variant!r} did not exit cleanly: {failures}"


def test_the_check_sees_a_crash():
    # The check must be able to fail: a run whose rank exits non-zero is reported as a crash with its reason.
    check = _check()
    bad, why = check.run_once("no-such-variant")
    assert bad
    assert "exit 1" in why
