"""The drop-in contract over the whole registry: every accelerated class behaves like its torchmetrics class.

Parametrized over :func:`torchmetrics_async.registry.registry` with inputs from ``tests/example_families``, so a newly
registered class is covered by adding its family's examples, not by editing this file. Each test runs the
accelerated class and the installed torchmetrics class side by side on the same inputs; expected values always come
from torchmetrics. (``tests/test_drop_in.py`` goes deeper for the aggregators: NaN strategies, weights, windows.)
"""

import copy
import inspect
import pickle
import re
import warnings
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any

import pytest
import torch
from torch import Tensor
from torchmetrics import MetricCollection

from tests.example_families import is_task_wrapper
from tests.examples import Example, example_for
from tests.parity import assert_same
from torchmetrics_async import accelerate
from torchmetrics_async.accelerate import patch
from torchmetrics_async.registry import registry

REGISTERED = sorted(registry().items(), key=lambda item: (item[0].__module__, item[0].__name__))
IDS = [origin.__name__ for origin, _ in REGISTERED]
parametrize_registered = pytest.mark.parametrize(("origin", "accelerated"), REGISTERED, ids=IDS)


def _quiet(fn: Callable[..., Any], *args: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


def _pair(origin: type, accelerated: type, example: Example) -> tuple[Any, Any]:
    """(ours, torchmetrics') built with the example's arguments; a task wrapper builds its task class."""
    ours = _quiet(lambda: accelerated(**example.init))
    ref = _quiet(lambda: origin(**example.init))
    return ours, ref


def _batches(origin: type, n: int, start: int = 1) -> list[tuple[Tensor, ...]]:
    return [example_for(origin, seed).inputs for seed in range(start, start + n)]


def _clone(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    return copy.deepcopy(inputs)  # tensors, or detection's lists of per-image dicts


def _detach(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x.detach()
    if isinstance(x, (list, tuple)):
        return type(x)(_detach(v) for v in x)
    if isinstance(x, dict):
        return {k: _detach(v) for k, v in x.items()}
    return x


def _steps(ours: Any, ref: Any, batches: list[tuple[Tensor, ...]]) -> None:
    """Updates, with every third step a forward whose batch values must match."""
    for i, inputs in enumerate(batches):
        if i % 3 == 2:
            assert_same(_quiet(ours, *_clone(inputs)), _quiet(ref, *_clone(inputs)))
        else:
            _quiet(ours.update, *_clone(inputs))
            _quiet(ref.update, *_clone(inputs))


def _compute_same(ours: Any, ref: Any) -> None:
    """Equal values, or the same exception type where torchmetrics raises (e.g. its compute after ``set_dtype``)."""
    try:
        expected = _quiet(ref.compute)
    except Exception as err:
        with pytest.raises(type(err)):
            _quiet(ours.compute)
        return
    assert_same(_quiet(ours.compute), expected)


@parametrize_registered
def test_isinstance_and_class_name(origin: type, accelerated: type) -> None:
    ours, ref = _pair(origin, accelerated, example_for(origin))
    assert isinstance(ours, type(ref))
    assert type(ours).__name__ == type(ref).__name__
    assert type(ours).__module__.startswith("torchmetrics_async.")
    if not is_task_wrapper(origin):
        assert isinstance(ours, origin)
        assert type(ours) is accelerated


@parametrize_registered
def test_docstring_is_torchmetrics_with_one_paragraph(origin: type, accelerated: type) -> None:
    """torchmetrics' docstring with one paragraph on what differs; its examples run on the accelerated class."""
    summary, _, rest = inspect.cleandoc(origin.__doc__).partition("\n")
    head, paragraph, tail = accelerated.__doc__.split("\n\n", 2)
    assert head == summary
    assert paragraph.startswith("Accelerated: ")
    assert "Args:" not in paragraph
    assert ">>>" not in paragraph
    assert tail.replace("torchmetrics_async", "torchmetrics").strip() == rest.strip()
    assert not re.search(rf">>> from torchmetrics(\.\w+)* import (.*\W)?{origin.__name__}\b", accelerated.__doc__)


@parametrize_registered
def test_update_forward_compute_reset(origin: type, accelerated: type) -> None:
    ours, ref = _pair(origin, accelerated, example_for(origin))
    _steps(ours, ref, _batches(origin, 4))
    _compute_same(ours, ref)
    ours.reset()
    ref.reset()
    _steps(ours, ref, _batches(origin, 3, start=7))
    _compute_same(ours, ref)


def _pickled(metric: Any) -> Any:
    return pickle.loads(pickle.dumps(metric))


def _through_shared_memory(metric: Any) -> Any:
    """As a spawned worker receives it (``mp.spawn``, ``ddp_spawn``): torch's pickler moves tensors to shared memory."""
    return pickle.loads(ForkingPickler.dumps(metric))


@pytest.mark.sweep
@pytest.mark.parametrize("how", ["pickle", "deepcopy", "clone", "shared-memory"])
@parametrize_registered
def test_copies_mid_window_continue_independently(origin: type, accelerated: type, how: str) -> None:
    ours, ref = _pair(origin, accelerated, example_for(origin))
    _steps(ours, ref, _batches(origin, 2))
    copy_of = {"pickle": _pickled, "deepcopy": copy.deepcopy, "clone": lambda m: m.clone()}
    ours_copy = (copy_of.get(how) or _through_shared_memory)(ours)
    ref_copy = copy_of.get(how, _pickled)(ref)  # torchmetrics' own would write into the original's shared storage
    assert type(ours_copy) is type(ours)
    later = _batches(origin, 3, start=5)
    _steps(ours_copy, ref_copy, later)
    _compute_same(ours_copy, ref_copy)
    _compute_same(ours, ref)  # the original did not see the copy's updates
    _steps(ours, ref, _batches(origin, 2, start=9))
    _compute_same(ours, ref)
    _compute_same(ours_copy, ref_copy)  # nor the copy the original's


@parametrize_registered
def test_accelerating_a_live_instance_leaves_what_it_held_alone(origin: type, accelerated: type) -> None:
    """Adoption is a door: the live instance's states may be held elsewhere (a user, a compute-group sibling)."""
    example = example_for(origin)
    live, ref = _quiet(lambda: origin(**example.init)), _quiet(lambda: origin(**example.init))
    _steps(live, ref, _batches(origin, 2))
    held = dict(live.metric_state)
    kept = copy.deepcopy(held)
    assert _quiet(accelerate, live) is live
    assert type(live).__module__.startswith("torchmetrics_async.")
    _steps(live, ref, _batches(origin, 3, start=5))
    _compute_same(live, ref)
    torch.testing.assert_close(held, kept, rtol=0, atol=0, equal_nan=True)


def _summary(value: Any) -> Any:
    """What a setup decision looks like, comparable across instances (not object identities)."""
    if isinstance(value, Tensor):
        return ("tensor", value.dtype, tuple(value.shape), value.device, value.tolist() if value.numel() < 8 else None)
    if isinstance(value, (bool, int, float, str, type(None))):
        return value
    if isinstance(value, dict):
        return ("dict", sorted(map(str, value)))
    if isinstance(value, (list, tuple)):
        return ("sequence", len(value))
    return getattr(value, "__qualname__", type(value).__qualname__)


def _setup_of(metric: Any) -> dict[str, Any]:
    """Everything the one setup decides: states, their reductions and ownership, checks, constants, attributes."""
    state = metric.__dict__
    owned = state.get("_owned_states", {})
    return {
        "states": {
            name: (_summary(default), _summary(metric._reductions[name]), metric._persistent[name])
            for name, default in metric._defaults.items()
        },
        "owned": [name for name in metric._defaults if owned.get(name) is not state[name]],
        "checks": dict(metric._deferred_checks_registered()),
        "attributes": {key: _summary(value) for key, value in state.items() if key not in metric._defaults},
    }


def _pickled_under_patch(metric: Any) -> Any:
    """A torchmetrics pickle loaded while ``patch()`` is in effect: its class name resolves to the accelerated one."""
    data = pickle.dumps(metric)
    with patch():
        return pickle.loads(data)


@parametrize_registered
def test_every_way_to_an_accelerated_instance_ends_in_the_same_setup(origin: type, accelerated: type) -> None:
    """Direct, accelerate() of torchmetrics' instance, pickles and a user subclass: one setup, the same instance."""
    init = example_for(origin).init
    direct = _quiet(lambda: accelerated(**init))
    made = {
        "accelerate": _quiet(accelerate, _quiet(lambda: origin(**init))),
        "pickle": _quiet(_pickled, direct),
        "torchmetrics pickle under patch": _quiet(_pickled_under_patch, _quiet(lambda: origin(**init))),
    }
    expected = _setup_of(direct)
    assert not expected["owned"]
    for how, metric in made.items():
        assert isinstance(metric, type(direct)), how
        assert _setup_of(metric) == expected, how
    if is_task_wrapper(origin):
        return
    # Setup comes after the outermost __init__, so it sees the states a user's subclass adds.
    subclass = _user_subclass(origin)
    adopted = _quiet(accelerate, _quiet(lambda: subclass(**init)))
    derived = _quiet(lambda: accelerate(subclass)(**init))
    expected = _setup_of(adopted)
    assert not expected["owned"]
    assert "user_total" in expected["states"]
    for metric in (derived, _quiet(_pickled, derived)):
        assert isinstance(metric, accelerated)
        assert _setup_of(metric) == expected


def _user_subclass(origin: type) -> type:
    """A user's subclass adding a state after its parent's ``__init__``, found by name (derived classes pickle so)."""

    def __init__(self: Any, **kwargs: Any) -> None:
        super(cls, self).__init__(**kwargs)
        self.add_state("user_total", torch.zeros(()), dist_reduce_fx="sum")

    name = f"_User{origin.__name__}"
    cls = globals().setdefault(name, type(name, (origin,), {"__init__": __init__, "__module__": __name__}))
    return cls


def _persistent_pair(origin: type, accelerated: type) -> tuple[Any, Any]:
    ours, ref = _pair(origin, accelerated, example_for(origin))
    ours.persistent(True)
    ref.persistent(True)
    return ours, ref


@pytest.mark.parametrize("source", ["ours", "torchmetrics"])
@parametrize_registered
def test_state_dict_round_trips_both_ways(origin: type, accelerated: type, source: str) -> None:
    ours, ref = _persistent_pair(origin, accelerated)
    _steps(ours, ref, _batches(origin, 2))
    ours_loaded, ref_loaded = _persistent_pair(origin, accelerated)
    if source == "ours":
        ours_loaded.load_state_dict(copy.deepcopy(ours.state_dict()))
    else:  # a torchmetrics checkpoint resumed with the accelerated class
        ours_loaded.load_state_dict(copy.deepcopy(ref.state_dict()))
    ref_loaded.load_state_dict(copy.deepcopy(ref.state_dict()))
    later = _batches(origin, 3, start=5)
    _steps(ours_loaded, ref_loaded, later)
    _compute_same(ours_loaded, ref_loaded)


@parametrize_registered
def test_loading_a_state_dict_leaves_it_alone(origin: type, accelerated: type) -> None:
    """Loading is a door: the loaded metric's updates do not write into the state dict it was given."""
    ours, ref = _persistent_pair(origin, accelerated)
    _steps(ours, ref, _batches(origin, 2))
    saved = ours.state_dict()
    kept = copy.deepcopy(saved)
    ours_loaded, ref_loaded = _persistent_pair(origin, accelerated)
    ours_loaded.load_state_dict(saved)
    ref_loaded.load_state_dict(copy.deepcopy(ref.state_dict()))
    _steps(ours_loaded, ref_loaded, _batches(origin, 3, start=5))
    _compute_same(ours_loaded, ref_loaded)
    torch.testing.assert_close(saved, kept, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("persistent_set", ["after", pytest.param("before accelerate()", marks=pytest.mark.sweep)])
@parametrize_registered
def test_torchmetrics_loads_our_state_dict_strictly(origin: type, accelerated: type, persistent_set: str) -> None:
    """A consumer without this package loads the accelerated checkpoint with ``strict=True``, mid-window, whenever
    ``persistent()`` was set: the same values, then and on, as torchmetrics after loading its own checkpoint.

    Compared with torchmetrics loading its own checkpoint: a value torchmetrics keeps outside its states (the
    sliding-window RMSE map) is not in either.
    """
    if persistent_set == "after":
        ours, ref = _persistent_pair(origin, accelerated)
    else:  # the extra states are added by accelerate(), after the user made the states persistent
        ours, ref = _pair(origin, origin, example_for(origin))
        ours.persistent(True)
        ref.persistent(True)
        _quiet(accelerate, ours)
    _steps(ours, ref, _batches(origin, 2))
    plain, reloaded = _persistent_pair(origin, accelerated)[1], _persistent_pair(origin, accelerated)[1]
    plain.load_state_dict(copy.deepcopy(ours.state_dict()), strict=True)
    reloaded.load_state_dict(copy.deepcopy(ref.state_dict()))
    _compute_same(plain, reloaded)
    _steps(plain, reloaded, _batches(origin, 2, start=5))
    _compute_same(plain, reloaded)


def _script_outcome(metric: Any) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.jit.script is deprecated
            return torch.jit.script(metric)
    except Exception as err:  # any scripting failure counts
        return err


@pytest.mark.sweep
@parametrize_registered
def test_jit_script_works_where_torchmetrics_scripts(origin: type, accelerated: type) -> None:
    ours, ref = _pair(origin, accelerated, example_for(origin))
    if isinstance(_script_outcome(ref), torch.jit.ScriptModule):
        assert isinstance(_script_outcome(ours), torch.jit.ScriptModule)


@pytest.mark.sweep
@pytest.mark.parametrize("move", ["double", "set_dtype", "to_float64"])
@parametrize_registered
def test_module_moves_and_set_dtype(origin: type, accelerated: type, move: str) -> None:
    ours, ref = _pair(origin, accelerated, example_for(origin))
    _steps(ours, ref, _batches(origin, 1))
    moves = {
        "double": lambda m: m.double(),
        "set_dtype": lambda m: m.set_dtype(torch.float64),
        "to_float64": lambda m: m.to(torch.float64),
    }
    moves[move](ours)
    moves[move](ref)
    _steps(ours, ref, _batches(origin, 3, start=4))
    _compute_same(ours, ref)


@parametrize_registered
def test_merge_state(origin: type, accelerated: type) -> None:
    ours, ref = _pair(origin, accelerated, example_for(origin))
    ours_other, ref_other = _pair(origin, accelerated, example_for(origin))
    _steps(ours, ref, _batches(origin, 2))
    _steps(ours_other, ref_other, _batches(origin, 2, start=5))
    try:
        ref.merge_state(ref_other)
    except Exception as err:  # torchmetrics refuses (e.g. a custom reduction): ours refuses the same way
        with pytest.raises(type(err)):
            ours.merge_state(ours_other)
        return
    ours.merge_state(ours_other)
    _compute_same(ours, ref)


@pytest.mark.sweep
@pytest.mark.parametrize("compute_groups", [True, False])
@parametrize_registered
def test_in_a_metric_collection(origin: type, accelerated: type, compute_groups: bool) -> None:
    """Two members of the class (one compute group when allowed), through update and forward."""
    example = example_for(origin)

    def collection(cls: type) -> MetricCollection:
        members = {"a": _quiet(lambda: cls(**example.init)), "b": _quiet(lambda: cls(**example.init))}
        return MetricCollection(members, compute_groups=compute_groups)

    ours, ref = collection(accelerated), collection(origin)
    for i, inputs in enumerate(_batches(origin, 4)):
        kind = "forward" if i % 2 else "update"
        ours_out = _quiet(getattr(ours, kind), *_clone(inputs))
        ref_out = _quiet(getattr(ref, kind), *_clone(inputs))
        assert_same(ours_out, ref_out)
    assert_same(_quiet(ours.compute), _quiet(ref.compute))
