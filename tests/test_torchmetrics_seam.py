"""The seam to torchmetrics internals: every restated message and every imported name, checked against the installed
torchmetrics, so an upgrade that changes one fails here first."""

import math
import warnings

import pytest
import torch
import torchmetrics
from torchmetrics.metric import Metric

from torchmetrics_async import _torchmetrics as seam


def test_nan_error_message_is_torchmetrics_own():
    with pytest.raises(RuntimeError) as err:
        torchmetrics.SumMetric(nan_strategy="error").update(torch.tensor([math.nan]))
    assert str(err.value) == seam.NAN_ERROR_MESSAGE


def test_nan_warning_message_is_torchmetrics_own():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        torchmetrics.SumMetric(nan_strategy="warn").update(torch.tensor([math.nan]))
    assert [str(w.message) for w in record if w.category is UserWarning] == [seam.NAN_WARN_MESSAGE]


def test_forward_while_synced_message_is_torchmetrics_own():
    metric = torchmetrics.SumMetric()
    metric._is_synced = True
    with pytest.raises(seam.TorchMetricsUserError) as err:
        metric(torch.tensor(1.0))
    assert str(err.value) == seam.FORWARD_WHILE_SYNCED_MESSAGE


class _DeviceMismatch(Metric):
    def __init__(self):
        super().__init__()
        self.add_state("total", torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self):
        raise RuntimeError(f"{seam.DEVICE_MISMATCH_MARKER} the same device, but found at least two devices")

    def compute(self):
        return self.total


def test_device_mismatch_rewording_is_torchmetrics_own():
    with pytest.raises(RuntimeError) as err:
        _DeviceMismatch().update()
    assert str(err.value) == seam.device_mismatch_message("_DeviceMismatch")


def test_running_registers_one_state_per_slot_from_the_base_defaults():
    """running.SyncFreeRunning relies on this layout (and un-shares the slots torchmetrics aliases)."""
    running = seam.Running(torchmetrics.SumMetric(), window=2)
    assert set(running._defaults) == {"sum_value_0", "sum_value_1"}
    assert running.sum_value_0 is running.sum_value_1  # the aliasing _own_window_slots undoes


def test_dim_zero_reductions_are_the_ones_add_state_installs():
    metric = torchmetrics.SumMetric()
    for name, fn in [("sum", seam.dim_zero_sum), ("mean", seam.dim_zero_mean), ("max", seam.dim_zero_max)]:
        metric.add_state(f"s_{name}", torch.tensor(0.0), dist_reduce_fx=name)
        assert metric._reductions[f"s_{name}"] is fn
    metric.add_state("s_min", torch.tensor(0.0), dist_reduce_fx="min")
    metric.add_state("s_cat", [], dist_reduce_fx="cat")
    assert metric._reductions["s_min"] is seam.dim_zero_min
    assert metric._reductions["s_cat"] is seam.dim_zero_cat


def test_squeeze_if_scalar_matches_compute_wrapper():
    metric = torchmetrics.CatMetric()
    metric.update(torch.tensor([2.0]))
    assert metric.compute().shape == seam._squeeze_if_scalar(torch.tensor([2.0])).shape == torch.Size([])


def test_base_aggregator_is_the_aggregation_base():
    assert issubclass(torchmetrics.MeanMetric, seam.BaseAggregator)
    assert issubclass(seam.BaseAggregator, seam.Metric)


def _private_names(obj: object) -> set[str]:
    names = {name for name in dir(obj) if name.startswith("_") and not name.startswith("__")}
    return names | {name for name in vars(obj) if name.startswith("_") and not name.startswith("__")}


def _torchmetrics_private_names() -> dict[str, set[str]]:
    """Private names of torchmetrics' bases (instances included: states set in ``__init__``), minus ``nn.Module``'s."""
    module_names = _private_names(torch.nn.Module())
    return {
        "METRIC_INTERNALS": _private_names(torchmetrics.SumMetric()) - module_names,
        "COLLECTION_INTERNALS": _private_names(torchmetrics.MetricCollection([torchmetrics.SumMetric()]))
        - module_names,
        "AGGREGATOR_INTERNALS": _private_names(torchmetrics.aggregation.BaseAggregator) - module_names,
    }


@pytest.mark.parametrize("declared", ["METRIC_INTERNALS", "COLLECTION_INTERNALS", "AGGREGATOR_INTERNALS"])
def test_declared_internals_exist_on_installed_torchmetrics(declared: str) -> None:
    missing = getattr(seam, declared) - _torchmetrics_private_names()[declared]
    assert not missing, f"torchmetrics no longer has {sorted(missing)}: update {declared} and the code using them"


def test_package_uses_no_undeclared_torchmetrics_internal() -> None:
    """Scan the package's source for ``.name`` / ``"name"`` of every private torchmetrics name not declared here."""
    import pathlib
    import re

    import torchmetrics_async

    private = set().union(*_torchmetrics_private_names().values())
    declared = seam.METRIC_INTERNALS | seam.COLLECTION_INTERNALS | seam.AGGREGATOR_INTERNALS
    # Names this package defines itself on its own classes are not torchmetrics'.
    undeclared = private - declared
    package = pathlib.Path(torchmetrics_async.__file__).parent
    found = {}
    for path in package.rglob("*.py"):
        if path.name == "_torchmetrics.py":
            continue
        source = path.read_text()
        for name in undeclared:
            if re.search(rf"(\.|[\"']){re.escape(name)}\b", source):
                found.setdefault(name, []).append(path.name)
    assert not found, f"torchmetrics internals used outside the seam's declarations: {found}"


def test_logauc_and_ranking_messages_are_torchmetrics_own() -> None:
    from torchmetrics.functional.classification.logauc import _binary_logauc_compute
    from torchmetrics.functional.classification.ranking import _multilabel_ranking_tensor_validation

    with pytest.warns(UserWarning, match="At least two values") as record:
        _binary_logauc_compute(torch.zeros(1), torch.zeros(1))
    assert [str(w.message) for w in record] == [seam.LOGAUC_TOO_FEW_POINTS_MESSAGE]
    preds = torch.ones(2, 2, dtype=torch.long)
    with pytest.raises(ValueError, match="floating point") as err:
        _multilabel_ranking_tensor_validation(preds, preds, 2)
    assert str(err.value) == seam.RANKING_FLOAT_PREDS_MESSAGE.format(preds.dtype)
