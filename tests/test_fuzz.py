"""The differential fuzzer (tools/fuzz.py) as a test: a fixed seed and a fixed number of sequences, no findings.

A fixed count, not a time budget, so what is covered does not depend on the machine's speed. ``scripts/fuzz`` runs the
same fuzzer longer by hand (``--seconds N --seed S``).
"""

import importlib.util
import pathlib
import random
from collections.abc import Callable

import pytest
import torch

from tools import fuzz

README = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
SEED = 0
CASES = 300  # 20 s to 50 s on 2 shared cores (7 agents); every registered class at least once


@pytest.mark.slow
def test_fuzzer_finds_nothing_outside_the_readme_deviations() -> None:
    report = fuzz.fuzz(SEED, cases=CASES, shrink_seconds=2.0)
    assert report.cases == CASES
    assert report.classes == {origin.__name__ for origin in fuzz.targets()}  # every registered class
    assert not report.findings, "\n\n".join(text for _, _, text in report.findings)


@pytest.mark.parametrize("allowance", fuzz.ALLOWED, ids=[a.what[:40] for a in fuzz.ALLOWED])
def test_every_allowance_quotes_a_readme_deviation_row(allowance: fuzz.Allowance) -> None:
    assert f"| {allowance.what} |" in README, f"not a README deviation row's 'what' cell: {allowance.what!r}"


def test_every_registered_class_has_arguments_and_inputs() -> None:
    rng = random.Random(0)
    for origin in fuzz.targets():
        case = fuzz.draw_case(rng, origin)
        assert case.ops[-1].kind == "compute"
        fuzz.draw_batch(rng, origin, case.init)  # LookupError for a family without an input generator


