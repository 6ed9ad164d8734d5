"""The drop-in contract: every accelerated aggregator behaves like the torchmetrics class it subclasses.

Each test builds the accelerated metric and the installed torchmetrics class side by side, feeds both the same inputs
(torchmetrics gets clones: under a float ``nan_strategy`` it writes into its input) and compares with
``torch.testing.assert_close``; expected numbers always come from torchmetrics.
"""

import copy
import pickle
import warnings
from typing import Any

import pytest
import torch
import torchmetrics
from torch import Tensor
from torchmetrics import MetricCollection

import torchmetrics_async as tma
from tests.parity import assert_same
from torchmetrics_async.metric import CHECKPOINT_METADATA

NAMES = ("MeanMetric", "SumMetric", "MaxMetric", "MinMetric", "CatMetric", "RunningMean", "RunningSum")
RUNNING = ("RunningMean", "RunningSum")
NAN_STRATEGIES = ("error", "warn", "ignore", "disable", 0.5)
WINDOW = 3


def make(module: Any, name: str, **kwargs: Any) -> Any:
    if name in RUNNING:
        kwargs.setdefault("window", WINDOW)
    return getattr(module, name)(**kwargs)


def make_pair(name: str, **kwargs: Any) -> tuple[Any, Any]:
    """(accelerated, torchmetrics) built with the same arguments."""
    return make(tma, name, **kwargs), make(torchmetrics, name, **kwargs)


def batches(n: int, seed: int = 0) -> list[Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2 + i % 3, generator=g) for i in range(n)]


def clone(x: Any) -> Any:
    return x.clone() if isinstance(x, Tensor) else x


