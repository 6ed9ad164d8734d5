"""The package's layers: its modules import each other without a circle, and only at module level.

Read from the source with ``ast`` (not from ``sys.modules``), so a circle cut by an import inside a function, or
hidden by import order, is found all the same.
"""

import ast
from pathlib import Path

import torchmetrics_async

PACKAGE = "torchmetrics_async"
ROOT = Path(torchmetrics_async.__file__).parent

# Function-level imports of our own modules tolerated nowhere: keep this empty.
LAZY_IMPORT_ALLOWED: set[str] = set()


def _module_names() -> dict[str, Path]:
    names = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


MODULES = _module_names()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _absolute(node: ast.ImportFrom, importer: str) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if _is_package(importer) else importer.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.Import | ast.ImportFrom, importer: str) -> list[str]:
    """Our modules an import statement runs: the module it names (the submodule a ``from`` names, else the module
    itself, the root package included), and the packages above it that ``importer`` is not inside (importing ``a.b.c``
    runs ``a/b/__init__.py`` first; the root package always runs before any of its modules)."""
    if isinstance(node, ast.Import):
        named = [alias.name for alias in node.names]
    else:
        module = _absolute(node, importer)
        named = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in MODULES else module for alias in node.names]
    targets = []
    for name in named:
        if name.split(".")[0] != PACKAGE:
            continue
        parts = name.split(".")
        above = [".".join(parts[:end]) for end in range(2, len(parts))]
        for target in [*(p for p in above if not (importer + ".").startswith(p + ".")), name]:
            if target in MODULES and target not in targets:
                targets.append(target)
    return targets


def _imports(name: str, source: str | None = None) -> tuple[set[str], dict[str, set[str]]]:
    """(our modules ``name`` imports at module level, ``line: statement`` -> our modules imported inside functions)."""
    tree = ast.parse(MODULES[name].read_text() if source is None else source)
    module_level: set[str] = set()
    lazy: dict[str, set[str]] = {}

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                targets = set(_targets(child, name))
                if in_function and targets:
                    lazy[f"{child.lineno}: {ast.unparse(child)}"] = targets
                elif not in_function:
                    module_level.update(targets)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return module_level, lazy


def _graph() -> dict[str, set[str]]:
    """Module -> our modules it imports: at module level, and inside functions (a circle they cut is still one)."""
    graph = {}
    for name in MODULES:
        module_level, lazy = _imports(name)
        if name not in LAZY_IMPORT_ALLOWED:
            module_level = module_level.union(*lazy.values())
        graph[name] = module_level
    return graph


GRAPH = _graph()


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (as the path that closes it), or ``None``."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(graph[node]):
            found = visit(target)
            if found:
                return found
        path.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        found = visit(node)
        if found:
            return found
    return None


def test_the_graph_sees_the_package() -> None:
    """The graph is read from real files: a known edge is in it (so an empty graph cannot pass the tests below)."""
    assert len(MODULES) > 30
    assert "torchmetrics_async.metric" in GRAPH["torchmetrics_async.aggregation"]


def test_lazy_imports_and_implied_packages_are_seen() -> None:
    source = (
        "from torchmetrics_async.classification.shapes import x\n"
        "class A:\n"
        "    from torchmetrics_async import errors\n"
        "    def f(self):\n"
        "        from torchmetrics_async import MeanMetric\n"
        "        import torch\n"
    )
    module_level, lazy = _imports("torchmetrics_async.metric", source)
    assert module_level == {
        "torchmetrics_async.classification",
        "torchmetrics_async.classification.shapes",
        "torchmetrics_async.errors",
    }
    assert lazy == {"5: from torchmetrics_async import MeanMetric": {"torchmetrics_async"}}


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circle() -> None:
    cycle = _cycle(GRAPH)
    assert cycle is None, f"import circle: {' -> '.join(cycle or [])}"


def test_no_import_of_our_modules_inside_functions() -> None:
    lazy = {name: list(found) for name in MODULES if name not in LAZY_IMPORT_ALLOWED and (found := _imports(name)[1])}
    assert not lazy, f"imports of torchmetrics_async modules inside functions (import them at module level): {lazy}"
