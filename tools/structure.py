"""Structure of the package, measured: the yardstick of the "simple enough to carry on" redesign.

Prints one row per measure with its target and whether it holds. Static measures come from the source (``ast``),
the class-depth measure from importing the package of the tree measured.

    python -m tools.structure [ROOT] [--check]

``--check`` exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Measure", "import_circles", "import_graph", "lazy_own_imports", "measure"]

PACKAGE = "torchmetrics_async"


@dataclass(frozen=True)
class Measure:
    """One measured property of the tree, with its target (``value <= target`` holds)."""

    name: str
    value: int
    target: int
    detail: str = ""

    @property
    def holds(self) -> bool:
        """Whether the target is met."""
        return self.value <= self.target


def _modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package is its ``__init__``)."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a ``from ... import`` names (relative imports resolved against ``module``)."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module, module: str, is_package: bool, modules: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """(imported own module, line, inside a function) for every import of the package's own modules.

    Imports under ``if TYPE_CHECKING:`` are left out: they never run.
    """
    found: list[tuple[str, int, bool]] = []

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        source = _absolute(node, module, is_package)
        # `from pkg import sub` imports the module pkg.sub where it exists, else a name of pkg
        return [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in targets(child):
                    if target == PACKAGE or target.startswith(PACKAGE + "."):
                        found.append((target, child.lineno, in_function))
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, inside)

    visit(tree, False)
    return found


def _parsed(root: Path) -> dict[str, list[tuple[str, int, bool]]]:
    modules = _modules(root)
    return {
        name: _imports(ast.parse(path.read_text()), name, path.name == "__init__.py", modules)
        for name, path in modules.items()
    }


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module-level imports among the package's own modules (an edge to the module each import statement names)."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, imports in _parsed(root).items():
        for target, _, in_function in imports:
            if not in_function and target in modules and target != name:
                graph[name].add(target)
    return graph


def lazy_own_imports(root: Path) -> list[str]:
    """``module:line -> target`` for every import of the package's own modules inside a function."""
    return [
        f"{name}:{line} -> {target}"
        for name, imports in _parsed(root).items()
        for target, line, in_function in imports
        if in_function
    ]


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted.

    Package ``__init__``s are left out: a package importing its own submodules is how it publishes its names.
    """
    packages = {name for name in graph if any(other.startswith(name + ".") for other in graph)}
    nodes = [name for name in graph if name not in packages]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt in packages:
                continue
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(nodes) + 100))
    for node in nodes:
        if node not in index:
            connect(node)
    return sorted(circles)


_MRO_PROBE = """
import torchmetrics_async
from torchmetrics_async.registry import registry
worst = max(
    (sum(k.__module__.startswith("torchmetrics_async") for k in cls.__mro__), cls.__name__)
    for cls in registry().values()
)
print(worst[0], worst[1], len(registry()), hasattr(torchmetrics_async, "__version__"))
"""


def _mro_depth(root: Path) -> tuple[int, str, int, bool]:
    """(most of our classes in a registered class's MRO, that class, registered classes, has ``__version__``)."""
    out = subprocess.run(
        [sys.executable, "-c", _MRO_PROBE], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[0]), out[1], int(out[2]), out[3] == "True"


def measure(root: Path) -> list[Measure]:
    """Every measure of the redesign's targets for the tree at ``root``."""
    lengths = {name: len(path.read_text().splitlines()) for name, path in _modules(root).items()}
    longest = max(lengths, key=lengths.__getitem__)
    over = sorted((name for name, n in lengths.items() if n > 600), key=lambda n: -lengths[n])
    circles = import_circles(import_graph(root))
    lazy = lazy_own_imports(root)
    depth, deepest, registered, has_version = _mro_depth(root)
    readme = len((root / "README.md").read_text().splitlines())
    return [
        Measure("package lines", sum(lengths.values()), 11_000, f"{len(lengths)} modules"),
        Measure("longest module (lines)", lengths[longest], 600, longest),
        Measure("modules over 600 lines", len(over), 0, ", ".join(f"{n} ({lengths[n]})" for n in over)),
        Measure("import circles", len(circles), 0, "; ".join(" <-> ".join(c) for c in circles)),
        Measure("lazy own imports", len(lazy), 0, "; ".join(lazy)),
        Measure("our classes in an MRO (max)", depth, 5, f"{deepest}, over {registered} registered classes"),
        Measure("README lines", readme, 300),
        Measure("missing __version__", int(not has_version), 0),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=".", type=Path, help="the repository to measure")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    rows = measure(args.root.resolve())
    width = max(len(row.name) for row in rows)
    print(f"{'measure':<{width}}  {'value':>7}  {'target':>7}  holds  detail")
    for row in rows:
        print(f"{row.name:<{width}}  {row.value:>7}  {row.target:>7}  {'yes' if row.holds else 'NO ':<5}  {row.detail}")
    return 1 if args.check and not all(row.holds for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
