"""The README's promises that code can check: its examples run, its coverage table is current, it is self-contained."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import torch

from tools import coverage_table

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _python_block_after(heading: str) -> str:
    """The first ```python block after the line ``heading``."""
    tail = README[README.index(heading) :]
    match = re.search(r"```python\n(.*?)```", tail, re.DOTALL)
    assert match, heading
    return match.group(1)


def test_the_two_commands_come_first() -> None:
    first_block = re.search(r"```bash\n(.*?)```", README, re.DOTALL).group(1)
    assert [line.split()[0] for line in first_block.splitlines()] == ["scripts/demo", "scripts/test"]
    for script in ("demo", "test"):
        assert (ROOT / "scripts" / script).stat().st_mode & 0o111


def test_the_30_second_example_runs() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_python_block_after("## In 30 seconds"), "README-30s", "exec"), {})
    lines = out.getvalue().splitlines()
    assert [line.split()[0] for line in lines] == ["20", "30", "last"], lines


def test_the_lightning_example_trains() -> None:
    pytest.importorskip("lightning", reason="needs `lightning`")
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    namespace: dict = {}
    code = _python_block_after("To take the training metrics' sync")
    code = code[: code.index("trainer = L.Trainer")]  # the README's Trainer writes logs and checkpoints to the cwd
    exec(compile(code, "README-lightning", "exec"), namespace)
    callback = namespace["AsyncMetricLogging"](prefix="train/")
    trainer = L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=2,
    )
    data = TensorDataset(torch.randn(24, 32), torch.randint(0, 10, (24,)))
    trainer.fit(namespace["Classifier"](), DataLoader(data, batch_size=4), DataLoader(data, batch_size=8))
    assert [window["last_batch"] for window in callback.history] == [1, 3, 5]
    assert set(callback.history[0]["values"]) == {"train/train_loss", "train/train_acc"}
    assert "val_acc" in trainer.callback_metrics


def test_the_coverage_table_is_current() -> None:
    table = coverage_table.summary()
    assert table in README, "the README's table is stale: paste the output of scripts/coverage-table"


def test_the_compile_caveats_are_current() -> None:
    assert coverage_table.compile_caveats() in README, (
        "the README's compile caveats are stale: paste the output of scripts/coverage-table --compile"
    )


@pytest.mark.parametrize("path", ["README.md", "benchmarks/README.md"])
def test_refers_to_nothing_outside_the_repository(path: str) -> None:
    text = (ROOT / path).read_text()
    for pattern in (r"shared/", r"\bseeds?\b", r"\.\./(?!README\.md)"):
        assert not re.search(pattern, text), (path, pattern, re.search(pattern, text))
