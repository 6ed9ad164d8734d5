"""Sync-free classification metrics with torchmetrics' names (``torchmetrics.classification``).

Example:
    >>> import torchmetrics_async.classification as classification
    >>> isinstance(classification.__all__, list)
    True
"""

import importlib

# TEMPORARY while the task modules are being written in parallel: import those that exist. Replaced by explicit
# imports once binary, multiclass, multilabel and tasks have all landed.
__all__: list[str] = []
for _name in ("binary", "multiclass", "multilabel", "tasks"):
    try:
        _module = importlib.import_module(f"{__name__}.{_name}")
    except ModuleNotFoundError as _err:
        if _err.name != f"{__name__}.{_name}":
            raise
        continue
    globals().update({_n: getattr(_module, _n) for _n in _module.__all__})
    __all__ += _module.__all__