def test_a_planted_wrong_value_is_found_and_reproduced(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchmetrics_async import MeanMetric

    original = MeanMetric.compute
    monkeypatch.setattr(MeanMetric, "compute", lambda self: original(self) + 1e-3)
    report = fuzz.fuzz(1, cases=20, pattern="^MeanMetric$", shrink_seconds=5.0)
    assert report.findings
    case, finding, text = report.findings[0]
    assert "value" in finding.kind
    assert "torchmetrics_async.MeanMetric" in text or "torchmetrics_async.aggregation.MeanMetric" in text
    # the shrunk case still fails, and its reproducer is Python that runs
    assert fuzz.run_case(case)[0] is not None
    compile(text, "<reproducer>", "exec")


def test_a_planted_host_sync_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchmetrics_async import SumMetric

    original = SumMetric.update
    monkeypatch.setattr(SumMetric, "update", lambda self, value: (original(self, value), torch.zeros(1).item()))
    report = fuzz.fuzz(1, cases=10, pattern="^SumMetric$", shrink_seconds=1.0)
    assert any("host sync" in finding.kind for _, finding, _ in report.findings)


def test_a_lost_deferred_error_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchmetrics_async.classification import BinaryAccuracy

    original = BinaryAccuracy.compute

    def forgetful(self: BinaryAccuracy) -> torch.Tensor:
        self.invalid_target.zero_()
        return original(self)

    monkeypatch.setattr(BinaryAccuracy, "compute", forgetful)
    monkeypatch.setattr(BinaryAccuracy, "reset", lambda self: None)
    case = fuzz.Case(
        fuzz.targets("^BinaryAccuracy$")[0],
        {},
        "direct",
        (
            fuzz.Op("update", (fuzz.Batch((fuzz.Arg(torch.tensor([0.2, 0.9])), fuzz.Arg(torch.tensor([0, 5])))),)),
            fuzz.Op("compute"),
        ),
    )
    finding, _ = fuzz.run_case(case)
    assert finding is not None
    assert finding.kind == "deferred error lost"


def _case(pattern: str, init: dict, *batches: tuple[torch.Tensor, ...]) -> fuzz.Case:
    """Updates with ``batches``, then ``compute()``."""
    ops = tuple(fuzz.Op("update", (fuzz.Batch(tuple(fuzz.Arg(x) for x in batch)),)) for batch in batches)
    return fuzz.Case(fuzz.targets(pattern)[0], init, "direct", (*ops, fuzz.Op("compute")))


def _rmse_sw_rejected_batch() -> fuzz.Case:
    good, other = torch.rand(2, 3, 16, 16), torch.rand(2, 3, 12, 12)
    return _case("^RootMeanSquaredErrorUsingSlidingWindow$", {}, (good, good.flip(0)), (other, other.flip(0)))


def test_a_state_written_by_an_update_that_raised_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchmetrics_async.image import RootMeanSquaredErrorUsingSlidingWindow as Rmse

    original = Rmse.update

    def writes_first(self: Rmse, preds: torch.Tensor, target: torch.Tensor) -> None:
        self.total_images += target.shape[0]
        original(self, preds, target)

    monkeypatch.setattr(Rmse, "update", writes_first)
    finding, _ = fuzz.run_case(_rmse_sw_rejected_batch())
    assert finding is not None
    assert finding.kind == "update() that raised changed the states"


@pytest.mark.parametrize(
    "case",
    [
        # torchmetrics has counted part of the batch it rejects (the README row "an `update()` that raises")
        pytest.param(_rmse_sw_rejected_batch, id="rmse-sw-partial-update"),
        # torchmetrics' CPU compute fails on bool scores; its CUDA path and ours score them 0/1 (README row)
        pytest.param(
            lambda: _case("^BinaryAUROC$", {}, (torch.tensor([[True, False]]), torch.tensor([[0, 0]]))),
            id="bool-scores",
        ),
        # num_classes=None counts as 1 class in torchmetrics' one-hot form: a label pred where the target is ignored
        # is the listed "label `preds` at ignored positions are not checked"
        pytest.param(
            lambda: _case(
                "^MulticlassPrecision$",
                {"num_classes": None, "average": "micro", "multidim_average": "samplewise", "ignore_index": 0},
                (torch.tensor([[2, 1]]), torch.tensor([[0, 0]])),
            ),
            id="inferred-classes-ignored-preds",
        ),
        # the 30-minute fuzz of issue 28 (seed 2911): torchmetrics broadcasts PSNRB's shapes that differ in more than a
        # batch of one (here an empty batch, a trailing size-1 dim); ours raises at once (README row, RASE's)
        pytest.param(
            lambda: _steps(
                "^PeakSignalNoiseRatioWithBlockedEffect$",
                {"data_range": 1.0},
                ("update", (torch.zeros(0, 1, 12, 12), torch.zeros(0, 1, 12, 12, 1))),
            ),
            id="psnrb-empty-batch-trailing-dim",
        ),
        # seed 2929: identical points as a stride-0 view; forward() scored the view (its mean rounds otherwise) where
        # torchmetrics scores a contiguous copy
        pytest.param(
            lambda: fuzz.Case(
                fuzz.targets("^CalinskiHarabaszScore$")[0],
                {},
                "direct",
                (
                    fuzz.Op(
                        "forward",
                        (
                            fuzz.Batch(
                                (
                                    fuzz.Arg(torch.tensor([[-0.674629807472229]]), "expand", 8),
                                    fuzz.Arg(torch.tensor([-2, 2, -1, 0, -1, 4, -1, -2])),
                                )
                            ),
                        ),
                    ),
                    fuzz.Op("compute"),
                ),
            ),
            id="calinski-harabasz-expanded-identical-points",
        ),
        # seed 2930 (case seed 1040814004, as this version's generators draw it): float `preds` whose cast gives a
        # negative category, the listed "nominal metrics' category check" the allowance did not see
        pytest.param(
            lambda: fuzz.draw_case(random.Random(1040814004), fuzz.targets("^TschuprowsT$")[0]),
            id="nominal-float-category-cast-negative",
        ),
    ],
)
def test_the_last_fuzz_findings_are_fixed_or_listed(case: Callable[[], fuzz.Case]) -> None:
    finding, log = fuzz.run_case(case())
    assert finding is None, f"{finding}\n" + "\n".join(log)


def _steps(pattern: str, init: dict, *steps: tuple[str, tuple[torch.Tensor, ...]]) -> fuzz.Case:
    """``update``/``forward`` steps (kind, batch), then ``compute()``."""
    ops = tuple(fuzz.Op(kind, (fuzz.Batch(tuple(fuzz.Arg(x) for x in batch)),)) for kind, batch in steps)
    return fuzz.Case(fuzz.targets(pattern)[0], init, "direct", (*ops, fuzz.Op("compute")))


def _psnrb_rgb_after_gray() -> fuzz.Case:
    generator = torch.Generator().manual_seed(0)
    gray, rgb = (tuple(torch.rand(1, c, 16, 16, generator=generator) for _ in "pt") for c in (1, 3))
    return _steps("^PeakSignalNoiseRatioWithBlockedEffect$", {"data_range": 1.0}, ("update", gray), ("update", rgb))


def _identical_points(kind: str) -> Callable[[], fuzz.Case]:
    x = [-12.836618423461914, 3.062027931213379, 17.43071746826172]
    y = [-10.715895652770996, 4.1479105949401855, 11.88646125793457]
    batch = (torch.tensor([x] * 8 + [y] * 2), torch.tensor([0] * 8 + [1] * 2))
    return lambda: _steps(f"^{kind}$", {}, ("forward", batch))


ISSUE_31 = [
    pytest.param(_psnrb_rgb_after_gray, id="psnrb-rejected-rgb-batch"),
    pytest.param(_identical_points("CalinskiHarabaszScore"), id="calinski-harabasz-identical-points"),
    pytest.param(_identical_points("DunnIndex"), id="dunn-identical-points"),
    pytest.param(
        lambda: _steps(
            "^VisualInformationFidelity$", {}, ("update", (torch.rand(0, 1, 41, 41), torch.rand(0, 1, 41, 41).double()))
        ),
        id="vif-empty-float32-float64",
    ),
    # found by the extended generators (seed 3104): torchmetrics' DunnIndex.forward() scores 3-D embeddings (4.8672),
    # ours rejects them at once, as its update() does (README row "clustering metrics' dtype and shape checks")
    pytest.param(
        lambda: _steps("^DunnIndex$", {}, ("forward", (torch.randn(3, 2, 1), torch.tensor([0, 0, -1])))),
        id="dunn-3d-embeddings-forward",
    ),
    # found by seed 3105 (case seed 837394141, as this version's generators draw it): out-of-range group ids hide
    # groups as a missing group does (README row "group fairness ... on a batch without some group")
    pytest.param(
        lambda: fuzz.draw_case(random.Random(837394141), fuzz.targets("^BinaryGroupStatRates$")[0]),
        id="group-ids-out-of-range",
    ),
]


@pytest.mark.parametrize("case", ISSUE_31)
def test_the_issue_31_findings_are_fixed(case: Callable[[], fuzz.Case]) -> None:
    finding, log = fuzz.run_case(case())
    assert finding is None, f"{finding}\n" + "\n".join(log)


def _iou_case(seed: int, name: str) -> Callable[[], fuzz.Case]:
    return lambda: fuzz.draw_case(random.Random(seed), fuzz.targets(f"^{name}$")[0])


# IoU family findings (seeds 2811, as this version's generators draw them): torchmetrics' data-dependent dtypes, and
# [N, 3] boxes that ours broadcast to [N, 4] (no error: "torchmetrics took our state_dict with a pending error")
IOU_FINDINGS = [
    pytest.param(_iou_case(134450605, "IntersectionOverUnion"), id="iou-forward-float64-zero"),  # README row
    pytest.param(_iou_case(874759727, "DistanceIntersectionOverUnion"), id="diou-compute-float64-left-out"),
    pytest.param(_iou_case(994993294, "GeneralizedIntersectionOverUnion"), id="giou-three-coordinates"),
    pytest.param(_iou_case(899091047, "GeneralizedIntersectionOverUnion"), id="giou-per-class-float64-nan"),
    pytest.param(_iou_case(787927119, "IntersectionOverUnion"), id="iou-forward-per-class-float64"),
]


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is None, reason="torchmetrics' IoU classes need it")
@pytest.mark.parametrize("case", IOU_FINDINGS)
def test_the_iou_family_findings_are_fixed_or_listed(case: Callable[[], fuzz.Case]) -> None:
    finding, log = fuzz.run_case(case())
    assert finding is None, f"{finding}\n" + "\n".join(log)


