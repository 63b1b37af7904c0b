"""Every cross-reference names an object that exists: the Sphinx roles (``:func:``,
``:class:``, ``:mod:``, ``:meth:``, ``:data:``, ``:attr:``, ``:exc:``, ``:obj:``) of the
package's docstrings, and the roles and the inline code spans that are a dotted path of the
package (```numpyro_sgrld.core.metrics```) in README.md and the Markdown pages of docs/
(docs/results/ aside: the records of runs; and the changelog's column of paths that moved
away, which name nothing by design).

A target of the package is resolved by importing its longest importable prefix and ``getattr``
along the rest (a class's attributes, properties and NamedTuple fields exist, and those its
methods set on its instances); in a docstring, a target without the package's prefix is tried
relative to the classes around it (innermost first), then to its module, then as an absolute
name; a leading ``.`` is relative to the module or, as in Python's relative imports, to its
package. A target outside the package is resolved when its top-level module is installed,
skipped when it is not.
"""

import ast
import builtins
import importlib
import importlib.util
import inspect
import pkgutil
import re
import textwrap
import tomllib
from functools import cache
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "numpyro_sgrld"
ROLES = ("func", "class", "mod", "meth", "data", "attr", "exc", "obj")
#: ``:role:`target```, ``:role:`~target``` or ``:role:`text <target>```, the target possibly
#: wrapped over lines inside the backticks (``:py:func:`` too)
ROLE = re.compile(r":(?:py:)?(" + "|".join(ROLES) + r"):`([^`]+)`")
#: an inline code span of Markdown, of one or more backticks
SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
#: a code span that is a reference: a dotted path of the package, ``()`` allowed at its end
DOTTED = re.compile(rf"{PACKAGE}(?:\.\w+)+(?:\(\))?")
FENCE = re.compile(r"^\s*(```|~~~)")


class Reference(NamedTuple):
    path: str  # relative to the repository
    line: int
    role: str  # ``:func:`` ..., or ``code`` for a code span of a page
    target: str  # as resolved: whitespace removed, ``~`` and the link text dropped
    module: str | None = None  # a docstring's module, None on a page
    scopes: tuple = ()  # the qualified names of the classes around a docstring, innermost first


def _target(text):
    """The object a role's text names: ``text <target>`` -> ``target``, ``~a.b`` -> ``a.b``,
    ``f()`` -> ``f``; whitespace (a line break in a wrapped docstring) removed."""
    text = re.sub(r"\s+", " ", text).strip()
    link = re.fullmatch(r"(?s).*<([^<>]+)>", text)
    target = re.sub(r"\s+", "", link.group(1) if link else text).lstrip("~!")
    return target.removesuffix("()")


def _roles(text):
    """``(offset, role, target)`` of every role in ``text``."""
    return [(m.start(), f":{m.group(1)}:", _target(m.group(2))) for m in ROLE.finditer(text)]


def _line(text, offset, first=1):
    return first + text.count("\n", 0, offset)


# --- the package's docstrings ---


@cache
def _module_names():
    """Every module of the installed package: the packages pyproject.toml lists (the bundled
    models live in ``models/`` under the name ``numpyro_sgrld.models``) and their modules."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    names = []
    for package in config["tool"]["setuptools"]["packages"]:
        names.append(package)
        module = importlib.import_module(package)
        names += [m.name for m in pkgutil.iter_modules(module.__path__, f"{package}.")
                  if not m.ispkg]
    return tuple(names)


def _definitions(path):
    """``{qualified name: (line, docstring)}`` of a file's definitions (``""``: the module), the
    line that of the literal docstring (or of the definition, with ``docstring=None``, when its
    docstring is not a literal); functions' inner definitions aside."""
    found = {}

    def visit(node, prefix):
        body = getattr(node, "body", [])
        first = body[0] if body else None
        literal = (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                   and isinstance(first.value.value, str))
        found[prefix.rstrip(".")] = ((first.lineno, first.value.value) if literal
                                     else (getattr(node, "lineno", 1), None))
        if isinstance(node, (ast.Module, ast.ClassDef)):
            for child in body:
                if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(path.read_text()), "")
    return found


