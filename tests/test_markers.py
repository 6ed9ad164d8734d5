"""The ``slow`` and ``sweep`` markers (tests/conftest.py): what the quick run (``-m "not slow"``) leaves out."""

import collections

import pytest

from tests.conftest import TESTS, is_slow_place


@pytest.mark.parametrize(
    ("path", "slow"),
    [
        ("distributed/test_two_ranks.py", True),
        ("integration/test_lightning.py", True),
        ("test_compile_registry.py", True),
        ("test_compile_kernels.py", True),
        ("test_compile.py", False),  # one compiled case stays in the quick run
        ("test_collector.py", False),
        ("classification/test_curves.py", False),
    ],
)
def test_slow_places(path: str, slow: bool) -> None:
    assert is_slow_place(TESTS / path) is slow
    assert not is_slow_place(
        TESTS.parent / "torchmetrics_async" / "collector" / "collector.py"
    )  # the package's doctests


def test_every_test_in_a_slow_place_is_slow_and_every_sweep_keeps_one_quick_case(
    request: pytest.FixtureRequest,
) -> None:
    # Over the tests of this session: all of them under scripts/test, the quick ones under -m "not slow".
    quick_cases: collections.Counter[str] = collections.Counter()
    for item in request.session.items:
        slow = item.get_closest_marker("slow") is not None
        if is_slow_place(item.path):
            assert slow, item.nodeid
        if item.get_closest_marker("sweep") is not None and not slow:
            quick_cases[item.nodeid.partition("[")[0]] += 1
    assert all(count == 1 for count in quick_cases.values()), quick_cases
