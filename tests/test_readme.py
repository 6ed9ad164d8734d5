"""The README's and docs' promises that code can check: examples run, generated tables are current, links resolve,
the README is a short guide and nothing refers to files outside the repository."""

from __future__ import annotations

import contextlib
import io
import re
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from tools import coverage_table
from tools.coverage import accelerated_coverage

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md"))
#: Markdown files a user reads: the README, the benchmark results and every page of docs/.
PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *DOCS]


def _python_block_after(heading: str, text: str = README) -> str:
    """The first ```python block after the line ``heading``."""
    tail = text[text.index(heading) :]
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
    # The README shows the callback's part; docs/lightning.md the whole module it trains here.
    assert 'AsyncMetricLogging(prefix="train/")' in _python_block_after("To take the training metrics' sync")
    code = _python_block_after("## A full example", (ROOT / "docs" / "lightning.md").read_text())
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


def test_the_coverage_tables_are_current() -> None:
    for path, tables in coverage_table.generated_docs().items():
        text = path.read_text()
        for table in tables:
            assert table in text, f"{path.name}'s tables are stale: run scripts/coverage-table --write"


def _coverage_counts() -> str:
    """The README's one-line summary of docs/coverage.md: the three totals, and per torchmetrics module."""
    rows = accelerated_coverage()
    modules: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        modules[row.module].append(row.status)
    parts = []
    for module in sorted(modules, key=lambda name: (name == "torchmetrics", name)):
        name = f"`{module.removeprefix('torchmetrics.')}`" if module != "torchmetrics" else "top-level `torchmetrics`"
        parts.append(f"{name} {'/'.join(str(modules[module].count(status)) for status in coverage_table.STATUSES)}")
    line = f"{coverage_table.counts(rows)} (accelerated/verified/not, by module: {', '.join(parts)})."
    return f"With torchvision installed: {line[0].lower()}{line[1:]}" if coverage_table.TORCHVISION else line


def test_the_coverage_counts_are_current() -> None:
    expected = _coverage_counts()
    assert expected in README, f"the README's coverage counts are stale; the current line is:\n{expected}"


def test_the_readme_is_a_short_guide() -> None:
    lines = README.count("\n")
    assert lines <= 300, f"README.md has {lines} lines: move details to docs/"
    for section in (
        "## Install",
        "## In 30 seconds",
        "## Use",
        "## Lightning",
        "## torch.compile",
        "## Distributed",
        "## What is accelerated",
        "## Deviations from torchmetrics",
        "## Results",
    ):
        assert f"\n{section}\n" in README, section


def _outside_code(text: str) -> str:
    """The Markdown text without its fenced code blocks (a ``#`` comment there is not a heading)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    headings = re.findall(r"^#+ (.+)$", _outside_code(path.read_text()), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("path", PAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_link_resolves(path: Path) -> None:
    """Relative links point at a file of the repository, and an anchor at one of that file's headings."""
    links = re.findall(r"\]\(([^)\s]+)\)", _outside_code(path.read_text()))
    for link in links:
        if re.match(r"[a-z]+:", link):  # https:, mailto:
            continue
        target, _, anchor = link.partition("#")
        resolved = (path.parent / target).resolve() if target else path
        assert resolved.is_relative_to(ROOT), (path.name, link)
        assert resolved.exists(), (path.name, link)
        if anchor and resolved.suffix == ".md":
            assert anchor in _anchors(resolved), (path.name, link, sorted(_anchors(resolved)))


def test_the_layout_names_every_module() -> None:
    """docs/design.md's Layout section names every module of the package (by file name)."""
    layout = (ROOT / "docs" / "design.md").read_text().split("## Layout", 1)[1]
    modules = sorted(p for p in (ROOT / "torchmetrics_async").rglob("*.py") if p.name != "__init__.py")
    missing = [str(p.relative_to(ROOT)) for p in modules if not re.search(rf"\b{re.escape(p.name)}\b", layout)]
    assert not missing, f"docs/design.md's Layout does not name {missing}"


#: docs/fuzz_findings.md names the fuzzer's ``--seed`` option and the seeds of its runs: random seeds, not a file.
@pytest.mark.parametrize(
    "path", [p for p in PAGES if p.name != "fuzz_findings.md"], ids=lambda path: str(path.relative_to(ROOT))
)
def test_refers_to_nothing_outside_the_repository(path: Path) -> None:
    text = path.read_text()
    above_root = rf"(\.\./){{{len(path.relative_to(ROOT).parts)}}}"  # a ../ chain that climbs out of the repository
    for pattern in (r"shared/", r"\bseeds?\b", above_root):
        assert not re.search(pattern, text), (path.name, pattern, re.search(pattern, text))