@cache
def _module_files():
    return sorted({Path(inspect.getfile(importlib.import_module(n))) for n in _module_names()})


@cache
def _source_lines(path):
    return path.read_text().split("\n")


def _written(text, path, start):
    """``(file, line)`` where a docstring built at run time (``__doc__ = ... + COMMON``, a
    property made in a loop) has ``text``: its module from line ``start`` on, else anywhere in
    it, else the package's file that holds it (a shared constant)."""
    lines = _source_lines(path)
    for k in [*range(start - 1, len(lines)), *range(start - 1)]:
        if text in lines[k]:
            return path, k + 1
    for other in _module_files():
        if (k := next((k for k, line in enumerate(_source_lines(other)) if text in line),
                      None)) is not None:
            return other, k + 1
    return path, start


def _function(obj):
    """The function behind a method, static or class method, property or wrapper (``jax.jit``,
    ``functools.cache``), or ``None``."""
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    elif isinstance(obj, property):
        obj = obj.fget
    elif hasattr(obj, "__wrapped__") and not inspect.isclass(obj):
        obj = inspect.unwrap(obj)
    return obj if inspect.isfunction(obj) else None


def _documented(module):
    """``(qualified name, docstring, scopes, line)`` of a module and of every class, function,
    method and property it defines (``__module__`` is the module: no re-export counted twice);
    ``line``, a function's first, is ``None`` for a module or class."""
    found = [("", module.__doc__, (), None)]
    seen = set()

    def walk(namespace, prefix, scopes):
        for name, obj in vars(namespace).items():
            qualname = f"{prefix}{name}"
            if inspect.isclass(obj):
                if (obj.__module__ != module.__name__ or obj.__qualname__ != qualname
                        or id(obj) in seen):
                    continue  # imported, or an alias
                seen.add(id(obj))
                inner = (qualname, *scopes)
                found.append((qualname, vars(obj).get("__doc__"), inner, None))
                walk(obj, f"{qualname}.", inner)
            elif (function := _function(obj)) is not None:
                if function.__module__ != module.__name__ or id(obj) in seen:
                    continue
                seen.add(id(obj))
                doc = obj.__doc__ if isinstance(obj, property) else function.__doc__
                found.append((function.__qualname__, doc, scopes,
                              function.__code__.co_firstlineno))

    walk(module, "", ())
    return found


@cache
def _docstring_references():
    """Every role of every docstring of the package, each once."""
    refs = []
    for name in _module_names():
        module = importlib.import_module(name)
        path = Path(inspect.getfile(module))
        definitions = _definitions(path)
        for qualname, doc, scopes, first in _documented(module):
            if not doc:
                continue
            line, literal = definitions.get(qualname, (first or 1, None))
            for offset, role, target in _roles(doc):
                if literal == doc:
                    where, at = path, _line(doc, offset, line)
                else:
                    written = ROLE.match(doc, offset).group().split("\n")[0]
                    where, at = _written(written, path, first or line)
                refs.append(Reference(where.relative_to(ROOT).as_posix(), at, role, target,
                                      name, scopes))
    return list(dict.fromkeys(refs))


# --- the Markdown pages ---


def _pages():
    docs = ROOT / "docs"
    return [ROOT / "README.md", *sorted(p for p in docs.rglob("*.md")
                                        if "results" not in p.relative_to(docs).parts[:-1])]


def _prose(text):
    """``text`` with its fenced code blocks blanked, line breaks kept."""
    out, fence = [], None
    for line in text.split("\n"):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
            out.append("")
        elif fence is not None:
            out.append("")
            if line.strip().startswith(fence):
                fence = None
        else:
            out.append(line)
    return "\n".join(out)


