"""The layer rule (ARCHITECTURE.md "Layers"): imports flow one way, and no module takes part in an
import circle.

Every module of the package is parsed with `ast` (nothing is imported); an import counts wherever
it is written, at module level or inside a function, because a function-level import is a
dependency all the same (hiding one inside a function is how circles were dodged). The circle check
looks at the module-level imports (those run when a module is imported) and at all of them.
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Lowest first; a module may import its own layer and the layers below it, never one above.
LAYERS = [
    ("base", ["errors", "ir", "schema"]),  # error hierarchy, dtype tables, MLIR helpers, the .pte format
    ("runtime", ["runtime"]),  # the thin runtime: runs a .pte with nothing but the base (no MLIR)
    ("dialects", ["dialects"]),
    ("compiler", ["passes", "compiler"]),  # passes and the program manager: one layer, no circles
    ("targets", ["targets"]),
    ("devtools", ["devtools", "llm"]),
    ("top", ["etc", "tools", "bench", "models"]),  # the package's API (etc/__init__.py) and its users
]
LAYER_OF = {folder: rank for rank, (_, folders) in enumerate(LAYERS) for folder in folders}
SKIP = {".venv", "test", "build", "__pycache__", ".git", "etc.egg-info"}


def _modules() -> dict[str, str]:
    """{module name: path} of every module of the package."""
    found = {}
    for directory, folders, files in os.walk(ROOT):
        folders[:] = sorted(f for f in folders if f not in SKIP and not f.startswith("."))
        for name in files:
            if not name.endswith(".py") or (directory == ROOT and name == "setup.py"):
                continue
            relative = os.path.relpath(os.path.join(directory, name), ROOT)[:-3].split(os.sep)
            if relative[-1] == "__init__":
                relative = relative[:-1]
            found[".".join(["etc", *relative])] = os.path.join(directory, name)
    return found


MODULES = _modules()


def _imports(module: str, path: str) -> list[tuple[str, int, bool]]:
    """(imported etc module, line, at module level) for each import of `module`."""
    tree = ast.parse(open(path).read(), path)
    package = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
    top_level = {id(node) for node in tree.body}
    top_level |= {id(n) for node in tree.body if isinstance(node, (ast.If, ast.Try)) for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            # `from package import module` depends on the module; `from module import name` on the module
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.append((name, node.lineno, id(node) in top_level))
    return found


IMPORTS = {module: _imports(module, path) for module, path in MODULES.items()}


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return LAYER_OF["etc"]
    folder = parts[1]
    assert folder in LAYER_OF, f"{folder}/ is in no layer: add it to LAYERS and to ARCHITECTURE.md"
    return LAYER_OF[folder]


def test_every_folder_has_a_layer():
    for module in MODULES:
        _layer(module)


def test_no_import_runs_upward():
    upward = [f"{MODULES[module]}:{line}: {module} ({LAYERS[_layer(module)][0]}) imports {target} "
              f"({LAYERS[_layer(target)][0]})"
              for module, imports in IMPORTS.items() for target, line, _ in imports
              if _layer(target) > _layer(module)]
    assert not upward, "imports that run up the layers:\n" + "\n".join(sorted(set(upward)))


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("which", ["module-level", "all"])
def test_no_import_circle(which):
    edges = {module: {target for target, _, top in imports if top or which == "all"}
             for module, imports in IMPORTS.items()}
    circles = _circles(edges)
    assert not circles, f"{len(circles)} import circle(s):\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_checker_sees_an_upward_import_and_a_circle():
    """The rule can fail: a base module importing the compiler, and two modules importing each other."""
    assert _layer("etc.errors") < _layer("etc.compiler.program")
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []
