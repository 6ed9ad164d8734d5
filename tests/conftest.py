"""The ``slow`` marker: by place (spawned ranks, Lightning fits, compile sweeps), and for all but the first case of a
``sweep``.

``pytest -m "not slow"`` is the quick run (at most 3 minutes on 2 cores, in the 2 processes of addopts' ``-n 2``);
``scripts/test`` runs everything. A test added in a slow place (:data:`SLOW_FOLDERS`, :data:`SLOW_FILES`) is slow
without being listed; a slow test elsewhere carries ``@pytest.mark.slow`` itself. A parametrized test over the
registry or many configurations carries ``@pytest.mark.sweep``: its first case stays in the quick run (so every
property is still exercised there), the others are slow.
"""

import fnmatch
import os
from pathlib import Path

import pytest
import torch

if "PYTEST_XDIST_WORKER" in os.environ:
    # One thread per worker: with addopts' 2 workers on 2 cores, torch's default of a thread per core oversubscribes
    # them (the quick run took 3 min 9 s so, 2 min 30 s with one thread each). Spawned ranks inherit the variable.
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

TESTS = Path(__file__).parent
# Folders of tests/ whose every test is slow, and file name patterns (anywhere under tests/).
SLOW_FOLDERS = (
    "distributed",  # spawned ranks (gloo, 2-4 processes)
    "integration",  # Lightning: fits (some in 2 processes) and the import check in a subprocess
)
# torch.compile sweeps (the registry, the collections, the kernels, Running): seconds a graph. tests/test_compile.py
# is not among them: one case of it stays in the quick run, its other tests are marked slow one by one.
SLOW_FILES = ("test_compile_*.py",)


def is_slow_place(path: Path) -> bool:
    """Whether the test file at ``path`` lies in a slow folder or matches a slow file pattern."""
    if not path.is_relative_to(TESTS):
        return False  # the package's doctests
    relative = path.relative_to(TESTS)
    return relative.parts[0] in SLOW_FOLDERS or any(fnmatch.fnmatch(path.name, pattern) for pattern in SLOW_FILES)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    swept: set[str] = set()  # the sweeps whose first case was seen (node id without the parameters)
    for item in items:
        if is_slow_place(item.path):
            item.add_marker(pytest.mark.slow)
        elif item.get_closest_marker("sweep") is not None:
            function = item.nodeid.partition("[")[0]
            if function in swept:
                item.add_marker(pytest.mark.slow)
            swept.add(function)