def _page_references(path, text):
    """The roles of a page's prose, and its code spans that are a dotted path of the package
    (a span with a space, arguments or ``=`` is code, not a reference)."""
    prose = _prose(text)
    refs = [Reference(path, _line(prose, offset), role, target)
            for offset, role, target in _roles(prose)]
    prose = ROLE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), prose)  # not counted twice
    for m in SPAN.finditer(prose):
        code = m.group(2).strip()
        if DOTTED.fullmatch(code):
            refs.append(Reference(path, _line(prose, m.start()), "code",
                                  code.removesuffix("()")))
    return refs


def _without_gone_paths(text):
    """The changelog's ``text`` with the first cell of its tables' rows blanked: the column
    of paths a change removed ("before"), which name nothing by design."""
    def blank(m):
        return m.group(1) + "|" + " " * (len(m.group()) - len(m.group(1)) - 2) + "|"

    return "\n".join(re.sub(r"^(\s*)\|[^|]*\|", blank, line) for line in text.split("\n"))


@cache
def _docs_references():
    refs = []
    for page in _pages():
        text = page.read_text()
        if page.name == "changelog.md":
            text = _without_gone_paths(text)
        refs += _page_references(page.relative_to(ROOT).as_posix(), text)
    return refs


# --- resolution ---


@cache
def _instance_attributes(cls):
    """The attributes a class's instances have that the class itself may not: its and its
    bases' annotated and dataclass fields, and what their methods set (``self.name = ...``)."""
    names = set()
    for c in cls.__mro__:
        names |= set(vars(c).get("__annotations__", {})) | set(
            getattr(c, "__dataclass_fields__", {}))
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(c)))
        except (OSError, TypeError, SyntaxError):
            continue  # a builtin, or no source
        names |= {node.attr for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.value, ast.Name) and node.value.id == "self"}
    return frozenset(names)


@cache
def _exists(target):
    """Whether a dotted path names an object: its longest importable prefix, imported, then
    ``getattr`` along the rest (an attribute its class's instances have counts); a bare name
    may be a builtin."""
    parts = target.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for name in parts[k:]:
            if hasattr(obj, name):
                obj = getattr(obj, name)
            elif inspect.isclass(obj) and name in _instance_attributes(obj):
                obj = None  # it exists on the instances, with no value on the class
            else:
                return False
        return True
    return len(parts) == 1 and hasattr(builtins, target)


@cache
def _package_names():
    """Every name defined or imported at a module's top in the package, and its modules' own
    names: a target starting with one is the package's, never an external one not installed."""
    names = {PACKAGE}
    for name in _module_names():
        names.add(name.rsplit(".", 1)[-1])
        names |= set(vars(importlib.import_module(name)))
    return frozenset(names)


def _external_absent(ref):
    """Whether ``ref`` names an object of a library that is not installed (then skipped)."""
    top = ref.target.split(".")[0]
    if not top or top in _package_names() or hasattr(builtins, top):
        return False
    if "." not in ref.target and ref.role != ":mod:":
        return False  # a bare name that is not a module: the package's, misspelt
    try:
        return importlib.util.find_spec(top) is None
    except (ImportError, ValueError):
        return True


def _candidates(ref):
    """The absolute paths ``ref`` may mean, in the order they are tried."""
    target = ref.target
    if ref.module is None or target.split(".")[0] == PACKAGE:
        return [target]
    if target.startswith("."):  # the module's, or its package's (Python's relative import)
        module = importlib.import_module(ref.module)
        package = ref.module if hasattr(module, "__path__") else module.__package__
        return list(dict.fromkeys([f"{ref.module}{target}", f"{package}{target}"]))
    return [*(f"{ref.module}.{scope}.{target}" for scope in ref.scopes),
            f"{ref.module}.{target}", target]


def _resolves(ref):
    """``True`` when ``ref`` names an existing object (or one of a library not installed)."""
    if any(_exists(c) for c in _candidates(ref)):
        return True
    return ref.target.split(".")[0] != PACKAGE and _external_absent(ref)


def _unresolved(refs):
    return list(dict.fromkeys(f"{r.path}:{r.line}: {r.role} {r.target}" for r in refs
                              if not _resolves(r)))


# --- the tests ---


