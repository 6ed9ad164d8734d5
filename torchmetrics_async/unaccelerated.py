"""What is known about the torchmetrics classes this package does not accelerate, as data.

``VERIFIED_SYNC_FREE``: classes whose own ``update()`` and ``forward()`` make no host sync (the test suite runs each
under ``no_host_sync()``); ``EXPLAINED``: the rest, with the reason; ``SYNCING_ARGUMENTS``: accelerated classes whose
instances stay torchmetrics' own under some arguments, with the reason.
:func:`torchmetrics_async.registry.why_not_accelerated` words them.

Example:
    >>> import torchmetrics
    >>> torchmetrics.image.PeakSignalNoiseRatio in VERIFIED_SYNC_FREE
    True
"""

import torchmetrics
import torchmetrics.audio
import torchmetrics.classification
import torchmetrics.clustering
import torchmetrics.detection
import torchmetrics.image
import torchmetrics.multimodal
import torchmetrics.segmentation
import torchmetrics.shape
import torchmetrics.text
import torchmetrics.wrappers

# torchmetrics exports these only when their optional package is installed; their modules import without it, so the
# coverage table lists them in every environment.
from torchmetrics.audio.dnsmos import DeepNoiseSuppressionMeanOpinionScore
from torchmetrics.audio.nisqa import NonIntrusiveSpeechQualityAssessment
from torchmetrics.audio.pesq import PerceptualEvaluationSpeechQuality
from torchmetrics.audio.srmr import SpeechReverberationModulationEnergyRatio
from torchmetrics.audio.stoi import ShortTimeObjectiveIntelligibility
from torchmetrics.detection.ciou import CompleteIntersectionOverUnion
from torchmetrics.detection.diou import DistanceIntersectionOverUnion
from torchmetrics.detection.giou import GeneralizedIntersectionOverUnion
from torchmetrics.detection.iou import IntersectionOverUnion
from torchmetrics.detection.mean_ap import MeanAveragePrecision
from torchmetrics.image.fid import FrechetInceptionDistance
from torchmetrics.image.inception import InceptionScore
from torchmetrics.image.kid import KernelInceptionDistance
from torchmetrics.image.lpip import LearnedPerceptualImagePatchSimilarity
from torchmetrics.image.perceptual_path_length import PerceptualPathLength
from torchmetrics.multimodal.clip_iqa import CLIPImageQualityAssessment
from torchmetrics.multimodal.clip_score import CLIPScore
from torchmetrics.text.bert import BERTScore
from torchmetrics.text.infolm import InfoLM
from torchmetrics.video.vmaf import VideoMultiMethodAssessmentFusion

from torchmetrics_async._torchmetrics import _TORCHVISION_AVAILABLE

__all__ = ["EXPLAINED", "IOU_FAMILY", "SYNCING_ARGUMENTS", "SYNC_FREE_AS_IS", "VERIFIED_SYNC_FREE"]

#: torchmetrics' detection IoU classes (they need torchvision; accelerated where it is installed).
IOU_FAMILY = (
    IntersectionOverUnion,
    GeneralizedIntersectionOverUnion,
    DistanceIntersectionOverUnion,
    CompleteIntersectionOverUnion,
)

#: The status of a torchmetrics class listed in :data:`VERIFIED_SYNC_FREE` (the coverage table in ``docs/coverage.md``).
SYNC_FREE_AS_IS = "sync-free as it is (verified)"


def _with_aliases(*classes: type) -> tuple[type, ...]:
    """``classes`` and torchmetrics' deprecated top-level aliases of them (``torchmetrics.PeakSignalNoiseRatio``)."""
    aliases = (getattr(torchmetrics, cls.__name__, None) for cls in classes)
    return (*classes, *(a for a in aliases if isinstance(a, type) and a not in classes and issubclass(a, classes)))


