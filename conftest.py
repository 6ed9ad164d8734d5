"""pytest setup for the package's doctests (the suite's own helpers live in tests/).

The accelerated classes' docstrings carry torchmetrics' examples (see ``torchmetrics_async._docs``), written for
torchmetrics' doctest setup: ``torch`` and ``tensor`` in scope, the global seed at 42 and whitespace normalized
(``doctest_optionflags`` in pyproject.toml).
"""

import importlib.util

import pytest
import torch
from _pytest.doctest import DoctestItem

# The Lightning callback's examples build it, which needs the optional `lightning` extra.
collect_ignore = [] if importlib.util.find_spec("lightning") else ["torchmetrics_async/lightning.py"]


@pytest.fixture(autouse=True)
def _torchmetrics_doctest_setup(request: pytest.FixtureRequest, doctest_namespace: dict) -> None:
    if isinstance(request.node, DoctestItem):
        doctest_namespace.update(torch=torch, tensor=torch.tensor)
        torch.manual_seed(42)
