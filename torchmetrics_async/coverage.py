"""What is accelerated: every torchmetrics ``Metric`` class, accelerated or not, and why not.

A class counts as accelerated only if it is in the registry (:func:`torchmetrics_async.registry.registry`), whose
classes make no host sync in ``update()`` and ``forward()`` (``tests/test_coverage_contract.py`` checks each one).
Everything else is listed with the reason (:func:`torchmetrics_async.registry.why_not_accelerated`), the one
:func:`~torchmetrics_async.accelerate` names when it leaves a metric unchanged.

Example:
    >>> from torchmetrics_async.coverage import accelerated_coverage
    >>> rows = {row.name: row for row in accelerated_coverage()}
    >>> rows["MeanMetric"].accelerated, rows["MulticlassLogAUC"].accelerated
    (True, False)
"""

import importlib
import warnings
from dataclasses import dataclass

import torchmetrics.aggregation
import torchmetrics.classification
import torchmetrics.nominal
import torchmetrics.regression
import torchmetrics.retrieval
import torchmetrics.segmentation

from torchmetrics_async._torchmetrics import Metric
from torchmetrics_async.classification.curves import CURVE_ORIGINS, UNBINNED_FORWARD_CAVEAT
from torchmetrics_async.registry import is_torchmetrics_class, registry, why_not_accelerated
from torchmetrics_async.retrieval import __all__ as RETRIEVAL_CLASSES

__all__ = [
    "COMPILE_CAVEATS",
    "FORWARD_CAVEATS",
    "SAMPLEWISE_COMPILE_CAVEAT",
    "CompileCaveat",
    "CoverageRow",
    "accelerated_coverage",
    "why_not_accelerated",
]

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
    **dict.fromkeys(CURVE_ORIGINS, UNBINNED_FORWARD_CAVEAT),
    **dict.fromkeys(
        (getattr(torchmetrics.retrieval, name) for name in RETRIEVAL_CLASSES),
        "forward()'s batch value groups the batch per query on the host, as compute() does; update() is sync-free",
    ),
}


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
            *(getattr(torchmetrics.retrieval, name) for name in RETRIEVAL_CLASSES),
        ),
        CompileCaveat(_BOTH, _GROWING),
    ),
}

#: The argument-dependent caveat of the classification metrics (not in :data:`COMPILE_CAVEATS`: examples are global).
SAMPLEWISE_COMPILE_CAVEAT = (
    'classification metrics with multidim_average="samplewise": their list states keep one tensor per update, so'
    " every step recompiles"
)


@dataclass(frozen=True)
class CoverageRow:
    """One torchmetrics class: where it is exported, whether it is accelerated, and if not, why.

    Attributes:
        module: the public torchmetrics module that exports it (``"torchmetrics.classification"``).
        name: the name the module exports it as (torchmetrics' deprecated top-level aliases differ from
            ``torchmetrics_class.__name__``).
        torchmetrics_class: the torchmetrics class.
        accelerated_class: the registered accelerated class, or ``None``.
        reason: why it is not accelerated (``""`` when it is).
        caveat: for an accelerated class, the arguments under which ``forward()`` still syncs (``""``: none).

    Example:
        >>> import torchmetrics
        >>> row = CoverageRow("torchmetrics.aggregation", "MeanMetric", torchmetrics.MeanMetric, None, "x")
        >>> row.accelerated
        False
    """

    module: str
    name: str
    torchmetrics_class: type
    accelerated_class: type | None
    reason: str
    caveat: str = ""

    @property
    def accelerated(self) -> bool:
        """Whether ``update()`` and ``forward()`` of the accelerated class are sync-free (it is registered).

        Example:
            >>> from torchmetrics_async.coverage import accelerated_coverage
            >>> next(row for row in accelerated_coverage() if row.name == "SumMetric").accelerated
            True
        """
        return self.accelerated_class is not None


def _public_metric_classes() -> dict[type, tuple[str, str]]:
    """Map each torchmetrics class to (public module, exported name); modules failing optional imports are skipped."""
    originals = {accelerated: origin for origin, accelerated in registry().items()}  # while patch() is in effect
    exported: dict[type, dict[str, str]] = {}
    for module_name in PUBLIC_MODULES:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = importlib.import_module(module_name)
        except Exception:  # an optional dependency's import error, whatever its type
            continue
        names = getattr(module, "__all__", None) or [name for name in vars(module) if not name.startswith("_")]
        for name in names:
            value = originals.get(getattr(module, name, None), getattr(module, name, None))
            if isinstance(value, type) and issubclass(value, Metric) and is_torchmetrics_class(value):
                exported.setdefault(value, {}).setdefault(module_name, name)
    found = {cls: _home(cls, modules) for cls, modules in exported.items()}
    for origin in registry():  # a registered class no public module exports is still listed
        found.setdefault(origin, (origin.__module__, origin.__name__))
    return found


def _home(cls: type, modules: dict[str, str]) -> tuple[str, str]:
    """Where to list ``cls``: (module, exported name).

    The module is the exporting module the class is defined under (``torchmetrics.classification`` for
    ``torchmetrics.classification.accuracy``), else ``torchmetrics``.
    """
    owners = [name for name in modules if cls.__module__ == name or cls.__module__.startswith(name + ".")]
    home = max(owners, key=len) if owners else ("torchmetrics" if "torchmetrics" in modules else next(iter(modules)))
    return home, modules[home]


def accelerated_coverage() -> list[CoverageRow]:
    """Every ``Metric`` class torchmetrics' public modules export, with whether it is accelerated and why not.

    Reads the registry, so a newly registered class is listed as accelerated. Modules whose optional dependencies are
    missing are skipped. Sorted by module, then name.

    Returns:
        One :class:`CoverageRow` per class.

    Example:
        >>> rows = accelerated_coverage()
        >>> accelerated = [row.name for row in rows if row.accelerated]
        >>> "MulticlassAccuracy" in accelerated, "BinaryLogAUC" in accelerated
        (True, False)
        >>> next(row.reason for row in rows if row.name == "MulticlassLogAUC").startswith("not yet accelerated")
        True
    """
    accelerated = registry()
    rows = [
        CoverageRow(
            module=module,
            name=name,
            torchmetrics_class=cls,
            accelerated_class=accelerated.get(cls),
            reason="" if cls in accelerated else why_not_accelerated(cls),
            caveat=FORWARD_CAVEATS.get(cls, "") if cls in accelerated else "",
        )
        for cls, (module, name) in _public_metric_classes().items()
    ]
    return sorted(rows, key=lambda row: (row.module, row.name))
