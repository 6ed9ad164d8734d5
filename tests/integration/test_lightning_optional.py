"""``torchmetrics_async.lightning`` imports without Lightning; only constructing the callback needs it."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_module_imports_without_lightning_and_the_callback_says_what_is_missing() -> None:
    code = (
        "import sys\n"
        "sys.modules['lightning'] = None\n"  # makes `import lightning` fail as if it were not installed
        "sys.modules['lightning.pytorch'] = None\n"
        "import torchmetrics_async.lightning as tl\n"
        "try:\n"
        "    tl.AsyncMetricLogging()\n"
        "except ImportError as error:\n"
        "    print('ImportError:', error)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "ImportError:" in out, out
    assert "pip install 'lightning>=2.6'" in out, out  # a published package, as pyproject's lightning extra
