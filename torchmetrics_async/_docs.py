"""The docstring of an accelerated class: torchmetrics' own, with one paragraph on what differs.

Its examples import the accelerated class, so the doctests check each one against the values torchmetrics documents.
"""

import inspect
import re
import textwrap

__all__ = ["DEFERRED_CHECKS", "accelerated_doc"]

#: What every accelerated class shares, after its own sentence.
DEFERRED_CHECKS = (
    "Value checks and NaN warnings that need device data are recorded on the device and raised by ``compute()`` (or"
    " ``reset()``) with torchmetrics' message. Every difference: the torchmetrics-async README, \"Deviations from"
    ' torchmetrics".'
)


def accelerated_doc(cls: type, origin: type) -> str:
    """Return torchmetrics' docstring of ``origin`` with a paragraph on what ``cls`` changes after its summary line."""
    note = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
    summary, _, rest = inspect.cleandoc(origin.__doc__ or "").partition("\n")
    # `>>> from torchmetrics[.sub] import ..., Name, ...` -> `>>> from torchmetrics_async[.sub] import ...`.
    ours = cls.__module__.split(".")[0]
    rest = re.sub(
        rf"(>>> from )torchmetrics((?:\.\w+)* import (?:.*\W)?{origin.__name__}\b)", rf"\g<1>{ours}\g<2>", rest
    )
    paragraph = textwrap.fill(f"Accelerated: {note} {DEFERRED_CHECKS}", width=116)
    return f"{summary}\n\n{paragraph}\n{rest}"
