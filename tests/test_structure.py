"""The package's layering, read from its source: every module imports only from its own layer
and the layers below (docs/architecture.md), no import circle between its modules (lazy
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


#: The layers of docs/architecture.md, lowest first: each is one or more folders of the
#: package (the command's layer also holds ``models``, the bundled models, at their own public
#: path). The package's top holds only ``__init__`` (the public API), ``__main__`` and the
#: folders (:func:`test_the_package_top_holds_only_its_folders`).
LAYERS = [
    ("the step's pieces", {"core"}),
    ("warm-up and the transition", {"warmup"}),
    ("the data", {"data"}),
    ("the verdict", {"verdict"}),
    ("the NumPyro kernel", {"sampler"}),
    ("the presets", {"presets"}),
    ("bridges", {"bridges"}),
    ("analysis", {"analysis"}),
    ("the command and its problems", {"app", "models"}),
]


def _layer(module):
    top = module.split(".")[1]
    if top == "__main__":  # ``python -m numpyro_sgrld``: the command
        return len(LAYERS) - 1
    return next((k for k, (_, names) in enumerate(LAYERS) if top in names), None)


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


def test_every_module_imports_only_from_its_layer_and_the_ones_below():
    mods = {name: path for name, path in _modules().items() if name != "numpyro_sgrld"}
    assert [name for name in mods if _layer(name) is None] == [], "a module without a layer"
    upward = []
    for name, path in sorted(mods.items()):
        for imported in _imports(path, _modules()):
            # the package root (the public API) only from the command's layer
            if imported == "numpyro_sgrld":
                if _layer(name) < len(LAYERS) - 1 and _root_names(path):
                    upward.append(f"{name} -> numpyro_sgrld ({', '.join(_root_names(path))})")
            elif _layer(imported) > _layer(name):
                upward.append(f"{name} ({LAYERS[_layer(name)][0]}) -> {imported} "
                              f"({LAYERS[_layer(imported)][0]})")
    assert upward == []


def _root_names(path):
    """What ``path`` imports from the package root that is not a sub-module."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "numpyro_sgrld":
            names |= {a.name for a in node.names
                      if not (PACKAGE / a.name).is_dir()
                      and not (PACKAGE / f"{a.name}.py").is_file()}
    return sorted(names)


def test_the_layer_check_sees_an_upward_import():
    assert _layer("numpyro_sgrld.core.algorithm") < _layer("numpyro_sgrld.warmup.steps")
    assert _layer("numpyro_sgrld.core.metrics.monge") < _layer("numpyro_sgrld.app.compare")
    assert _layer("numpyro_sgrld.verdict.judge") < _layer("numpyro_sgrld.sampler.kernel")


def test_the_package_top_holds_only_its_folders():
    """The package's top holds its ``__init__`` (the public API), ``__main__`` and the folders
    of the layers; no module at the top re-exports another's."""
    top = sorted(p.name for p in PACKAGE.iterdir()
                 if p.is_dir() and p.name != "__pycache__")
    assert top == sorted(n for _, names in LAYERS for n in names if n != "models")
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "__main__.py"]


def _only_re_exports(path):
    """Whether the module at ``path`` defines nothing: a docstring and imports alone (or
    ``from x import *``)."""
    body = ast.parse(path.read_text()).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return bool(body) and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in body)


def test_no_module_or_folder_only_re_exports_another():
    """Every module defines what it holds: none is a signpost of imports from elsewhere (the
    package's own ``__init__``, the public API, excepted), and no folder's ``__init__`` only
    hands on another folder's names (it may collect its own modules')."""
    mods = _modules()
    offenders = []
    for name, path in mods.items():
        if name == "numpyro_sgrld" or not _only_re_exports(path):
            continue
        if path.name != "__init__.py":
            offenders.append(name)
        elif not any(m.startswith(name + ".") for m in _imports(path, mods)):
            offenders.append(f"{name} (its __init__ imports from elsewhere only)")
    assert offenders == []