def test_an_image_update_that_raised_after_writing_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The failed-update state check covers the image metrics: PSNRB as it was before issue 31 (sum first)."""
    from torchmetrics_async.image import PeakSignalNoiseRatioWithBlockedEffect as Psnrb

    original = Psnrb.update

    def adds_first(self: Psnrb, preds: torch.Tensor, target: torch.Tensor) -> None:
        self.sum_squared_error += torch.sum(torch.pow(preds - target, 2))
        original(self, preds, target)

    monkeypatch.setattr(Psnrb, "update", adds_first)
    finding, _ = fuzz.run_case(_psnrb_rgb_after_gray())
    assert finding is not None
    assert finding.kind == "update() that raised changed the states"


IMAGE_INVALID = {"image_channels", "image_rank", "image_small"}


@pytest.mark.parametrize(
    ("pattern", "init", "wanted"),
    [
        ("^PeakSignalNoiseRatioWithBlockedEffect$", {"data_range": 1.0}, IMAGE_INVALID),
        ("^StructuralSimilarityIndexMeasure$", {}, {*IMAGE_INVALID, "constant"}),
        ("^VisualInformationFidelity$", {}, {"image_small", "dtype", "empty", "constant"}),
        ("^CalinskiHarabaszScore$", {}, {"identical_points", "one_cluster", "rank", "dtype", "empty"}),
        ("^DunnIndex$", {}, {"identical_points", "one_cluster", "rank"}),
        ("^CramersV$", {"num_classes": 3}, {"range", "rank", "dtype", "empty"}),
        ("^FleissKappa$", {}, {"rank"}),
        ("^BinaryGroupStatRates$", {"num_groups": 3}, {"range", "dtype", "empty"}),
    ],
)
def test_the_generators_reach_invalid_and_degenerate_inputs(pattern: str, init: dict, wanted: set[str]) -> None:
    """Issue 31: wrong channel counts and ranks, images too small, out-of-range categories and group ids, mixed
    dtypes, empty batches, identical points, one cluster, constant images: each drawn within 300 batches."""
    rng, origin = random.Random(31), fuzz.targets(pattern)[0]
    seen: set[str] = set()
    for _ in range(300):
        seen |= fuzz.draw_batch(rng, origin, init).tags
    assert wanted <= seen, wanted - seen
