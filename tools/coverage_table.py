"""docs/coverage.md's "what is accelerated" tables and compile caveats, with the caveat data they print.

``scripts/coverage-table`` runs it (``python -m tools.coverage_table``): the summary table from
``tools.coverage.accelerated_coverage()``, with its three statuses (accelerated, sync-free as it is (verified), not
sync-free with the reason); ``--all``: one row per torchmetrics class, with its status and reason; ``--compile``: the
classes that a compiled step cannot keep in one graph (:data:`COMPILE_CAVEATS`).
docs/coverage.md's two tables and docs/compile.md's caveats are this module's output, pasted (``tests/test_readme.py``
checks all three are current; ``tests/test_compile_registry.py`` checks every caveat still holds).

Example:
    >>> "Binary" in compress(["BinaryAccuracy", "MulticlassAccuracy"])
    True
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torchmetrics.aggregation
import torchmetrics.classification
import torchmetrics.clustering
import torchmetrics.image
import torchmetrics.nominal
import torchmetrics.regression
import torchmetrics.retrieval
import torchmetrics.segmentation
import torchmetrics.wrappers

from tools.coverage import ACCELERATED, NOT_SYNC_FREE, SYNC_FREE_AS_IS, accelerated_coverage
from torchmetrics_async._torchmetrics import _TORCHVISION_AVAILABLE
from torchmetrics_async.accelerate import registry
from torchmetrics_async.classification.curves import CURVE_ORIGINS
from torchmetrics_async.clustering import __all__ as CLUSTERING_NAMES
from torchmetrics_async.retrieval import __all__ as RETRIEVAL_CLASSES
from torchmetrics_async.unaccelerated import IOU_FAMILY

DOCS = Path(__file__).resolve().parent.parent / "docs"
#: torchmetrics' detection classes exist (and are accelerated) only where torchvision is installed.
TORCHVISION = _TORCHVISION_AVAILABLE


@dataclass(frozen=True)
class CompileCaveat:
    """Why a registered class cannot run in one graph inside ``torch.compile(fullgraph=True)``, and where.

    Attributes:
        calls: the calls a compiled step cannot keep in one graph without recompiling (``"update"``, ``"forward"``).
        reason: why, in a sentence (the README's compile section prints it).

    Example:
        >>> CompileCaveat(("forward",), "a reason").calls
        ('forward',)
    """

    calls: tuple[str, ...]
    reason: str


_GROWING = (
    "the states are lists that grow by one tensor per update: Dynamo guards on their lengths, so every step recompiles"
)
_BOTH = ("update", "forward")

# Registered classes that a compiled step cannot keep in one graph under the examples' arguments
# (tests/examples.py): origin class -> which calls and why. tests/test_compile_registry.py checks every other
# registered class compiles to one graph without a recompile, and that each caveat here still holds, so a fixed one is
# noticed and removed. Argument-dependent caveats shared by many classes are the module constants below.
COMPILE_CAVEATS: dict[type, CompileCaveat] = {
    torchmetrics.aggregation.CatMetric: CompileCaveat(_BOTH, _GROWING),
    **dict.fromkeys(
        CURVE_ORIGINS,
        CompileCaveat(
            _BOTH,
            f"with thresholds=None (the default), {_GROWING}; forward() also computes the batch's curve, whose shape"
            " depends on the data. Binned thresholds (an int, a list or a tensor) compile to one graph",
        ),
    ),
    **dict.fromkeys(
        (
            torchmetrics.classification.BinaryCalibrationError,
            torchmetrics.classification.MulticlassCalibrationError,
            torchmetrics.classification.CalibrationError,
        ),
        CompileCaveat(_BOTH, _GROWING),
    ),
    **dict.fromkeys(
        (
            torchmetrics.regression.CosineSimilarity,
            torchmetrics.regression.SpearmanCorrCoef,
            torchmetrics.regression.KendallRankCorrCoef,
            torchmetrics.segmentation.DiceScore,  # per-sample numerator/denominator/support lists
            torchmetrics.nominal.FleissKappa,  # one counts tensor per update
            torchmetrics.image.RelativeAverageSpectralError,  # the images
            torchmetrics.image.VisualInformationFidelity,  # one per-sample score tensor per update
            *(getattr(torchmetrics.clustering, name) for name in CLUSTERING_NAMES if name[0].isupper()),
            *(getattr(torchmetrics.retrieval, name) for name in RETRIEVAL_CLASSES),
        ),
        CompileCaveat(_BOTH, _GROWING),
    ),
    **dict.fromkeys(
        (cls for cls in IOU_FAMILY if cls in registry()),  # registered where torchvision is installed
        CompileCaveat(_BOTH, f"{_GROWING} (one per image); forward() with class_metrics reads the batch's classes"),
    ),
    torchmetrics.image.RootMeanSquaredErrorUsingSlidingWindow: CompileCaveat(
        _BOTH, "the first update() creates the RMSE map, which torchmetrics keeps outside its states: one recompile"
    ),
    torchmetrics.classification.BinaryFairness: CompileCaveat(
        ("forward",), "forward()'s keys name the groups of the lowest and highest rates: a host read"
    ),
    **{  # registered where torchvision is installed
        origin: CompileCaveat(
            _BOTH,
            f"{_GROWING} (one tensor per image, as torchmetrics keeps them); forward() also evaluates the batch, whose"
            " tables have data-dependent sizes",
        )
        for origin in registry()
        if origin.__module__ == "torchmetrics.detection.mean_ap"
    },
    torchmetrics.wrappers.BootStrapper: CompileCaveat(
        ("forward",),
        "forward() computes each copy through torchmetrics' compute(), whose check that the copy was updated reads"
        " the update count a compiled update() keeps on the device: Dynamo cannot guard on it",
    ),
}

#: Argument-dependent caveats (not in :data:`COMPILE_CAVEATS`: examples are global).
ARGUMENT_COMPILE_CAVEATS = (
    'classification metrics with multidim_average="samplewise": their list states keep one tensor per update, so'
    " every step recompiles",
    "`StructuralSimilarityIndexMeasure` and `MultiScaleStructuralSimilarityIndexMeasure` with `data_range=None` (the"
    " default): a graph break in `update()` and `forward()` (torchmetrics' `_ssim_update` squares the range with"
    " Python's `pow`, which Dynamo does not trace for a tensor; found on the device, the range is one); give"
    " `data_range` to keep one graph",
)


FAMILIES = ("Binary", "Multiclass", "Multilabel")
STATUSES = (ACCELERATED, SYNC_FREE_AS_IS, NOT_SYNC_FREE)


def compress(names: list[str]) -> str:
    """Names as Markdown, ``{Binary,Multiclass}{Accuracy,F1Score}`` for families sharing their suffixes.

    Args:
        names: class names.

    Returns:
        A comma-separated Markdown list.

    Example:
        >>> compress(["BinaryAccuracy", "MulticlassAccuracy", "MeanMetric"])
        '`{Binary,Multiclass}Accuracy`, `MeanMetric`'
    """
    by_suffix: dict[str, list[str]] = defaultdict(list)
    plain: list[str] = []
    for name in sorted(names):
        match = re.match(f"^({'|'.join(FAMILIES)})(.+)$", name)
        if match:
            by_suffix[match.group(2)].append(match.group(1))
        else:
            plain.append(name)
    by_families: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for suffix, families in by_suffix.items():
        by_families[tuple(families)].append(suffix)
    parts = []
    for families, suffixes in sorted(by_families.items(), key=lambda item: (-len(item[0]), item[0])):
        head = families[0] if len(families) == 1 else "{" + ",".join(families) + "}"
        tail = suffixes[0] if len(suffixes) == 1 else "{" + ", ".join(sorted(suffixes)) + "}"
        parts.append(f"`{head}{tail}`")
    return ", ".join([*parts, *(f"`{name}`" for name in plain)])


def _kind(reason: str) -> str:
    """The reason's first clause: what the summary table counts classes by."""
    return re.split(r": |; | \(", reason, maxsplit=1)[0]


def summary() -> str:
    """One row per torchmetrics module: what is accelerated, what is sync-free as it is, how many are not and why.

    Returns:
        The Markdown table, its footnotes and the three totals.

    Example:
        >>> summary().startswith("| torchmetrics module |")
        True
    """
    rows = accelerated_coverage()
    modules: dict[str, list] = defaultdict(list)
    for row in rows:
        modules[row.module].append(row)
    lines = [
        f"| torchmetrics module | {ACCELERATED} (sync-free `update()` and `forward()`) | {SYNC_FREE_AS_IS} |"
        f" {NOT_SYNC_FREE}, why |",
        "|---|---|---|---|",
    ]
    notes: list[str] = []
    for module in sorted(modules, key=lambda name: (name == "torchmetrics", name)):
        members = modules[module]
        done = [row for row in members if row.accelerated]
        listed = [compress([row.name for row in done if not row.caveat])] if any(not r.caveat for r in done) else []
        # Classes sharing a caveat share one footnote.
        caveated: dict[str, list[str]] = defaultdict(list)
        for row in done:
            if row.caveat:
                caveated[row.caveat].append(row.name)
        for caveat, names in caveated.items():
            notes.append(f"{compress(names)}: {caveat}.")
            listed.append(f"{compress(names)}[^{len(notes)}]")
        accelerated = ", ".join(listed) or "—"
        verified = compress([row.name for row in members if row.status == SYNC_FREE_AS_IS]) or "—"
        reasons: dict[str, int] = defaultdict(int)
        for row in members:
            if row.status == NOT_SYNC_FREE:
                reasons[_kind(row.reason)] += 1
        why = "; ".join(f"{reason} ({count})" for reason, count in sorted(reasons.items(), key=lambda item: -item[1]))
        lines.append(f"| `{module}` | {accelerated} | {verified} | {why or '—'} |")
    lines.append("")
    lines.append(f"{counts(rows)}.")
    for index, note in enumerate(notes, 1):
        lines.append("")
        lines.append(f"[^{index}]: {note}")
    return "\n".join(lines)


def counts(rows: list) -> str:
    """The three totals of ``rows`` (:class:`~tools.coverage.CoverageRow`), in a sentence without its full stop.

    Example:
        >>> counts(accelerated_coverage()).startswith("Of ")
        True
    """
    by_status = {status: sum(row.status == status for row in rows) for status in STATUSES}
    return (
        f"Of {len(rows)} torchmetrics classes, {by_status[ACCELERATED]} are accelerated,"
        f" {by_status[SYNC_FREE_AS_IS]} are sync-free as they are (verified) and {by_status[NOT_SYNC_FREE]} are not"
        " sync-free"
    )


def full() -> str:
    """One row per torchmetrics class.

    Returns:
        The Markdown table.

    Example:
        >>> full().splitlines()[0]
        '| module | class | status | reason / caveat |'
    """
    lines = ["| module | class | status | reason / caveat |", "|---|---|---|---|"]
    for row in accelerated_coverage():
        lines.append(f"| `{row.module}` | `{row.name}` | {row.status} | {row.reason or row.caveat} |")
    return "\n".join(lines)


def compile_caveats() -> str:
    """docs/compile.md's list of what compiles to one graph: every registered class but those of ``COMPILE_CAVEATS``.

    Returns:
        Markdown: a sentence and one bullet per caveat (classes sharing one share its bullet).

    Example:
        >>> "`CatMetric`" in compile_caveats()
        True
    """
    by_caveat: dict[tuple[tuple[str, ...], str], list[str]] = defaultdict(list)
    for origin, caveat in COMPILE_CAVEATS.items():
        by_caveat[(caveat.calls, caveat.reason)].append(origin.__name__)
    registered = len(registry())
    lines = [
        f"{registered - len(COMPILE_CAVEATS)} of the {registered} accelerated classes compile to one graph, with no"
        " recompile, in a step calling `update()` or `forward()` (`tests/test_compile_registry.py` checks each one"
        " with example arguments). Those that cannot, in the calls named, and why:",
        "",
    ]
    for (calls, reason), names in sorted(by_caveat.items(), key=lambda item: sorted(item[1])):
        where = " and ".join(f"`{call}()`" for call in calls)
        lines.append(f"- {compress(names)} ({where}): {reason}.")
    lines += [f"- Any arguments: {caveat}." for caveat in ARGUMENT_COMPILE_CAVEATS]
    return "\n".join(lines)


def generated_docs() -> dict[Path, tuple[str, ...]]:
    """The docs files holding these tables in this environment, and the tables each must contain.

    With torchvision installed, torchmetrics' detection classes exist and are accelerated, so the tables differ:
    they live in ``docs/coverage-torchvision.md`` (written whole), the others in ``docs/coverage.md`` and
    ``docs/compile.md`` (pasted between their prose).

    Example:
        >>> all(path.suffix == ".md" for path in generated_docs())
        True
    """
    if TORCHVISION:
        return {DOCS / "coverage-torchvision.md": (summary(), full(), compile_caveats())}
    return {DOCS / "coverage.md": (summary(), full()), DOCS / "compile.md": (compile_caveats(),)}


def _splice(path: Path, start: str, end: str, text: str) -> None:
    """Replace what lies between ``start`` and ``end`` (or the file's end) in ``path`` by ``text``."""
    doc = path.read_text()
    head, rest = doc.split(start, 1)
    tail = rest[rest.index(end) :] if end else "\n"
    path.write_text(f"{head}{start}{text}{tail}")


def write_docs() -> None:
    """Write this environment's tables into the docs that hold them (see :func:`generated_docs`)."""
    if not TORCHVISION:
        _splice(DOCS / "coverage.md", "## Summary\n\n", "\n\n## Every class", summary())
        _splice(DOCS / "coverage.md", "## Every class\n\n", "", full())
        _splice(DOCS / "compile.md", "longer holds):\n\n", "\n\nWhat these do under compile", compile_caveats())
        return
    path, (table, rows, caveats) = next(iter(generated_docs().items()))
    path.write_text(
        "# Coverage with torchvision installed\n\n"
        "Where torchvision is installed (`scripts/test --latest`'s environment), torchmetrics' detection classes\n"
        "can be built, and the IoU family and `MeanAveragePrecision` are accelerated. These are\n"
        "[coverage.md](coverage.md)'s and [compile.md](compile.md)'s tables in that environment, written by\n"
        "`LATEST=1 scripts/coverage-table --write`.\n\n"
        f"## Summary\n\n{table}\n\n## Every class\n\n{rows}\n\n## What compiled code cannot keep in one graph\n\n"
        f"{caveats}\n"
    )


def main() -> None:
    """Print the summary table, with ``--all`` the per-class table, with ``--compile`` the compile caveats."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="one row per torchmetrics class, with the reason")
    parser.add_argument("--compile", action="store_true", help="the classes that do not compile to one graph")
    parser.add_argument("--write", action="store_true", help="write the tables into the docs that hold them")
    args = parser.parse_args()
    if args.write:
        write_docs()
        return
    print(full() if args.all else compile_caveats() if args.compile else summary())


if __name__ == "__main__":
    main()