def detach(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x.detach()
    if isinstance(x, (list, tuple)):
        return type(x)(detach(v) for v in x)
    if isinstance(x, dict):
        return {k: detach(v) for k, v in x.items()}
    return x


def step(ours: Any, ref: Any, kind: str, *args: Any, **kwargs: Any) -> None:
    """One update or forward on both; forward values must match."""
    out = getattr(ours, kind)(*(clone(a) for a in args), **{k: clone(v) for k, v in kwargs.items()})
    expected = getattr(ref, kind)(*(clone(a) for a in args), **{k: clone(v) for k, v in kwargs.items()})
    if kind == "forward":
        assert_same(out, expected)


def run_steps(ours: Any, ref: Any, xs: list[Tensor], start: int = 0) -> None:
    for i, x in enumerate(xs, start):
        step(ours, ref, "forward" if i % 3 == 2 else "update", x)


def assert_compute_same(ours: Any, ref: Any) -> None:
    assert_same(ours.compute(), ref.compute())


def _describe(states: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in states.items():
        if isinstance(value, Tensor):
            out[prefix + key] = (value.dtype, value.device)
        else:
            out[prefix + key] = [(v.dtype, v.device) for v in value]
    return out


def tensor_states(metric: Any) -> dict[str, Any]:
    """State name -> (dtype, device) of each tensor (lists: of each element), a Running's base metric included."""
    out = _describe(metric.metric_state)
    base = getattr(metric, "base_metric", None)
    if base is not None:
        out.update(_describe(base.metric_state, "base_metric."))
    return out


def default_states(metric: Any) -> dict[str, Any]:
    """The same description of the defaults ``reset()`` restores."""
    return _describe(metric._defaults)


# ---------------------------------------------------------------------------------------------------------------------
# Identity


@pytest.mark.parametrize("name", NAMES)
def test_isinstance_of_torchmetrics_class(name: str) -> None:
    ours = make(tma, name)
    tm_cls = getattr(torchmetrics, name)
    assert isinstance(ours, tm_cls)
    assert isinstance(ours, getattr(torchmetrics.aggregation, name))
    assert type(ours) is not tm_cls
    assert type(ours).__name__ == name
    assert getattr(tma.aggregation, name) is type(ours)


# ---------------------------------------------------------------------------------------------------------------------
# Pickle, deepcopy, clone


@pytest.mark.parametrize("name", NAMES)
def test_pickle_round_trip_mid_window(name: str) -> None:
    ours, ref = make_pair(name)
    xs = batches(8)
    run_steps(ours, ref, xs[:4])
    ours, ref = pickle.loads(pickle.dumps(ours)), pickle.loads(pickle.dumps(ref))
    assert type(ours) is getattr(tma, name)
    assert ours.update_count == ref.update_count
    run_steps(ours, ref, xs[4:], start=4)
    assert_compute_same(ours, ref)


@pytest.mark.sweep
@pytest.mark.parametrize("how", ["deepcopy", "clone"])
@pytest.mark.parametrize("name", NAMES)
def test_copy_mid_window_is_independent(name: str, how: str) -> None:
    ours, ref = make_pair(name)
    xs = batches(9)
    run_steps(ours, ref, xs[:4])
    copier = copy.deepcopy if how == "deepcopy" else (lambda m: m.clone())
    ours_copy, ref_copy = copier(ours), copier(ref)
    assert type(ours_copy) is type(ours)
    run_steps(ours_copy, ref_copy, xs[4:], start=4)
    assert_compute_same(ours_copy, ref_copy)
    # the original did not see the copy's updates
    run_steps(ours, ref, xs[7:], start=7)
    assert_compute_same(ours, ref)


# ---------------------------------------------------------------------------------------------------------------------
# state_dict


@pytest.mark.parametrize("nan_strategy", NAN_STRATEGIES)
@pytest.mark.parametrize("name", NAMES)
def test_state_dict_keys_are_torchmetrics_keys(name: str, nan_strategy: Any) -> None:
    """The extra states stay out of the keys (plain metrics load with ``strict=True``); the count rides in metadata."""
    ours, ref = make_pair(name, nan_strategy=nan_strategy)
    assert set(ours.state_dict()) == set(ref.state_dict())  # not persistent by default, as in torchmetrics
    ours.persistent(True)
    ref.persistent(True)
    run_steps(ours, ref, batches(2))
    saved = ours.state_dict()
    assert set(saved) == set(ref.state_dict())
    carried = saved._metadata[""][CHECKPOINT_METADATA]
    # Running's window position is not kept by torchmetrics' checkpoint either; its base counts the updates.
    assert carried == ({"checks": []} if name in RUNNING else {"checks": [], "_update_count": 2})


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip_mid_window(name: str) -> None:
    ours, ref = make_pair(name)
    ours.persistent(True)
    ref.persistent(True)
    xs = batches(8)
    run_steps(ours, ref, xs[:4])
    ours_loaded, ref_loaded = make_pair(name)
    ours_loaded.persistent(True)
    ref_loaded.persistent(True)
    ours_loaded.load_state_dict(copy.deepcopy(ours.state_dict()))
    ref_loaded.load_state_dict(copy.deepcopy(ref.state_dict()))
    run_steps(ours_loaded, ref_loaded, xs[4:], start=4)
    assert_compute_same(ours_loaded, ref_loaded)


def _load_params() -> list:
    return [pytest.param(n, s, id=f"{n}-{s}") for n in NAMES for s in NAN_STRATEGIES]


@pytest.mark.parametrize(("name", "nan_strategy"), _load_params())
def test_load_torchmetrics_state_dict_then_continue(name: str, nan_strategy: Any) -> None:
    ours, ref = make_pair(name, nan_strategy=nan_strategy)
    ours.persistent(True)
    ref.persistent(True)
    xs = batches(8)
    for x in xs[:4]:
        ref.update(x)
    ours.load_state_dict(copy.deepcopy(ref.state_dict()))
    run_steps(ours, ref, xs[4:], start=4)
    assert_compute_same(ours, ref)


# ---------------------------------------------------------------------------------------------------------------------
# TorchScript


def _script_outcome(metric: Any) -> Any:
    try:
        with warnings.catch_warnings():
            # torch.jit.script is deprecated, and scripting reads torchmetrics' deprecated `_update_called` property
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.script(metric)
    except Exception as err:  # any scripting failure counts
        return err


# torchmetrics 1.9 scripts the tensor-state aggregators; CatMetric (list state) and Running (forward(*args)) do not.
SCRIPTED_BY_TORCHMETRICS = ("MeanMetric", "SumMetric", "MaxMetric", "MinMetric")


@pytest.mark.sweep
@pytest.mark.parametrize("name", NAMES)
def test_jit_script_works_where_torchmetrics_scripts(name: str) -> None:
    ours, ref = make_pair(name)
    ref_out = _script_outcome(ref)
    assert isinstance(ref_out, torch.jit.ScriptModule) == (name in SCRIPTED_BY_TORCHMETRICS), ref_out
    if name in SCRIPTED_BY_TORCHMETRICS:
        assert isinstance(_script_outcome(ours), torch.jit.ScriptModule)


# ---------------------------------------------------------------------------------------------------------------------
# Devices and dtypes

MOVES = {
    "half": lambda m: m.half(),
    "double": lambda m: m.double(),
    "float": lambda m: m.float(),
    "bfloat16": lambda m: m.bfloat16(),
    "type_float64": lambda m: m.type(torch.float64),
    "to_float64": lambda m: m.to(torch.float64),
    "to_cpu_float16": lambda m: m.to("cpu", torch.float16),
    "to_meta": lambda m: m.to("meta"),
}


@pytest.mark.parametrize("move", list(MOVES))
@pytest.mark.parametrize("name", NAMES)
def test_module_moves_treat_states_as_torchmetrics_does(name: str, move: str) -> None:
    ours, ref = make_pair(name)
    xs = batches(6)
    run_steps(ours, ref, xs[:2])
    ours, ref = MOVES[move](ours), MOVES[move](ref)
    assert ours.dtype == ref.dtype
    assert ours.device == ref.device
    ref_states = tensor_states(ref)
    ours_states = tensor_states(ours)
    assert {k: ours_states[k] for k in ref_states} == ref_states
    ref_defaults = default_states(ref)
    assert {k: default_states(ours)[k] for k in ref_defaults} == ref_defaults
    # the extra states (NaN flag, keep-masks) move with the metric and stay bool
    for key in set(ours_states) - set(ref_states):
        if key.startswith("base_metric."):
            continue
        entries = ours_states[key] if isinstance(ours_states[key], list) else [ours_states[key]]
        for dtype, device in entries:
            assert device == ours.device, key
            assert dtype == torch.bool, key
    if move == "to_meta":
        return
    run_steps(ours, ref, xs[2:], start=2)
    assert_compute_same(ours, ref)


def _set_dtype_params() -> list:
    return [
        pytest.param(name, dtype, id=f"{name}-{dtype}") for name in NAMES for dtype in (torch.float64, torch.float16)
    ]


@pytest.mark.parametrize(("name", "dtype"), _set_dtype_params())
def test_set_dtype_then_update_matches_torchmetrics(name: str, dtype: torch.dtype) -> None:
    ours, ref = make_pair(name)
    xs = batches(8)
    run_steps(ours, ref, xs[:2])
    ours, ref = ours.set_dtype(dtype), ref.set_dtype(dtype)
    assert ours.dtype == ref.dtype == dtype
    assert tensor_states(ours).items() >= tensor_states(ref).items()
    run_steps(ours, ref, xs[2:], start=2)
    ours_value, ref_value = ours.compute(), ref.compute()
    assert ours_value.dtype == ref_value.dtype
    assert_same(ours_value, ref_value)


# ---------------------------------------------------------------------------------------------------------------------
# MetricCollection


def _collections(compute_groups: Any, names: tuple[str, ...]) -> tuple[MetricCollection, MetricCollection]:
    ours = MetricCollection({f"{n}_{i}": make(tma, n) for i, n in enumerate(names)}, compute_groups=compute_groups)
    ref = MetricCollection(
        {f"{n}_{i}": make(torchmetrics, n) for i, n in enumerate(names)}, compute_groups=compute_groups
    )
    return ours, ref


def _exercise_collection(ours: MetricCollection, ref: MetricCollection, kinds: str) -> None:
    xs = batches(10)
    for round_ in range(2):
        for i, x in enumerate(xs):
            kind = kinds[i % len(kinds)]
            step(ours, ref, "update" if kind == "u" else "forward", x)
            if i % 4 == 3:
                assert_same(ours.compute(), ref.compute())
        assert_same(ours.compute(), ref.compute())
        ours.reset()
        ref.reset()
        if round_ == 0:
            for m in ours.values(copy_state=False):
                assert m.update_count == 0


@pytest.mark.parametrize("kinds", ["u", "f", "uuf"], ids=["update", "forward", "mixed"])
@pytest.mark.parametrize("compute_groups", [False, True])
def test_collection_matches_torchmetrics(compute_groups: bool, kinds: str) -> None:
    ours, ref = _collections(compute_groups, ("MeanMetric", "SumMetric", "MaxMetric"))
    _exercise_collection(ours, ref, kinds)
    assert ours.compute_groups == ref.compute_groups


@pytest.mark.parametrize(
    "kinds",
    # compute groups form on the first update() of a collection, so every sequence starts with one
    ["u", "ufff", "uuf"],
    ids=["update", "forward", "mixed"],
)
def test_collection_with_shared_compute_groups_matches_torchmetrics(kinds: str) -> None:
    names = ("SumMetric", "SumMetric", "MeanMetric", "MeanMetric", "MaxMetric", "RunningSum", "RunningSum")
    ours, ref = _collections(True, names)
    _exercise_collection(ours, ref, kinds)
    assert ours.compute_groups == ref.compute_groups
    assert len(ref.compute_groups) == 4  # the test really shares states


# ---------------------------------------------------------------------------------------------------------------------
# merge_state


def _outcome(fn: Any) -> Any:
    try:
        return fn()
    except Exception as err:  # compared with torchmetrics' outcome
        return err


def _assert_same_outcome(ours: Any, ref: Any) -> None:
    if isinstance(ref, Exception):
        assert type(ours) is type(ref), ours
        return
    assert not isinstance(ours, Exception), ours
    assert_same(ours, ref)


def _merge_setup(name: str) -> tuple[Any, Any, Any, Any]:
    ours, ref = make_pair(name)
    ours_other, ref_other = make_pair(name)
    xs = batches(6)
    run_steps(ours, ref, xs[:3])
    run_steps(ours_other, ref_other, xs[3:], start=1)
    return ours, ref, ours_other, ref_other


@pytest.mark.parametrize("name", NAMES)
def test_merge_state_with_instance(name: str) -> None:
    ours, ref, ours_other, ref_other = _merge_setup(name)
    ref_out = _outcome(lambda: (ref.merge_state(ref_other), ref.compute())[1])
    ours_out = _outcome(lambda: (ours.merge_state(ours_other), ours.compute())[1])
    _assert_same_outcome(ours_out, ref_out)
    if not isinstance(ref_out, Exception):
        run_steps(ours, ref, batches(3, seed=1))
        assert_compute_same(ours, ref)


@pytest.mark.parametrize("name", NAMES)
def test_merge_state_with_own_state_dict(name: str) -> None:
    ours, ref, ours_other, ref_other = _merge_setup(name)
    ref_out = _outcome(lambda: (ref.merge_state(ref_other.metric_state), ref.compute())[1])
    ours_out = _outcome(lambda: (ours.merge_state(ours_other.metric_state), ours.compute())[1])
    _assert_same_outcome(ours_out, ref_out)


def _merge_tm_dict_params() -> list:
    return list(NAMES)


@pytest.mark.parametrize("name", _merge_tm_dict_params())
def test_merge_state_with_torchmetrics_state_dict(name: str) -> None:
    ours, ref, _, ref_other = _merge_setup(name)
    incoming = copy.deepcopy(ref_other.metric_state)
    ref_out = _outcome(lambda: (ref.merge_state(copy.deepcopy(incoming)), ref.compute())[1])
    ours_out = _outcome(lambda: (ours.merge_state(copy.deepcopy(incoming)), ours.compute())[1])
    _assert_same_outcome(ours_out, ref_out)


# ---------------------------------------------------------------------------------------------------------------------
# forward


@pytest.mark.parametrize("name", NAMES)
def test_forward_many_calls_and_mixed_with_update(name: str) -> None:
    ours, ref = make_pair(name)
    xs = batches(14)
    for i, x in enumerate(xs):
        kind = "update" if i % 5 in (1, 3) else "forward"
        step(ours, ref, kind, x)
        if i % 4 == 0:
            assert_compute_same(ours, ref)
        assert ours.update_count == ref.update_count
    assert_compute_same(ours, ref)


@pytest.mark.parametrize("grad_mode", ["enabled", "no_grad"])
@pytest.mark.parametrize("name", NAMES)
def test_forward_value_carries_grad_but_states_do_not(name: str, grad_mode: str) -> None:
    ours, ref = make_pair(name)
    run_steps(ours, ref, batches(2))
    base = torch.tensor([0.5, -1.0, 2.0, 1.5])
    results = []
    for metric in (ours, ref):
        x = base.clone().requires_grad_(True)
        y = x * 2  # a non-leaf input with a graph
        if grad_mode == "enabled":
            out = metric(y)
        else:
            with torch.no_grad():
                out = metric(y)
        grad = None
        if out.requires_grad:
            out.sum().backward()
            grad = x.grad
        results.append((out, out.requires_grad, grad))
    (ours_out, ours_rg, ours_grad), (ref_out, ref_rg, ref_grad) = results
    assert ours_rg == ref_rg
    assert_same(ours_out, ref_out)
    if ref_grad is None:
        assert ours_grad is None
    else:
        torch.testing.assert_close(ours_grad, ref_grad)
    for key, value in ours.metric_state.items():
        for t in value if isinstance(value, list) else [value]:
            assert not t.requires_grad, key
    assert_compute_same(ours, ref)
    assert not ours.compute().requires_grad


# ---------------------------------------------------------------------------------------------------------------------
# reset


def _first_tensor_state(metric: Any) -> tuple[str, Tensor]:
    for key, value in metric.metric_state.items():
        if isinstance(value, Tensor):
            return key, value
        if value:
            return key, value[0]
    raise AssertionError("no tensor state")


@pytest.mark.parametrize("name", NAMES)
def test_reset_restores_defaults_and_leaves_held_tensors_alone(name: str) -> None:
    ours, ref = make_pair(name)
    fresh = make(torchmetrics, name)
    run_steps(ours, ref, batches(5))
    computed = ours.compute()
    computed_value = computed.clone()
    forward_out = ours(torch.tensor([9.0, -9.0]))
    ref(torch.tensor([9.0, -9.0]))
    forward_value = forward_out.clone()
    key, held = _first_tensor_state(ours)
    held_value = held.clone()
    ours.reset()
    ref.reset()
    torch.testing.assert_close(held, held_value, msg=f"reset changed the tensor held from state {key}")
    torch.testing.assert_close(computed, computed_value)
    torch.testing.assert_close(forward_out, forward_value)
    assert ours.update_count == ref.update_count == 0
    assert ours.update_called is ref.update_called is False
    ours_state = ours.metric_state
    for state_key, expected in fresh.metric_state.items():
        assert_same(ours_state[state_key], expected)
    run_steps(ours, ref, batches(4, seed=3))
    assert_compute_same(ours, ref)
    torch.testing.assert_close(held, held_value)


# ---------------------------------------------------------------------------------------------------------------------
# Options


@pytest.mark.parametrize("compute_with_cache", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_compute_with_cache(name: str, compute_with_cache: bool) -> None:
    ours, ref = make_pair(name, compute_with_cache=compute_with_cache)
    xs = batches(6)
    run_steps(ours, ref, xs[:3])
    ours_1, ours_2 = ours.compute(), ours.compute()
    ref_1, ref_2 = ref.compute(), ref.compute()
    assert (ours_1 is ours_2) == (ref_1 is ref_2)
    assert (ours._computed is None) == (ref._computed is None)
    assert_same(ours_2, ref_2)
    run_steps(ours, ref, xs[3:], start=3)  # an update invalidates the cache
    assert_compute_same(ours, ref)


@pytest.mark.parametrize("name", NAMES)
def test_sync_on_compute_false(name: str) -> None:
    ours, ref = make_pair(name, sync_on_compute=False)
    assert getattr(ours, "base_metric", ours).sync_on_compute is False
    run_steps(ours, ref, batches(7))
    assert_compute_same(ours, ref)


@pytest.mark.parametrize("name", NAMES)
def test_dist_sync_on_step_falls_back_to_torchmetrics_forward(name: str) -> None:
    ours, ref = make_pair(name, dist_sync_on_step=True)
    xs = batches(8)
    for x in xs:
        step(ours, ref, "forward", x)
        assert ours.update_count == ref.update_count
    step(ours, ref, "update", xs[0])
    assert_compute_same(ours, ref)


@pytest.mark.parametrize("name", NAMES)
def test_update_count_and_update_called(name: str) -> None:
    ours, ref = make_pair(name)
    assert ours.update_called is ref.update_called is False
    xs = batches(7)
    for i, x in enumerate(xs):
        step(ours, ref, "forward" if i % 2 else "update", x)
        assert ours.update_count == ref.update_count
        assert ours.update_called is ref.update_called
        # torchmetrics' Running wrapper does not count its own updates; its base metric is reset after each one
        expected = 0 if name in RUNNING else i + 1
        assert ours.update_count == expected
    ours.compute()
    ref.compute()
    assert ours.update_count == ref.update_count
    ours.reset()
    ref.reset()
    assert ours.update_count == ref.update_count == 0
    assert ours.update_called is ref.update_called is False


# ---------------------------------------------------------------------------------------------------------------------
# Running windows


@pytest.mark.parametrize("kinds", ["u", "f", "ufu"], ids=["update", "forward", "mixed"])
@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize("name", RUNNING)
def test_running_window_over_more_than_window_steps(name: str, window: int, kinds: str) -> None:
    ours, ref = make_pair(name, window=window)
    for i, x in enumerate(batches(3 * window + 4)):
        step(ours, ref, "update" if kinds[i % len(kinds)] == "u" else "forward", x)
        assert_compute_same(ours, ref)
    ours.reset()
    ref.reset()
    for i, x in enumerate(batches(window + 2, seed=5)):
        step(ours, ref, "forward" if i % 2 else "update", x)
    assert_compute_same(ours, ref)


# ---------------------------------------------------------------------------------------------------------------------
# Inputs: Python numbers, 0-dim and CPU scalar tensors, weights

SCALAR_VALUES = [
    3,
    -2,
    2.5,
    0.1,
    True,
    False,
    torch.tensor(1.5),
    torch.tensor(7),
    torch.tensor(True),
    torch.tensor(-0.25, dtype=torch.float64),
    torch.tensor([4.0]),
    torch.tensor([1, 2, 3]),
]


@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("name", NAMES)
def test_python_numbers_and_scalar_tensors(name: str, kind: str) -> None:
    ours, ref = make_pair(name)
    for value in SCALAR_VALUES:
        step(ours, ref, kind, value)
        assert_compute_same(ours, ref)


WEIGHT_CASES = {
    "number_number": (2.0, 3.0),
    "int_int": (2, 3),
    "bool_int": (True, 2),
    "number_0dim": (2.0, torch.tensor(3.0)),
    "0dim_number": (torch.tensor(2.0), 3),
    "0dim_0dim": (torch.tensor(2.0), torch.tensor(4.0)),
    "matrix_number": (torch.arange(6.0).reshape(2, 3), 2.0),
    "matrix_0dim": (torch.arange(6.0).reshape(2, 3), torch.tensor(0.5)),
    "matrix_row_1xn": (torch.arange(6.0).reshape(2, 3), torch.tensor([[1.0, 2.0, 3.0]])),
    "matrix_row_n": (torch.arange(6.0).reshape(2, 3), torch.tensor([1.0, 2.0, 3.0])),
    "matrix_column_mx1": (torch.arange(6.0).reshape(2, 3), torch.tensor([[1.0], [2.0]])),
    "matrix_full": (torch.arange(6.0).reshape(2, 3), torch.arange(6.0).reshape(2, 3) + 1),
    "int_tensors": (torch.tensor([1, 2, 3]), torch.tensor([1, 0, 2])),
    "float64_value": (torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([3.0, 1.0])),
    "list_weight": (torch.tensor([1.0, 2.0]), [1.0, 3.0]),
    "list_value": ([1.0, 2.0], 2.0),
    "no_weight": (torch.tensor([1.0, 5.0]), None),
}


@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("case", list(WEIGHT_CASES))
def test_mean_weights(case: str, kind: str) -> None:
    value, weight = WEIGHT_CASES[case]
    ours, ref = make_pair("MeanMetric")
    step(ours, ref, "update", torch.tensor([1.0, 2.0]), weight=torch.tensor([1.0, 3.0]))
    step(ours, ref, kind, value, weight=weight)
    assert_compute_same(ours, ref)
    step(ours, ref, kind, value, weight=weight)
    assert_compute_same(ours, ref)


BAD_SHAPES = {
    "row_too_short": (torch.arange(6.0).reshape(2, 3), torch.tensor([1.0, 2.0])),
    "too_many_rows": (torch.arange(6.0).reshape(2, 3), torch.ones(3, 3)),
    "weight_more_dims": (torch.tensor([1.0, 2.0]), torch.ones(2, 2)),
    "number_value_vector_weight": (3.0, torch.tensor([1.0, 2.0])),
}


@pytest.mark.parametrize("kind", ["update", "forward"])
@pytest.mark.parametrize("case", list(BAD_SHAPES))
def test_bad_weight_shape_raises_eagerly_like_torchmetrics(case: str, kind: str) -> None:
    value, weight = BAD_SHAPES[case]
    ours, ref = make_pair("MeanMetric")
    step(ours, ref, "update", torch.tensor([1.0, 2.0]))
    with pytest.raises(Exception) as ref_err:  # noqa: PT011 - the type is whatever torchmetrics raises
        getattr(ref, kind)(clone(value), weight=clone(weight))
    with pytest.raises(ref_err.type) as ours_err:  # torchmetrics' RuntimeError, and a ValueError (ShapeMismatchError)
        getattr(ours, kind)(clone(value), weight=clone(weight))
    assert isinstance(ours_err.value, ValueError)
    assert str(ours_err.value).endswith(str(ref_err.value))  # torch's message, after both shapes named
    assert "does not broadcast to `value` of shape" in str(ours_err.value)
    if kind == "update":  # torchmetrics' failed forward leaves its states reset; compare after update only
        assert_compute_same(ours, ref)
    else:
        fresh = make(torchmetrics, "MeanMetric")
        fresh.update(torch.tensor([1.0, 2.0]))
        assert_same(ours.compute(), fresh.compute())


@pytest.mark.parametrize("name", NAMES)
def test_float_nan_strategy_leaves_the_input_alone(name: str) -> None:
    """Deliberate difference: torchmetrics writes the fill value into the caller's tensor; we do not."""
    ours, ref = make_pair(name, nan_strategy=0.5)
    x = torch.tensor([1.0, float("nan"), 3.0])
    ours.update(x)
    assert torch.isnan(x[1])
    ref_input = x.clone()
    ref.update(ref_input)
    assert not torch.isnan(ref_input[1])  # torchmetrics mutated its copy
    assert_compute_same(ours, ref)


def test_no_warnings_on_clean_data() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in NAMES:
            ours = make(tma, name)
            for x in batches(4):
                ours.update(x)
                ours(x)
            ours.compute()
