"""Constructor arguments and batches for torchmetrics classes that are not accelerated: the contract test of the
classes listed as sync-free as they are (``tests/test_verified_sync_free.py``) and the measured host-sync counts of the
others run them.

``example_for_unaccelerated(cls)`` gives an :class:`Example` by class name (a deprecated top-level alias such as
``torchmetrics.PeakSignalNoiseRatio`` takes its base's); a class with no entry raises ``LookupError``.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torchmetrics.functional.audio import scale_invariant_signal_noise_ratio

__all__ = ["UnacceleratedExample", "example_for_unaccelerated"]

_B = 4


@dataclass(frozen=True)
class UnacceleratedExample:
    """Arguments to build the metric and one batch for ``update``/``forward`` (tensors, or strings for text)."""

    init: dict[str, Any]
    inputs: tuple[Any, ...]

    def to(self, device: str) -> tuple[Any, ...]:
        return tuple(_to(x, device) for x in self.inputs)


def _to(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {key: _to(item, device) for key, item in value.items()}
    return value


def _images(g: torch.Generator, size: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.rand(_B, 3, size, size, generator=g) + 0.1, torch.rand(_B, 3, size, size, generator=g) + 0.1


def _signals(g: torch.Generator, *shape: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)


def _labels(g: torch.Generator, shape: tuple[int, ...], high: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, high, shape, generator=g), torch.randint(0, high, shape, generator=g)


def _pansharpening(g: torch.Generator) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    preds = torch.rand(_B, 3, 32, 32, generator=g)
    low, high = (torch.rand(_B, 3, size, size, generator=g) for size in (8, 32))
    return preds, {"ms": low, "pan": high, "pan_lr": torch.rand(_B, 3, 8, 8, generator=g)}


def _groups(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.rand(_B * 4, generator=g), torch.arange(_B * 4) % 2, torch.arange(_B * 4) // 8


_LABEL_CLUSTERING = (
    "AdjustedMutualInfoScore",
    "AdjustedRandScore",
    "CompletenessScore",
    "FowlkesMallowsIndex",
    "HomogeneityScore",
    "MutualInfoScore",
    "NormalizedMutualInfoScore",
    "RandScore",
    "VMeasureScore",
)
_DATA_CLUSTERING = ("CalinskiHarabaszScore", "DaviesBouldinScore", "DunnIndex")
_RETRIEVAL = (
    "RetrievalFallOut",
    "RetrievalHitRate",
    "RetrievalMAP",
    "RetrievalMRR",
    "RetrievalNormalizedDCG",
    "RetrievalPrecision",
    "RetrievalPrecisionRecallCurve",
    "RetrievalRPrecision",
    "RetrievalRecall",
    "RetrievalRecallAtFixedPrecision",
)

_PREDS = ["the cat sat on the mat", "a quick brown fox"]
_TARGET = ["the cat sat on a mat", "the quick brown fox jumps"]

# Class name -> (constructor arguments, batch maker).
_TABLE: dict[str, tuple[dict[str, Any], Callable[[torch.Generator], tuple[Any, ...]]]] = {
    "PeakSignalNoiseRatio": ({"data_range": 1.0}, _images),
    "StructuralSimilarityIndexMeasure": ({"data_range": 1.0}, _images),
    "MultiScaleStructuralSimilarityIndexMeasure": ({"data_range": 1.0}, lambda g: _images(g, 180)),
    "UniversalImageQualityIndex": ({}, _images),
    "TotalVariation": ({}, lambda g: _images(g)[:1]),
    "SpectralAngleMapper": ({}, _images),
    "ErrorRelativeGlobalDimensionlessSynthesis": ({}, _images),
    "RelativeAverageSpectralError": ({}, _images),
    "RootMeanSquaredErrorUsingSlidingWindow": ({}, _images),
    "SpectralDistortionIndex": ({}, _images),
    "SpatialCorrelationCoefficient": ({}, _images),
    "VisualInformationFidelity": ({}, lambda g: _images(g, 41)),
    "SignalNoiseRatio": ({}, lambda g: _signals(g, _B, 100)),
    "ScaleInvariantSignalDistortionRatio": ({}, lambda g: _signals(g, _B, 100)),
    "ScaleInvariantSignalNoiseRatio": ({}, lambda g: _signals(g, _B, 100)),
    # filter_length (512 by default) below the signal length: otherwise torchmetrics' least-squares system is singular
    # and its LU solve fails or not depending on the BLAS path taken (seen in a full run, not alone)
    "SignalDistortionRatio": ({"filter_length": 32}, lambda g: _signals(g, _B, 400)),
    "SourceAggregatedSignalDistortionRatio": ({}, lambda g: _signals(g, _B, 2, 100)),
    "ComplexScaleInvariantSignalNoiseRatio": ({}, lambda g: _signals(g, _B, 9, 20, 2)),
    "PermutationInvariantTraining": (
        {"metric_func": scale_invariant_signal_noise_ratio, "eval_func": "max"},
        lambda g: _signals(g, _B, 2, 100),
    ),
    "CharErrorRate": ({}, lambda g: (_PREDS, _TARGET)),
    "WordErrorRate": ({}, lambda g: (_PREDS, _TARGET)),
    "MatchErrorRate": ({}, lambda g: (_PREDS, _TARGET)),
    "WordInfoLost": ({}, lambda g: (_PREDS, _TARGET)),
    "WordInfoPreserved": ({}, lambda g: (_PREDS, _TARGET)),
    "EditDistance": ({}, lambda g: (_PREDS, _TARGET)),
    "ExtendedEditDistance": ({}, lambda g: (_PREDS, _TARGET)),
    "TranslationEditRate": ({}, lambda g: (_PREDS, [[t] for t in _TARGET])),
    "BLEUScore": ({}, lambda g: (_PREDS, [[t] for t in _TARGET])),
    "SacreBLEUScore": ({}, lambda g: (_PREDS, [[t] for t in _TARGET])),
    "CHRFScore": ({}, lambda g: (_PREDS, [[t] for t in _TARGET])),
    "ROUGEScore": ({}, lambda g: (_PREDS, _TARGET)),
    "PeakSignalNoiseRatioWithBlockedEffect": ({"data_range": 1.0}, lambda g: tuple(x[:, :1] for x in _images(g))),
    "SpatialDistortionIndex": ({}, _pansharpening),
    "QualityWithNoReference": ({}, _pansharpening),
    "LipVertexError": ({"mouth_map": [0, 1, 2]}, lambda g: _signals(g, _B, 6, 3)),
    "ProcrustesDisparity": ({}, lambda g: _signals(g, _B, 10, 3)),
    "HausdorffDistance": ({"num_classes": 3, "input_format": "index"}, lambda g: _labels(g, (_B, 8, 8), 3)),
    **dict.fromkeys(_LABEL_CLUSTERING, ({}, lambda g: _labels(g, (_B * 4,), 3))),
    "ClusterAccuracy": ({"num_classes": 3}, lambda g: _labels(g, (_B * 4,), 3)),
    **dict.fromkeys(_DATA_CLUSTERING, ({}, lambda g: (torch.randn(_B * 4, 3, generator=g), torch.arange(_B * 4) % 3))),
    "BinaryFairness": ({"num_groups": 2}, _groups),
    "BinaryGroupStatRates": ({"num_groups": 2}, _groups),
    **dict.fromkeys(
        _RETRIEVAL,
        ({}, lambda g: (torch.rand(_B * 4, generator=g), torch.arange(_B * 4) % 2 == 0, torch.arange(_B * 4) // 4)),
    ),
    "Perplexity": ({}, lambda g: (torch.randn(_B, 5, 3, generator=g), torch.randint(0, 3, (_B, 5), generator=g))),
    "SQuAD": (
        {},
        lambda g: (
            [{"prediction_text": "1976", "id": "a"}],
            [{"answers": {"answer_start": [97], "text": ["1976"]}, "id": "a"}],
        ),
    ),
}


def example_for_unaccelerated(cls: type, seed: int = 0) -> UnacceleratedExample:
    """Constructor arguments and a batch for a torchmetrics class that is not accelerated.

    Raises:
        LookupError: for a class without an entry.
    """
    name = cls.__name__.lstrip("_")  # torchmetrics' deprecated top-level aliases: _PeakSignalNoiseRatio
    if name not in _TABLE:
        raise LookupError(f"no example inputs for {cls.__module__}.{cls.__qualname__}: add it to {__name__}")
    init, batch = _TABLE[name]
    return UnacceleratedExample(dict(init), batch(torch.Generator().manual_seed(seed)))
