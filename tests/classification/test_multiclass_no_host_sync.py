"""Zero host syncs in the multiclass metrics' update(), forward() and reset(), proven with our sanitizer.

Every argument combination runs on CPU states (host reads and data-dependent shapes are caught) and on ``meta``, which
stands in for an accelerator: there a tensor built from host data is a host-to-device copy the sanitizer reports.
Inputs include labels and scores, extra dimensions, a batch of one, an empty extra dimension and out-of-range values
(recorded by the deferred checks, or ignored with ``validate_args=False``).
"""

import itertools
import warnings
from typing import Any

import pytest
import torch
import torchmetrics.classification as tmc

import torchmetrics_async.classification.multiclass as mc
from tests.classification._derived import assert_no_host_sync
from torchmetrics_async.deferred import DEFERRED_RAISE_OWNED
from torchmetrics_async.testing import HostSyncError, count_host_syncs, no_host_sync

C = 4
STAT_SCORES = [n for n in mc.__all__ if n not in ("MulticlassExactMatch", "MulticlassConfusionMatrix")]
IGNORE = [None, -1, 1]


def stat_scores_configs(name: str) -> list[dict[str, Any]]:
    grid = itertools.product(["micro", "macro", "weighted", "none"], [1, 2], ["global", "samplewise"], [True, False])
    configs = [
        {
            "num_classes": C,
            "average": average,
            "top_k": top_k,
            "multidim_average": multidim_average,
            "ignore_index": IGNORE[i % len(IGNORE)],
            "validate_args": validate_args,
        }
        for i, (average, top_k, multidim_average, validate_args) in enumerate(grid)
    ]
    configs += [
        {"num_classes": None, "average": "micro"},
        {"num_classes": None, "average": "micro", "multidim_average": "samplewise"},
        {"num_classes": C, "zero_division": 1, "ignore_index": 7},
    ]
    extra = {"beta": 0.5} if name == "MulticlassFBetaScore" else {}
    return [{**config, **extra} for config in configs]


CONFIGS = {name: stat_scores_configs(name) for name in STAT_SCORES}
CONFIGS["MulticlassExactMatch"] = [
    {"num_classes": C, "multidim_average": m, "ignore_index": i, "validate_args": v}
    for m, i, v in itertools.product(["global", "samplewise"], IGNORE, [True, False])
]
CONFIGS["MulticlassConfusionMatrix"] = [
    {"num_classes": C, "normalize": n, "ignore_index": i, "validate_args": v}
    for n, i, v in itertools.product([None, "true", "pred", "all"], IGNORE, [True, False])
]


