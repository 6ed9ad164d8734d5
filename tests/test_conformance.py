"""The conformance runner's logic: patterns, the expectations file, the classification, and one small end-to-end run."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tools.conformance import (
    _WORKER_SITECUSTOMIZE,
    CI_SUBSET,
    Deviation,
    classify,
    format_report,
    load_deviations,
    main,
    pattern_matches,
)
from tools.conformance_plugin import ENV_MODE


def test_pattern_star_is_the_only_wildcard():
    assert pattern_matches("a.py::T::t[x-*]", "a.py::T::t[x-input[multi]]")
    assert pattern_matches("a.py::T::t[x]", "a.py::T::t[x]")
    assert not pattern_matches("a.py::T::t[x]", "a.py::T::t[y]")  # no character classes
    assert not pattern_matches("a.py::T::t", "a.py::T::t[x]")  # whole id
    assert pattern_matches("*::test_nan*", "b.py::test_nan_error[2]")


def test_load_deviations(tmp_path):
    path = tmp_path / "dev.toml"
    path.write_text(
        textwrap.dedent(
            """
            # comment
            [[deviation]]
            test = "a.py::t[*]"
            reason = "deferred"

            [[deviation]]
            test = "b.py::u"
            reason = "bug fix"
            """
        )
    )
    assert load_deviations(path) == [Deviation("a.py::t[*]", "deferred"), Deviation("b.py::u", "bug fix")]
    assert load_deviations(tmp_path / "missing.toml") == []
    path.write_text('[[deviation]]\ntest = "a.py::t"\n')
    with pytest.raises(ValueError, match="reason"):
        load_deviations(path)


def test_classify():
    patched = {
        "a.py::t[1]": "failed",  # patch-only, listed
        "a.py::t[2]": "passed",
        "b.py::u": "error",  # patch-only, not listed
        "c.py::v": "failed",  # failing on both
        "d.py::w": "passed",  # listed but passes: stale
        "e.py::x": "failed",  # baseline did not report it: counted as patch-only
        "f.py::y": "skipped",
    }
    baseline = {"a.py::t[1]": "passed", "b.py::u": "passed", "c.py::v": "failed"}
    deviations = [Deviation("a.py::t[*]", "r1"), Deviation("d.py::w", "r2"), Deviation("z.py::*", "r3")]
    result = classify(patched, baseline, deviations)
    assert result.expected == ["a.py::t[1]"]
    assert result.unexpected == ["b.py::u", "e.py::x"]
    assert result.both_failing == ["c.py::v"]
    assert result.stale == [Deviation("d.py::w", "r2")]
    assert result.not_run == [Deviation("z.py::*", "r3")]
    assert result.counts == {"failed": 3, "passed": 2, "error": 1, "skipped": 1}
    assert not result.ok
    report = format_report(result, {"b.py::u": "boom"}, 1.0)
    assert "UNEXPECTED" in report
    assert "boom" in report
    assert "STALE" in report
    assert report.endswith("FAILED")


def test_classify_ok_when_only_listed_or_shared_failures():
    result = classify({"a::t": "failed", "b::u": "failed"}, {"b::u": "failed"}, [Deviation("a::t", "r")])
    assert result.ok
    assert result.expected == ["a::t"]
    assert result.both_failing == ["b::u"]


def test_ci_subset_is_relative_to_upstream_tests():
    assert all(p.startswith("unittests/") for p in CI_SUBSET)


def test_missing_upstream_skips(tmp_path, capsys):
    assert main(["--upstream", str(tmp_path / "absent")]) == 0
    assert "SKIPPED" in capsys.readouterr().out


@pytest.mark.slow
def test_end_to_end(tmp_path):
    """Patched vs plain runs of a fake upstream: one listed patch-only failure, one failure on both."""
    tests = tmp_path / "up" / "tests" / "unittests"
    tests.mkdir(parents=True)
    (tests / "__init__.py").write_text("")
    (tests / "test_fake.py").write_text(
        textwrap.dedent(
            """
            import torchmetrics

            def test_accelerated():
                assert torchmetrics.MeanMetric.__module__.startswith("torchmetrics_async")

            def test_plain():
                assert torchmetrics.MeanMetric.__module__.startswith("torchmetrics.")

            def test_both():
                assert False, "fails everywhere"
            """
        )
    )
    expectations = tmp_path / "dev.toml"
    expectations.write_text(
        '[[deviation]]\ntest = "unittests/test_fake.py::test_plain"\nreason = "r"\n'
        '[[deviation]]\ntest = "unittests/test_fake.py::test_acc*"\nreason = "r"\n'
    )
    out = tmp_path / "result.json"
    status = main(["--upstream", str(tmp_path / "up"), "--expectations", str(expectations), "--json", str(out),
                   "unittests/test_fake.py"])  # fmt: skip
    result = json.loads(out.read_text())
    # test_plain fails only under patch() (listed); test_accelerated passes, so its listing is stale
    assert status == 1
    assert list(result["expected"]) == ["unittests/test_fake.py::test_plain"]
    assert result["stale"] == ["unittests/test_fake.py::test_acc*"]
    assert list(result["both_failing"]) == ["unittests/test_fake.py::test_both"]
    assert result["unexpected"] == {}
    assert result["counts"] == {"passed": 1, "failed": 2}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "module"), [("patch", "torchmetrics_async.aggregation"), ("off", "torchmetrics.aggregation")]
)
def test_ddp_pool_workers_patch_at_start_up(tmp_path, mode, module):
    """Under --ddp, upstream's spawned pool workers get patch() from a sitecustomize before any test module import."""
    (tmp_path / "sitecustomize.py").write_text(_WORKER_SITECUSTOMIZE)
    env = {**os.environ, ENV_MODE: mode, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()])}
    out = subprocess.run(
        [sys.executable, "-c", "import torchmetrics; print(torchmetrics.MeanMetric.__module__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == module