def test_the_re_export_check_sees_a_signpost(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('"""A signpost."""\n\nfrom numpyro_sgrld.core.metrics import *  # noqa\n')
    assert _only_re_exports(path)
    path.write_text('"""A module."""\n\nimport math\n\nTAU = 2 * math.pi\n')
    assert not _only_re_exports(path)


def _folder(module, path):
    """The package that holds ``module`` (a package's ``__init__``: itself)."""
    return module if path.name == "__init__.py" else module.rsplit(".", 1)[0]


def test_no_private_module_is_imported_from_another_folder():
    """An underscore module is its folder's own: a module of another folder imports only
    public modules (what crosses a folder's boundary is public where it lives)."""
    mods = _modules()
    found = []
    for name, path in mods.items():
        for imported in _imports(path, mods):
            leaf = imported.rsplit(".", 1)[-1]
            if (leaf.startswith("_") and not leaf.startswith("__")
                    and _folder(imported, mods[imported]) != _folder(name, path)):
                found.append(f"{name} -> {imported}")
    assert not found, found


def test_the_finder_sees_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_nothing_imports_jax_private_modules():
    users = [str(path.relative_to(PACKAGE.parent)) for path in _modules().values()
             if "jax._src" in path.read_text()]
    assert users == []


def test_no_module_is_over_500_lines():
    """Every module of the library fits in a reader's head: at most 500 lines."""
    long = {name: n for name, path in _modules().items()
            if (n := len(path.read_text().splitlines())) > 500}
    assert not long, f"modules over 500 lines: {long}"


def test_the_host_class_is_thin():
    """``SGMCMC``, NumPyro's side of a kernel, has at most 15 methods in at most 300 lines:
    what it uses besides lives in functions of explicit values (``sampler.parts``)."""
    tree = ast.parse((PACKAGE / "sampler" / "kernel.py").read_text())
    host = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SGMCMC")
    methods = [n.name for n in host.body if isinstance(n, ast.FunctionDef)]
    lines = host.end_lineno - host.lineno + 1
    assert len(methods) <= 15 and lines <= 300, (len(methods), lines)


def _private(name):
    return name.startswith("_") and not name.startswith("__")


def _object_privates(tree):
    """The private attributes a module gives its objects: ``self._x = ...`` anywhere and the
    private methods of its classes."""
    names = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
                and _private(node.attr)):
            names.add(node.attr)
        if isinstance(node, ast.ClassDef):
            names |= {n.name for n in node.body if _private(getattr(n, "name", ""))
                      and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return names


def _private_reads(tree):
    """``(line, name)`` of every read of a private attribute of an object other than
    ``self``/``cls``: ``x._name``, ``getattr(x, "_name")``, and writes ``x._name = ...``."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr)
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            found.append((node.lineno, node.attr))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                and _private(node.args[1].value)):
            found.append((node.lineno, node.args[1].value))
    return found


def test_no_module_touches_another_modules_private_attributes():
    """A module reads (or sets) the private attributes only of objects its own classes make:
    whatever one module needs of another's objects is public (the kernel's ``setup``, its
    ``after_warmup`` hook, ``run_info``). NumPyro's, Equinox's and Python's own private
    attributes that the fast loop, streaming, the Equinox bridge and the verdict rely on are
    outside this test (they are not the package's)."""
    mods = _modules()
    trees = {name: ast.parse(path.read_text()) for name, path in mods.items()}
    owners = {name: _object_privates(tree) for name, tree in trees.items()}
    ours = set().union(*owners.values())
    offences = [f"{name}:{line}: .{attr}" for name, tree in trees.items()
                for line, attr in _private_reads(tree)
                if attr in ours and attr not in owners[name]]
    assert not offences, "\n".join(offences)


def test_the_verdict_reads_the_kernel_through_one_value():
    """The verdict and its advice read what they know of a run's kernel from one value
    (``verdict.run.describe``: a ``Run``), never from the kernel's attributes one by one."""
    readers = ["verdict/judge", "verdict/advice", "verdict/step_rejections",
               "sampler/loop_report", "sampler/run_verdict"]
    found = []
    for name in readers:
        path = PACKAGE / f"{name}.py"
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr"
                    and isinstance(node.args[0], ast.Name)
                    and node.args[0].id in {"kernel", "sampler"}):
                found.append(f"{name}.py:{node.lineno}")
    assert not found, found


def _private_names_imported(path, mods):
    """``(line, module, name)`` of each underscore name (not a module) ``path`` takes from
    another module of the package: ``from m import _x`` or ``m._x`` on an imported module."""
    found, aliases = [], {}
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in mods:
            for a in node.names:
                if f"{node.module}.{a.name}" in mods:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                elif a.name.startswith("_") and not a.name.startswith("__"):
                    found.append((node.lineno, node.module, a.name))
        elif isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname and a.name in mods})
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and f"{aliases[node.value.id]}.{node.attr}" not in mods):
            found.append((node.lineno, aliases[node.value.id], node.attr))
    return found


def test_no_private_name_crosses_a_module_boundary():
    """What one module uses of another is public in it: no ``_name`` (a function, a class, a
    constant) is imported from, or read on, another module of the package."""
    mods = _modules()
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {module}.{name}"
             for path in mods.values()
             for line, module, name in _private_names_imported(path, mods)]
    assert not found, "\n".join(found)


def test_the_private_name_check_sees_one(tmp_path):
    mods = _modules()
    path = tmp_path / "m.py"
    path.write_text("from numpyro_sgrld.core.checks import field_names, _helper\n"
                    "from numpyro_sgrld.sampler import loop\nloop._private_thing\nloop.GROUP\n")
    assert [(m, n) for _, m, n in _private_names_imported(path, mods)] == [
        ("numpyro_sgrld.core.checks", "_helper"), ("numpyro_sgrld.sampler.loop", "_private_thing")]