_SCORE_SUMS = "update() adds per-sample scores to sum states"
# class -> the arguments checked. The tests run every entry under no_host_sync() on CPU and meta: none is a guess.
VERIFIED_SYNC_FREE: dict[type, str] = {
    **dict.fromkeys(
        _with_aliases(
            torchmetrics.image.PeakSignalNoiseRatio,
            torchmetrics.image.UniversalImageQualityIndex,
            torchmetrics.image.TotalVariation,
            torchmetrics.image.SpectralAngleMapper,
            torchmetrics.image.ErrorRelativeGlobalDimensionlessSynthesis,
            torchmetrics.image.SpectralDistortionIndex,
            torchmetrics.audio.SignalNoiseRatio,
            torchmetrics.audio.ScaleInvariantSignalDistortionRatio,
            torchmetrics.audio.ScaleInvariantSignalNoiseRatio,
            torchmetrics.audio.SignalDistortionRatio,
            torchmetrics.audio.SourceAggregatedSignalDistortionRatio,
            torchmetrics.audio.ComplexScaleInvariantSignalNoiseRatio,
            torchmetrics.multimodal.LipVertexError,
            torchmetrics.shape.ProcrustesDisparity,
        ),
        f"{_SCORE_SUMS} or keeps them in list states",
    ),
    **dict.fromkeys(
        (torchmetrics.image.SpatialDistortionIndex, torchmetrics.image.QualityWithNoReference),
        "verified with target['pan_lr'] given; without it torchmetrics downsamples with torchvision (not installed"
        " here)",
    ),
}

_KEEP_OUT = "keep it out of the training step (update it where host work is affordable, e.g. in validation)"
_TAKES_STRINGS = f"takes strings: it tokenizes and compares them in Python on the host; {_KEEP_OUT}"
_PRETRAINED = (
    "needs a pretrained feature extractor: its weights cannot be loaded here, so it was not measured; keep it out"
    " of the training step"
)
_TORCH_FIDELITY = (
    "needs a feature extractor: torch-fidelity's InceptionV3 by default (a weights download); with a user-supplied"
    " feature module, update() makes no host sync (measured on the CPU and meta, without torch-fidelity)"
)


def _host_audio(package: str) -> str:
    return (
        f"computes on the host: its source copies the signals to numpy (.cpu().numpy()) for the {package} package, not"
        f" installed here, so it was not measured; {_KEEP_OUT}"
    )


