"""What is accelerated: every torchmetrics ``Metric`` class, with one of three statuses, and why.

The data behind docs/coverage.md (``tools.coverage_table`` prints it) and the contract tests; not shipped.

``accelerated`` (registered: sync-free ``update()``/``forward()``, checked by ``tests/test_coverage_contract.py``),
``sync-free as it is (verified)`` (torchmetrics' own class, listed in :data:`VERIFIED_SYNC_FREE` only because
``tests/test_verified_sync_free.py`` passes it under ``no_host_sync()``), or ``not sync-free`` with the reason
(:data:`EXPLAINED` or :func:`~torchmetrics_async.registry.why_not_accelerated`).
"""

import ast
import importlib
import importlib.util
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torchmetrics.aggregation
import torchmetrics.classification
import torchmetrics.regression
import torchmetrics.retrieval

from torchmetrics_async._torchmetrics import Metric
from torchmetrics_async.classification.curves import CURVE_ORIGINS, UNBINNED_FORWARD_CAVEAT
from torchmetrics_async.registry import (
    EXPLAINED,
    SYNC_FREE_AS_IS,
    SYNCING_ARGUMENTS,
    VERIFIED_SYNC_FREE,
    accelerated_class_for,
    is_deprecated_alias,
    is_torchmetrics_class,
    registry,
    why_not_accelerated,
)
from torchmetrics_async.retrieval import __all__ as RETRIEVAL_CLASSES
from torchmetrics_async.unaccelerated import IOU_FAMILY

__all__ = [
    "ACCELERATED",
    "EXPLAINED",
    "FORWARD_CAVEATS",
    "NOT_SYNC_FREE",
    "SYNC_FREE_AS_IS",
    "VERIFIED_SYNC_FREE",
    "CoverageRow",
    "accelerated_coverage",
    "why_not_accelerated",
]

#: The three statuses of a :class:`CoverageRow`.
ACCELERATED = "accelerated"
NOT_SYNC_FREE = "not sync-free"

# torchmetrics' public modules (a class is listed under the one it is defined in, else under ``torchmetrics``).
PUBLIC_MODULES = (
    "torchmetrics.aggregation",
    "torchmetrics.audio",
    "torchmetrics.classification",
    "torchmetrics.clustering",
    "torchmetrics.detection",
    "torchmetrics.image",
    "torchmetrics.multimodal",
    "torchmetrics.nominal",
    "torchmetrics.regression",
    "torchmetrics.retrieval",
    "torchmetrics.segmentation",
    "torchmetrics.shape",
    "torchmetrics.text",
    "torchmetrics.video",
    "torchmetrics.wrappers",
    "torchmetrics",
)

# Registered classes whose forward() still reads the host under some arguments, and when (the contract test checks
# that each caveat holds, so a fixed one is noticed and removed).
FORWARD_CAVEATS: dict[type, str] = {
    torchmetrics.aggregation.CatMetric: (
        "forward() under nan_strategy='warn' (the default) or 'ignore' reads the NaN masks on the host: the batch it"
        " returns has NaNs dropped, a data-dependent shape; update() is sync-free under every strategy"
    ),
    torchmetrics.regression.SpearmanCorrCoef: (
        "forward() reads the host: its batch value ranks the batch with torch.unique (a data-dependent shape), as"
        " compute() does; update() is sync-free"
    ),
    torchmetrics.regression.KendallRankCorrCoef: (
        "forward() reads the host: its batch value counts ties with torch.unique/bincount (data-dependent shapes),"
        " as compute() does; update() is sync-free"
    ),
    torchmetrics.classification.BinaryFairness: (
        "forward() reads the host as compute() does: its keys name the groups of the lowest and highest rates;"
        " update() is sync-free"
    ),
    **dict.fromkeys(CURVE_ORIGINS, UNBINNED_FORWARD_CAVEAT),
    **dict.fromkeys(
        (getattr(torchmetrics.retrieval, name) for name in RETRIEVAL_CLASSES),
        "forward()'s batch value groups the batch per query on the host, as compute() does; update() is sync-free",
    ),
    **dict.fromkeys(
        (cls for cls in IOU_FAMILY if cls in registry()),  # registered where torchvision is installed
        "forward() with class_metrics=True reads the host as compute() does: its keys name the batch's classes;"
        " update() is sync-free",
    ),
    **{  # registered where torchvision is installed
        origin: "forward()'s batch value is a COCO evaluation of the batch, whose tables have data-dependent sizes"
        " (host reads, as compute() makes); update() is sync-free, with boxes and with masks"
        for origin in registry()
        if origin.__module__ == "torchmetrics.detection.mean_ap"
    },
}