def test_every_cross_reference_resolves():
    """Every reference of the docstrings and the pages, listed in one failure."""
    unresolved = _unresolved(_docstring_references()) + _unresolved(_docs_references())
    if unresolved:
        pytest.fail(f"{len(unresolved)} references name nothing:\n" + "\n".join(unresolved),
                    pytrace=False)


def test_the_references_are_found():
    """The patterns see the references (a broken pattern would pass the test above)."""
    doc_roles = {r.role for r in _docstring_references()}
    assert {":func:", ":class:", ":mod:", ":data:"} <= doc_roles
    assert len(_docstring_references()) > 300
    assert len({r.path for r in _docs_references()}) > 5


def test_a_reference_is_read_in_each_form():
    text = """See :func:`numpyro_sgrld.check`, :class:`~numpyro_sgrld.SGMCMC`, :mod:`the metrics
    <numpyro_sgrld.core.metrics>`, :meth:`numpyro_sgrld.SGMCMC.
    init` and :py:func:`jax.vmap()`."""
    assert [(_line(text, offset), role, target) for offset, role, target in _roles(text)] == [
        (1, ":func:", "numpyro_sgrld.check"), (1, ":class:", "numpyro_sgrld.SGMCMC"),
        (1, ":mod:", "numpyro_sgrld.core.metrics"), (2, ":meth:", "numpyro_sgrld.SGMCMC.init"),
        (3, ":func:", "jax.vmap")]
    page = ("`numpyro_sgrld.core.metrics` and `numpyro_sgrld.enable_fast_sampling_loop()`, not\n"
            "`numpyro_sgrld.check(mcmc)` nor `x = numpyro_sgrld.y`; :func:`numpyro_sgrld.check`\n"
            "```python\nprint(`numpyro_sgrld.in_code`)\n```\n")
    assert [(r.line, r.role, r.target) for r in _page_references("page.md", page)] == [
        (2, ":func:", "numpyro_sgrld.check"), (1, "code", "numpyro_sgrld.core.metrics"),
        (1, "code", "numpyro_sgrld.enable_fast_sampling_loop")]


def test_the_resolver_reports_a_broken_reference():
    def ref(role, target, module=None, scopes=()):
        return Reference("x.py", 1, role, target, module, scopes)

    broken = [ref(":func:", "numpyro_sgrld.no_such_name"),
              ref("code", "numpyro_sgrld.core.metrics.NoSuchMetric"),
              ref(":func:", "no_such_name", "numpyro_sgrld.presets.table"),
              ref(":meth:", "SGMCMC.no_such_method", "numpyro_sgrld.presets.table"),
              ref(":func:", "numpyro.infer.no_such_name")]
    good = [ref(":func:", "numpyro_sgrld.check"), ref(":mod:", "numpyro_sgrld.core.metrics"),
            ref(":class:", "SGMCMC", "numpyro_sgrld.presets.table"),
            ref(":meth:", "init", "numpyro_sgrld.sampler.kernel", ("SGMCMC",)),
            ref(":func:", ".check", "numpyro_sgrld"),
            ref(":mod:", ".funnel", "numpyro_sgrld.models.double_well"),  # a sibling
            ref(":attr:", "algorithm", "numpyro_sgrld.sampler.kernel", ("SGMCMC",)),  # __init__'s
            ref(":attr:", "numpyro_sgrld.core.state.ChainState.z"),  # a NamedTuple's field
            ref(":class:", "numpyro.infer.MCMC"), ref(":exc:", "ValueError"),
            ref(":class:", "no_such_library_installed.Thing")]  # not installed: skipped
    assert [r.target for r in broken if _resolves(r)] == []
    assert [r.target for r in good if not _resolves(r)] == []


def test_a_broken_reference_is_listed_where_it_is_written():
    doc = "A module.\n\nSee :func:`numpyro_sgrld.check` and\n:func:`numpyro_sgrld.no_such_name`."
    refs = [Reference("x.py", _line(doc, offset, 10), role, target, "numpyro_sgrld")
            for offset, role, target in _roles(doc)]
    assert _unresolved(refs) == ["x.py:13: :func: numpyro_sgrld.no_such_name"]
