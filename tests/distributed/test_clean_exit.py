"""The exit-crash check (``scripts/exit-crash-check``) itself: it must report a run that does not exit cleanly.

The crash it measures (gloo aborting at interpreter exit, "terminate called without an active exception") is not
fixed: it is intermittent (0 to 2 in 50 runs per variant here) and its cause is not established, so no test asserts
clean exits; the figures come from ``scripts/exit-crash-check --runs 50``.
"""

from __future__ import annotations

import importlib.util
import os

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "exit_crash_check.py")


def _check():
    spec = importlib.util.spec_from_file_location("exit_crash_check", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_check_sees_a_crash():
    # The check must be able to fail: a run whose rank exits non-zero is reported as a crash with its reason.
    check = _check()
    bad, why = check.run_once("no-such-variant")
    assert bad
    assert "exit 1" in why