def inputs(device: str, samplewise: bool, top_k: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Batches built on ``device`` by kernels (no host data), valid for the configuration's shapes."""

    def labels(*shape: int, high: int = C) -> torch.Tensor:
        return torch.randint(0, high, shape, device=device)

    def scores(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=device)

    batches = {
        "scores-extra-dims": (scores(3, C, 5), labels(3, 5)),
        "scores-batch-of-one-extra-dim": (scores(1, C, 2), labels(1, 2)),
        "scores-empty-extra-dim": (scores(2, C, 0), labels(2, 0)),
        "scores-invalid-target": (scores(3, C, 2), labels(3, 2, high=300) - 5),
        "scores-fp16": (scores(3, C, 2).half(), labels(3, 2).int()),
    }
    if not samplewise:
        batches["scores"] = (scores(8, C), labels(8))
        batches["scores-batch-of-one"] = (scores(1, C), labels(1))
    if top_k == 1:
        batches["labels-extra-dims"] = (labels(3, 5), labels(3, 5))
        batches["labels-invalid"] = (labels(3, 2, high=300) - 5, labels(3, 2, high=300) - 5)
        batches["labels-empty-extra-dim"] = (labels(2, 0), labels(2, 0))
        if not samplewise:
            batches["labels"] = (labels(8), labels(8))
    return batches


META_INPUTS = ("scores", "scores-extra-dims", "scores-invalid-target", "labels-extra-dims", "labels-invalid")


def _run(name: str, device: str, kind: str) -> int:
    """Every configuration and input inside one ``no_host_sync()`` (entering it patches torch: done once)."""
    cases = []
    configs = CONFIGS[name]
    if device == "meta":
        # Meta kernels run in Python (slow): every 4th configuration and the main inputs still cover every branch;
        # the full grid runs on the CPU.
        configs = configs[::4] + configs[-3:]
    for kwargs in configs:
        metric = getattr(mc, name)(**kwargs).to(device)  # moving the states is a copy: outside the context
        samplewise = kwargs.get("multidim_average") == "samplewise"
        for batch_name, batch in inputs(device, samplewise, kwargs.get("top_k", 1)).items():
            if device == "meta" and batch_name not in META_INPUTS:
                continue
            cases.append((f"{name}({kwargs}).{kind}({batch_name}) on {device}", metric, kind, batch))
    assert_no_host_sync(cases)
    return len(cases)


@pytest.mark.sweep
@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_update_forward_and_reset_make_no_host_sync(name: str, kind: str, device: str) -> None:
    assert _run(name, device, kind) > 0


@pytest.mark.sweep
@pytest.mark.parametrize("name", list(CONFIGS))
def test_compute_reads_the_device_once_at_most(name: str) -> None:
    """One host transfer for all check flags, plus the NaN count the normalized confusion matrix warns about."""
    for kwargs in CONFIGS[name]:
        metric = getattr(mc, name)(**kwargs)
        samplewise = kwargs.get("multidim_average") == "samplewise"
        preds, target = inputs("cpu", samplewise, kwargs.get("top_k", 1))["scores-extra-dims"]
        metric.update(preds, target if kwargs.get("num_classes") else torch.zeros_like(target))
        with count_host_syncs() as syncs, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the normalized confusion matrix warns about 0/0 entries
            metric.compute()
        checked = any(state.startswith("invalid_") for state in metric._defaults)
        expected = int(checked) + int(kwargs.get("normalize") not in (None, "none"))
        assert syncs.total == expected, f"{name}({kwargs}): {syncs.summary()}"


@pytest.mark.parametrize(
    ("reference", "call"),
    [
        (
            lambda: tmc.MulticlassAccuracy(num_classes=C),
            lambda m: m.update(torch.randn(8, C), torch.randint(0, C, (8,))),
        ),
        (  # torchmetrics validates no target when preds are scores: the sync here is the ignore_index mask
            lambda: tmc.MulticlassAccuracy(num_classes=C, average="micro", ignore_index=-1),
            lambda m: m(torch.randn(8, C), torch.randint(0, C, (8,))),
        ),
        (
            lambda: tmc.MulticlassConfusionMatrix(num_classes=C),
            lambda m: m.update(torch.randint(0, C, (8,)), torch.randint(0, C, (8,))),
        ),
        (
            lambda: tmc.MulticlassF1Score(num_classes=C, validate_args=False).to("meta"),
            lambda m: m(torch.randn(8, C, device="meta"), torch.randint(0, C, (8,), device="meta")),
        ),
    ],
)
def test_the_sanitizer_sees_torchmetrics_syncs(reference: Any, call: Any) -> None:
    """The same checks fail on torchmetrics itself: the tests above can fail."""
    metric = reference()
    with pytest.raises(HostSyncError), no_host_sync():
        call(metric)


def test_compute_reads_nothing_when_the_caller_owns_the_reads() -> None:
    """Under AsyncMetricCollector (the DEFERRED_RAISE_OWNED hook) compute() leaves flags and the NaN count unread."""
    for name, kwargs in [("MulticlassAccuracy", {}), ("MulticlassConfusionMatrix", {"normalize": "true"})]:
        metric = getattr(mc, name)(num_classes=C, **kwargs)
        metric.update(torch.randint(0, C, (8,)), torch.randint(0, C, (8,)))
        metric.__dict__[DEFERRED_RAISE_OWNED] = True
        with no_host_sync():
            metric.compute()