# class -> why it is not sync-free and what a user can do.
EXPLAINED: dict[type, str] = {
    **dict.fromkeys(
        _with_aliases(
            *(
                getattr(torchmetrics.text, name)
                for name in torchmetrics.text.__all__
                if name not in ("Perplexity",) and isinstance(getattr(torchmetrics.text, name), type)
            )
        ),
        _TAKES_STRINGS,
    ),
    **dict.fromkeys((BERTScore, InfoLM), f"{_TAKES_STRINGS} (it needs transformers, not installed here)"),
    **dict.fromkeys(
        (
            torchmetrics.image.DeepImageStructureAndTextureSimilarity,
            torchmetrics.image.MemorizationInformedFrechetInceptionDistance,
            LearnedPerceptualImagePatchSimilarity,
            PerceptualPathLength,
            CLIPImageQualityAssessment,
            CLIPScore,
        ),
        _PRETRAINED,
    ),
    **dict.fromkeys(
        (FrechetInceptionDistance, KernelInceptionDistance),
        f"{_TORCH_FIDELITY}; torchmetrics' forward() raises, as a batch holds only real or only fake images",
    ),
    InceptionScore: (
        f"{_TORCH_FIDELITY}, nor does forward(); compute() splits the features by a random permutation, so a value"
        " computed off the critical path differs from torchmetrics' unless the random state is shared"
    ),
    # Where torchvision is installed the family is accelerated (torchmetrics_async.detection registers it).
    **dict.fromkeys(
        () if _TORCHVISION_AVAILABLE else IOU_FAMILY,
        "needs torchvision (not installed here): torchmetrics' class raises at construction, so there is nothing to"
        " convert; torchmetrics_async.detection's class of the same name computes its values without torchvision,"
        " with no host sync in update() (torchmetrics' own reads the host once per image, measured with torchvision"
        " 0.29.1 on the CPU)",
    ),
    # With torchvision, torchmetrics_async.detection.MeanAveragePrecision is its accelerated subclass (registered).
    **(
        {}
        if _TORCHVISION_AVAILABLE
        else {
            MeanAveragePrecision: (
                "torchmetrics' class cannot be built without torchvision (not installed here);"
                " torchmetrics_async.detection.MeanAveragePrecision computes it without torchvision or pycocotools"
                " (no host sync in update(), the COCO evaluation on the device), as a plain Metric: installed with"
                " torchvision, it is this class's accelerated subclass"
            )
        }
    ),
    PerceptualEvaluationSpeechQuality: _host_audio("pesq"),
    ShortTimeObjectiveIntelligibility: _host_audio("pystoi"),
    SpeechReverberationModulationEnergyRatio: _host_audio("gammatone and torchaudio"),
    DeepNoiseSuppressionMeanOpinionScore: _host_audio("librosa and onnxruntime (and downloaded models)"),
    NonIntrusiveSpeechQualityAssessment: _host_audio("librosa (and downloaded weights)"),
    VideoMultiMethodAssessmentFusion: (
        "needs the optional torch_vmaf package: not installed here, so it was not measured"
    ),
    **dict.fromkeys(
        _with_aliases(torchmetrics.audio.PermutationInvariantTraining),
        "with 3 or more speakers (speaker-wise, scipy installed) every update() solves the assignment with scipy's"
        " linear_sum_assignment on the host (4 host syncs per update() measured with 3 speakers on the CPU); with 2, it"
        " syncs once, in the process's first update() per number of speakers and device (torchmetrics copies its"
        " cached table of permutations to the device), and no later update() or forward() syncs. The host solver is"
        " the algorithm; keep it out of the training step",
    ),
    torchmetrics.segmentation.HausdorffDistance: (
        "measures distances between edge pixels gathered by boolean masks (data-dependent shapes), per sample and class"
        " in Python; a padded form (edge maps, a separable minimum) gives torchmetrics' exact values on square images"
        " only: torchmetrics indexes its distance map with the height as row stride (other values on wider images, an"
        f" IndexError on taller ones) and raises in update() for a class absent from both inputs; {_KEEP_OUT}"
    ),
    torchmetrics.clustering.ClusterAccuracy: (
        "needs the optional torch_linear_assignment package: a compiled library not installed here, so it was not"
        " measured"
    ),
    torchmetrics.wrappers.MultioutputWrapper: (
        "a wrapper whose own update() and forward() sync: for each output they build the index of torch.index_select"
        " with torch.tensor(i, device=...), a host-to-device copy on an accelerator (4 host syncs per update()"
        " measured with 2 outputs on the meta device), and with remove_nans=True (the default) they drop NaN rows with"
        " boolean masks, a data-dependent shape (4 more on the CPU); accelerate() converts the metrics it holds"
    ),
}

#: class -> (attribute, value, reason): an instance whose attribute has that value stays torchmetrics' own (its held
#: metrics accelerated), and accelerate() says why. The tests measure the host syncs each reason gives.
SYNCING_ARGUMENTS: dict[type, tuple[str, object, str]] = {
    torchmetrics.wrappers.BootStrapper: (
        "sampling_strategy",
        "poisson",
        "sampling_strategy='poisson' (the default) resamples to a data-dependent length: torchmetrics draws the counts"
        " and expands them with repeat_interleave (6 host syncs per update() and 18 per forward() measured with 3"
        " bootstraps on the CPU), so it stays torchmetrics' own BootStrapper, its copies accelerated;"
        " sampling_strategy='multinomial' is accelerated",
    ),
}
