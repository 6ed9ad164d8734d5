"""Lightning integration tests: the helper modules import ``lightning``, so without it they are not collected (the
test modules skip themselves with the reason)."""

import importlib.util


def _has_lightning() -> bool:
    try:
        return importlib.util.find_spec("lightning") is not None
    except (ImportError, ValueError):
        return False


collect_ignore = [] if _has_lightning() else ["lit.py", "ddp_main.py"]