@dataclass(frozen=True)
class CoverageRow:
    """One torchmetrics class: the public module and name it is exported as, its accelerated class, and if none, why.

    ``reason`` is ``""`` when accelerated (for a verified class, the arguments checked); ``caveat`` names the arguments
    under which an accelerated class's ``forward()`` still syncs, or under which it stays torchmetrics' own.
    """

    module: str
    name: str
    torchmetrics_class: type
    accelerated_class: type | None
    reason: str
    caveat: str = ""

    @property
    def status(self) -> str:
        """:data:`ACCELERATED`, :data:`SYNC_FREE_AS_IS` (in :data:`VERIFIED_SYNC_FREE`) or :data:`NOT_SYNC_FREE`."""
        if self.accelerated:
            return ACCELERATED
        return SYNC_FREE_AS_IS if self.torchmetrics_class in VERIFIED_SYNC_FREE else NOT_SYNC_FREE

    @property
    def accelerated(self) -> bool:
        """Whether the class is registered (its ``update()`` and ``forward()`` are sync-free)."""
        return self.accelerated_class is not None


def _public_metric_classes() -> dict[type, tuple[str, str]]:
    """Map each torchmetrics class to (public module, exported name); modules failing optional imports are skipped."""
    originals = {accelerated: origin for origin, accelerated in registry().items()}  # while patch() is in effect
    exported: dict[type, dict[str, str]] = {}
    for module_name in PUBLIC_MODULES:
        try:
            module = _quiet_import(module_name)
        except Exception:  # an optional dependency's import error, whatever its type
            continue
        names = getattr(module, "__all__", None) or [name for name in vars(module) if not name.startswith("_")]
        optional = _optional_exports(module_name)
        for name in [*names, *(name for name in optional if name not in names)]:
            value = getattr(module, name) if hasattr(module, name) else getattr(_quiet_import(optional[name]), name)
            value = originals.get(value, value)
            value = vars(value).get("_decorated", value) if isinstance(value, type) else value  # a patched alias
            if isinstance(value, type) and issubclass(value, Metric) and is_torchmetrics_class(value):
                exported.setdefault(value, {}).setdefault(module_name, name)
    found = {cls: _home(cls, modules) for cls, modules in exported.items()}
    for origin in registry():  # a registered class no public module exports is still listed
        found.setdefault(origin, (origin.__module__, origin.__name__))
    return found


def _optional_exports(module_name: str) -> dict[str, str]:
    """Names ``module_name`` exports only when an optional package is installed, with the module defining each.

    torchmetrics imports them under ``if _TORCHVISION_AVAILABLE:`` (torch-fidelity, transformers, pesq, ...) in its
    ``__init__.py``; read from the source, they are listed whatever is installed (their defining modules import
    without the package).
    """
    tree = ast.parse(Path(importlib.util.find_spec(module_name).origin).read_text())
    return {
        alias.asname or alias.name: node.module
        for branch in tree.body
        if isinstance(branch, ast.If)
        for node in ast.walk(branch)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torchmetrics.")
        for alias in node.names
    }


def _quiet_import(module_name: str) -> ModuleType:
    """``importlib.import_module`` without the deprecation warnings torchmetrics' modules give."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(module_name)


def _home(cls: type, modules: dict[str, str]) -> tuple[str, str]:
    """Where to list ``cls``: the exporting module it is defined under (else ``torchmetrics``), and its name there."""
    owners = [name for name in modules if cls.__module__ == name or cls.__module__.startswith(name + ".")]
    home = max(owners, key=len) if owners else ("torchmetrics" if "torchmetrics" in modules else next(iter(modules)))
    return home, modules[home]


def accelerated_coverage() -> list[CoverageRow]:
    """Every ``Metric`` class torchmetrics' public modules export (by module, then name), from the registry.

    Example:
        >>> rows = {row.name: row for row in accelerated_coverage()}
        >>> rows["MulticlassAccuracy"].status, rows["WordErrorRate"].status
        ('accelerated', 'not sync-free')
    """
    rows = []
    for cls, (module, name) in _public_metric_classes().items():
        # A deprecated alias (torchmetrics.RetrievalMAP) is accelerated by the class it is rebased on.
        accelerated = accelerated_class_for(cls) if is_deprecated_alias(cls) else registry().get(cls)
        listed = cls.__base__ if is_deprecated_alias(cls) else cls
        caveat = FORWARD_CAVEATS.get(listed) or SYNCING_ARGUMENTS.get(listed, ("", "", ""))[2] if accelerated else ""
        reason = "" if accelerated else why_not_accelerated(cls)
        rows.append(CoverageRow(module, name, cls, accelerated, reason, caveat))
    return sorted(rows, key=lambda row: (row.module, row.name))
