"""The package's layering, read from its source: no import circle between its modules (lazy
imports inside functions included) and nothing from JAX's private ``jax._src``."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "numpyro_sgrld"


def _modules():
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def _imports(path, mods):
    """The package's modules that ``path`` imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            candidates = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found |= {c for c in candidates if c in mods}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in mods}
    return found


def _cycle(graph):
    """One import circle in ``graph`` as a list of modules, or ``None``."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for n in sorted(graph.get(node, ())):
            if state.get(n) == "open":
                return path[path.index(n):] + [n]
            if n not in state:
                found = visit(n, path + [n])
                if found:
                    return found
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


def test_the_modules_import_no_circle():
    mods = _modules()
    # the package's __init__ re-exports the public API: it imports everything, nothing imports it
    graph = {name: _imports(path, mods) - {"numpyro_sgrld", name} for name, path in mods.items()
             if name != "numpyro_sgrld"}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_finder_sees_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_nothing_imports_jax_private_modules():
    users = [str(path.relative_to(PACKAGE.parent)) for path in _modules().values()
             if "jax._src" in path.read_text()]
    assert users == []
