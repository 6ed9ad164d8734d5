"""Run torchmetrics' own tests under ``torchmetrics_async.patch()`` and compare them with the accepted deviations.

``python -m tools.conformance`` (what ``scripts/conformance`` runs) runs the upstream tests under
``torchmetrics_async.patch()`` through the pytest plugin :mod:`tools.conformance_plugin`, re-runs only the failures on
plain torchmetrics, and compares the tests that fail only under ``patch()`` with the accepted deviations listed in
``tests/conformance/expected_deviations.toml``.

This module imports neither torch nor torchmetrics at import time.

Example:
    >>> outcomes = {"a.py::t[1]": "failed", "a.py::t[2]": "failed", "a.py::u": "passed", "b.py::v": "failed"}
    >>> baseline = {"a.py::t[1]": "passed", "a.py::t[2]": "passed", "b.py::v": "failed"}
    >>> deviations = [Deviation("a.py::t[*]", "deferred check")]
    >>> result = classify(outcomes, baseline, deviations)
    >>> result.expected, result.unexpected, result.both_failing
    (['a.py::t[1]', 'a.py::t[2]'], [], ['b.py::v'])
    >>> result.ok
    True
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tools.conformance_plugin import ENV_MODE, FAILING

__all__ = [
    "CI_IGNORE",
    "CI_MARK_EXPR",
    "CI_SAMPLE",
    "CI_SUBSET",
    "Classification",
    "Deviation",
    "classify",
    "format_report",
    "load_deviations",
    "main",
    "pattern_matches",
]

CI_SUBSET = (
    "unittests/bases/test_metric.py",
    "unittests/bases/test_collections.py",
    "unittests/bases/test_composition.py",
    "unittests/bases/test_saving_loading.py",
    "unittests/bases/test_hashing.py",
    "unittests/bases/test_aggregation.py",
    "unittests/wrappers",
    "unittests/classification/test_accuracy.py",
    "unittests/classification/test_precision_recall.py",
    "unittests/classification/test_f_beta.py",
    "unittests/classification/test_specificity.py",
    "unittests/classification/test_stat_scores.py",
    "unittests/classification/test_hamming_distance.py",
    "unittests/classification/test_exact_match.py",
    "unittests/classification/test_confusion_matrix.py",
    "unittests/classification/test_negative_predictive_value.py",
)
"""The CI subset, relative to upstream's ``tests/`` directory (``bases/test_ddp.py`` is left out: see the script)."""

CI_IGNORE = ("unittests/wrappers/test_feature_share.py",)
"""Left out of the CI subset: it imports the image metrics (torch-fidelity, Inception weights), none accelerated."""

CI_SAMPLE = 3
"""The CI subset runs a fixed third of each test function's parametrizations (all 9514 take ~22 min on 2 cores)."""

CI_MARK_EXPR = "not DDP"
"""Without upstream's process pool (``USE_PYTEST_POOL=1``) the ``ddp=True`` variants repeat the ``ddp=False`` ones."""

# The repository root: on the PYTHONPATH of the pytest runs, which import tools.conformance_plugin and the package.
_ROOT = Path(__file__).resolve().parents[1]
_DEFAULT_UPSTREAM = Path("..") / "shared" / "upstream" / "torchmetrics-v1.9.0"
_DEFAULT_EXPECTATIONS = Path("tests") / "conformance" / "expected_deviations.toml"
_INI = "[pytest]\nxfail_strict = true\nmarkers =\n    DDP: upstream's ddp=True variants\n"


# ------------------------------------------------------------------------------------------------- expectations
@dataclass(frozen=True)
class Deviation:
    """An accepted patch-only failure: a test id (``*`` matches any run of characters) and why it is accepted.

    Args:
        test: a pytest node id relative to upstream's ``tests/``; ``*`` is the only wildcard (``[`` is literal).
        reason: one line: which documented deviation makes the test fail.
    """

    test: str
    reason: str

    def matches(self, nodeid: str) -> bool:
        """Whether ``nodeid`` is covered by this deviation.

        Args:
            nodeid: a pytest node id.

        Returns:
            ``True`` when the pattern matches the whole id.
        """
        return pattern_matches(self.test, nodeid)


def pattern_matches(pattern: str, nodeid: str) -> bool:
    """Match a node id against a pattern whose only wildcard is ``*``.

    Args:
        pattern: the pattern; brackets and other glob characters are literal (node ids are full of ``[...]``).
        nodeid: the test id.

    Returns:
        Whether the whole id matches.

    Example:
        >>> pattern_matches("t.py::test[a-*]", "t.py::test[a-b]"), pattern_matches("t.py::test[a]", "t.py::test[b]")
        (True, False)
    """
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, nodeid) is not None


def load_deviations(path: Path) -> list[Deviation]:
    """Read the accepted deviations (TOML: an array of tables ``[[deviation]]`` with ``test`` and ``reason``).

    Args:
        path: the expectations file; a missing file means no accepted deviations.

    Returns:
        The deviations, in file order.

    Raises:
        ValueError: an entry without a ``test`` or a ``reason``.
    """
    if not path.exists():
        return []
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    data = tomllib.loads(path.read_text())
    deviations = []
    for entry in data.get("deviation", []):
        if not entry.get("test") or not entry.get("reason"):
            raise ValueError(f"{path}: every [[deviation]] needs a non-empty 'test' and 'reason': {entry}")
        deviations.append(Deviation(str(entry["test"]), str(entry["reason"])))
    return deviations


# ------------------------------------------------------------------------------------------------ classification
@dataclass
class Classification:
    """The comparison of a patched run with the baseline re-run of its failures.

    Attributes:
        counts: outcome -> number of tests in the patched run.
        unexpected: failing only under ``patch()`` and not listed (regressions).
        expected: failing only under ``patch()`` and listed as an accepted deviation.
        both_failing: failing with and without ``patch()`` (ignored).
        stale: listed deviations whose tests ran and none failed only under ``patch()``.
        not_run: listed deviations that matched no test of this run.
    """

    counts: dict[str, int] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)
    both_failing: list[str] = field(default_factory=list)
    stale: list[Deviation] = field(default_factory=list)
    not_run: list[Deviation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No unexpected patch-only failure and no stale deviation."""
        return not self.unexpected and not self.stale


def classify(
    patched: Mapping[str, str], baseline: Mapping[str, str], deviations: Sequence[Deviation]
) -> Classification:
    """Split the patched run's failures into regressions, accepted deviations and failures on both.

    A test failing under ``patch()`` counts as failing on both only if the baseline re-run ran it and it failed
    there too; a test the baseline did not report counts as patch-only (it is not hidden).

    Args:
        patched: node id -> outcome (``passed``, ``failed``, ``error``, ``skipped``, ...) under ``patch()``.
        baseline: node id -> outcome on plain torchmetrics, for (at least) the patched run's failures.
        deviations: the accepted deviations.

    Returns:
        The classification.
    """
    result = Classification()
    for outcome in patched.values():
        result.counts[outcome] = result.counts.get(outcome, 0) + 1
    patch_only = []
    for nodeid in sorted(patched):
        if patched[nodeid] not in FAILING:
            continue
        if baseline.get(nodeid) in FAILING:
            result.both_failing.append(nodeid)
        else:
            patch_only.append(nodeid)
    for nodeid in patch_only:
        if any(d.matches(nodeid) for d in deviations):
            result.expected.append(nodeid)
        else:
            result.unexpected.append(nodeid)
    for deviation in deviations:
        if not any(deviation.matches(n) for n in patched):
            result.not_run.append(deviation)
        elif not any(deviation.matches(n) for n in result.expected):
            result.stale.append(deviation)
    return result


def format_report(result: Classification, messages: Mapping[str, str], seconds: float) -> str:
    """Render the runner's report.

    Args:
        result: the classification.
        messages: node id -> first line of the failure under ``patch()``.
        seconds: the wall time of both runs.

    Returns:
        The report text.
    """
    lines = []

    def section(title: str, ids: Iterable[str]) -> None:
        ids = list(ids)
        if ids:
            lines.append(f"{title} ({len(ids)}):")
            lines.extend(f"  {n}\n      {_first_line(messages.get(n, ''))}" for n in ids)

    section("UNEXPECTED: failing only under patch()", result.unexpected)
    section("expected deviations (failing only under patch(), listed)", result.expected)
    if result.stale:
        lines.append(f"STALE: listed deviations that now pass ({len(result.stale)}):")
        lines.extend(f"  {d.test}  ({d.reason})" for d in result.stale)
    if result.not_run:
        lines.append(
            f"listed deviations not exercised by this run ({len(result.not_run)}): "
            + ", ".join(d.test for d in result.not_run)
        )
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.counts.items()))
    lines.append(
        f"conformance summary: {sum(result.counts.values())} tests under patch() ({counts}); "
        f"patch-only failures: {len(result.unexpected)} unexpected, {len(result.expected)} expected; "
        f"failing on both (ignored): {len(result.both_failing)}; stale deviations: {len(result.stale)}; "
        f"{seconds:.0f}s"
    )
    lines.append("conformance: " + ("OK" if result.ok else "FAILED"))
    return "\n".join(lines)


def _first_line(message: str) -> str:
    lines = message.strip().splitlines()
    return lines[0][:240] if lines else ""


# ------------------------------------------------------------------------------------------------------- runner
# Upstream's process-pool workers are spawned interpreters that never load the plugin: under --ddp each one patches
# at start-up through this sitecustomize (on PYTHONPATH for the run only), before it imports any test module.
_WORKER_SITECUSTOMIZE = f"""import os
if os.environ.get({ENV_MODE!r}) == "patch":
    import torchmetrics_async
    torchmetrics_async.patch()
"""


def _pytest(tests_dir: Path, mode: str, report: Path, args: Sequence[str], workdir: Path, ddp: bool = False) -> int:
    ini = workdir / "pytest.ini"
    timeout = "timeout = 900\n" if importlib.util.find_spec("pytest_timeout") else ""  # a hang fails one test
    ini.write_text(_INI + timeout)
    env = dict(os.environ)
    env.setdefault("PYTEST_REFERENCE_CACHE", str(workdir / "reference-cache"))  # upstream's default is read-only
    env["USE_PYTEST_POOL"] = "1" if ddp else "0"
    env[ENV_MODE] = mode
    paths = [str(_ROOT), env.get("PYTHONPATH", "")]
    if ddp:
        site = workdir / f"site-{mode}"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(_WORKER_SITECUSTOMIZE)
        paths.insert(0, str(site))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "tools.conformance_plugin",
        f"--tm-async={mode}",
        f"--tm-async-report={report}",
        "-p",
        "no:cacheprovider",
        "-c",
        str(ini),
        f"--rootdir={tests_dir}",
        "-q",
        "--tb=line",
        "--disable-warnings",
        "--continue-on-collection-errors",
        *args,
    ]
    return subprocess.run(command, cwd=tests_dir, env=env, check=False).returncode


def _read(report: Path) -> tuple[dict[str, str], dict[str, str]]:
    if not report.exists():
        return {}, {}
    data = json.loads(report.read_text())
    return data["outcomes"], data["messages"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the conformance check (``scripts/conformance``).

    Args:
        argv: the arguments (default: ``sys.argv[1:]``); see ``--help``.

    Returns:
        The exit status: 0 when there are no unexpected patch-only failures and no stale deviations.
    """
    parser = argparse.ArgumentParser(prog="scripts/conformance", description=__doc__.split("\n\n")[0])
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--subset", choices=("ci",), default="ci", help="the CI subset (default)")
    scope.add_argument("--full", action="store_true", help="all of upstream's tests/unittests")
    parser.add_argument(
        "--sample", type=int, default=None, metavar="K", help=f"keep ~1/K of each function (ci: {CI_SAMPLE}, else 1)"
    )
    parser.add_argument(
        "--ddp",
        action="store_true",
        help="run upstream's ddp=True variants (and bases/test_ddp.py) on its 2-process pool, workers patched too",
    )
    parser.add_argument("--upstream", type=Path, default=Path(os.environ.get("TM_UPSTREAM", _DEFAULT_UPSTREAM)))
    parser.add_argument("--expectations", type=Path, default=_DEFAULT_EXPECTATIONS)
    parser.add_argument("--json", type=Path, default=None, help="also write the classification as JSON here")
    parser.add_argument(
        "tests",
        nargs="*",
        help="paths / node ids under upstream's tests/, before any pytest option (default: the subset)",
    )
    args, pytest_args = parser.parse_known_args(argv)

    tests_dir = args.upstream / "tests"
    if not (tests_dir / "unittests").is_dir():
        print(f"conformance: SKIPPED: torchmetrics' tests not found at {tests_dir.resolve()} (no ../shared here)")
        return 0
    expectations = args.expectations.resolve()
    tests_dir = tests_dir.resolve()
    subset = not args.tests and not args.full
    k = args.sample if args.sample is not None else (CI_SAMPLE if subset else 1)
    if args.tests:
        selection = list(args.tests)
    elif args.full:
        selection = ["unittests"]
    elif args.ddp:
        selection = [*CI_SUBSET, "unittests/bases/test_ddp.py", *(f"--ignore={p}" for p in CI_IGNORE), "-m", "DDP"]
    else:
        selection = [*CI_SUBSET, *(f"--ignore={path}" for path in CI_IGNORE), "-m", CI_MARK_EXPR]
    if k > 1:
        selection.append(f"--tm-async-sample={k}")

    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tm-conformance-") as tmp:
        work = Path(tmp)
        print(f"conformance: running {' '.join(selection)} under patch() in {tests_dir}", flush=True)
        status = _pytest(tests_dir, "patch", work / "patched.json", [*selection, *pytest_args], work, args.ddp)
        patched, messages = _read(work / "patched.json")
        if status not in (0, 1) or not patched:  # 2: interrupted, 3: internal error, 4: usage, 5: no tests
            print(f"conformance: FAILED: the run under patch() ended with pytest exit status {status}")
            return 1
        failing = sorted(n for n, o in patched.items() if o in FAILING)
        baseline: dict[str, str] = {}
        if failing:
            print(f"conformance: re-running {len(failing)} failure(s) on plain torchmetrics", flush=True)
            ids = work / "failing.txt"
            ids.write_text("\n".join(failing) + "\n")
            _pytest(tests_dir, "off", work / "baseline.json", [f"@{ids}", *pytest_args], work, args.ddp)
            baseline, _ = _read(work / "baseline.json")
    result = classify(patched, baseline, load_deviations(expectations))
    print(format_report(result, messages, time.monotonic() - start))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "counts": result.counts,
                    "unexpected": {n: messages.get(n, "") for n in result.unexpected},
                    "expected": {n: messages.get(n, "") for n in result.expected},
                    "both_failing": {n: messages.get(n, "") for n in result.both_failing},
                    "stale": [d.test for d in result.stale],
                },
                indent=1,
            )
        )
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
