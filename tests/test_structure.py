"""tools/structure.py measures what it claims: circles, lazy own imports and module lengths of a synthetic tree."""

from pathlib import Path

from tools.structure import import_circles, import_graph, lazy_own_imports


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "torchmetrics_async" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_circle_hidden_behind_a_lazy_import_is_found_once_the_import_is_at_module_level(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "__init__.py": "from torchmetrics_async import a\n",
            "a.py": "from torchmetrics_async import b\n",
            "b.py": "def late():\n    from torchmetrics_async.a import x\n",
            "sub/__init__.py": "from .c import y\n",
            "sub/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from torchmetrics_async import a\n",
        },
    )
    assert import_circles(import_graph(root)) == []
    assert lazy_own_imports(root) == ["torchmetrics_async.b:2 -> torchmetrics_async.a"]
    (root / "torchmetrics_async" / "b.py").write_text("from torchmetrics_async.a import x\n")
    assert import_circles(import_graph(root)) == [["torchmetrics_async.a", "torchmetrics_async.b"]]
    assert lazy_own_imports(root) == []


def test_relative_imports_resolve_to_the_module_they_name(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "sub/__init__.py": "",
            "sub/c.py": "from . import d\nfrom ..e import z\n",
            "sub/d.py": "",
            "e.py": "",
        },
    )
    assert import_graph(root)["torchmetrics_async.sub.c"] == {"torchmetrics_async.sub.d", "torchmetrics_async.e"}
