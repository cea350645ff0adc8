"""Docstrings in one style: every public function and method that takes parameters has a
Google-style ``Args:`` section naming each of its parameters (no more, no fewer), and one that
returns or yields a value says what in ``Returns:`` / ``Yields:`` (one entry, its continuation
lines indented further, else griffe reads each line as another value). This is the style
mkdocstrings renders (``docstring_style: google`` in mkdocs.yml), so the API pages list each
parameter with its meaning.

"Public" means the function's own name, its class's name and its enclosing functions do not
start with ``_`` (a closure or a private class's method is a private helper). Functions of a
private module (``parsers/_token_budget.py``) count: their names are imported across modules.
The ``testing`` subpackage is tooling and is left out.

``NOT_YET_CONVERTED`` is a ratchet: a module listed there is not checked yet; a module not
listed must pass, and a listed module that already passes fails the test until it is removed
from the list (so the list can only shrink)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

from tests.test_import_graph import module_files as package_module_files

PACKAGE = "llama_index_hiqa"
ROOT = Path(__file__).resolve().parents[1]

# Modules other helpers were restructuring when the style was adopted; all converted since.
NOT_YET_CONVERTED: set = set()

SECTION = re.compile(r"^(\s*)([A-Z][A-Za-z ]*):\s*$")
ENTRY = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?:(\s|$)")
RAISES_ENTRY = re.compile(r"^[A-Za-z_][\w.]*:(\s|$)")


def module_files() -> Dict[str, Path]:
    """Module name -> file of the package, ``testing`` left out."""
    return {
        name: path for name, path in sorted(package_module_files().items())
        if "testing" not in path.relative_to(ROOT).parts
    }


def public_functions(tree: ast.AST) -> Iterator[Tuple[str, ast.AST]]:
    """(qualified name, node) of each public function or method, closures left out."""

    def visit(node: ast.AST, prefix: str) -> Iterator[Tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not child.name.startswith("_"):
                    yield prefix + child.name, child
            elif isinstance(child, ast.ClassDef):
                if not child.name.startswith("_"):
                    yield from visit(child, prefix + child.name + ".")
            elif not isinstance(child, ast.Lambda):
                yield from visit(child, prefix)

    yield from visit(tree, "")


def parameters(fn: ast.AST) -> List[str]:
    args = fn.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    names = [n for n in names if n not in ("self", "cls")]
    if args.vararg:
        names.append("*" + args.vararg.arg)
    if args.kwarg:
        names.append("**" + args.kwarg.arg)
    return names


def sections(doc: str) -> Dict[str, List[str]]:
    """Google-style sections of a docstring: title -> the names its entries start with."""
    found: Dict[str, List[str]] = {}
    lines = doc.splitlines()
    i = 0
    while i < len(lines):
        match = SECTION.match(lines[i])
        if not match:
            i += 1
            continue
        title, indent, entries = match.group(2), len(match.group(1)), []
        i += 1
        entry_indent = None
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            line = lines[i]
            if line.strip():
                depth = len(line) - len(line.lstrip())
                entry_indent = depth if entry_indent is None else entry_indent
                if depth == entry_indent:
                    entries.append(line.strip())
            i += 1
        found[title] = entries
    return found


def _own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``fn``'s body, not those of functions or classes defined inside it."""
    stack = list(fn.body)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                stack.append(child)


def problems(fn: ast.AST) -> List[str]:
    params = parameters(fn)
    if not params:
        return []
    doc = ast.get_docstring(fn) or ""
    if not doc:
        return ["no docstring"]
    found = sections(doc)
    if "Args" not in found:
        return ["no Args: section"]
    named = []
    for entry in found["Args"]:
        match = ENTRY.match(entry)
        if not match:
            return [f"Args: entry not in 'name: meaning' form: {entry[:60]!r}"]
        named.append(match.group(1))
    issues = []
    bare = {p.lstrip("*"): p for p in params}
    missing = [p for p in params if p not in named and p.lstrip("*") not in named]
    unknown = [n for n in named if n.lstrip("*") not in bare]
    if missing:
        issues.append(f"Args: leaves out {missing}")
    if unknown:
        issues.append(f"Args: names no parameter {unknown}")
    for title in ("Returns", "Yields"):
        if len(found.get(title, [])) > 1:
            issues.append(
                f"{title}: has {len(found[title])} entries: indent its continuation lines (griffe "
                "reads each line at the entry indent as another value)"
            )
    bad_raises = [e for e in found.get("Raises", []) if not RAISES_ENTRY.match(e)]
    if bad_raises:
        issues.append(f"Raises: entry not in 'ErrorName: when' form: {bad_raises[0][:60]!r}")
    nodes = list(_own_nodes(fn))
    yields = any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in nodes)
    returns = any(
        isinstance(n, ast.Return) and n.value is not None
        and not (isinstance(n.value, ast.Constant) and n.value.value is None)
        for n in nodes
    )
    if yields and "Yields" not in found and "Returns" not in found:
        issues.append("yields values but has no Yields: section")
    elif returns and not yields and "Returns" not in found:
        issues.append("returns a value but has no Returns: section")
    return issues


def docstring_problems() -> Dict[str, List[str]]:
    report: Dict[str, List[str]] = {}
    for module, path in module_files().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for name, fn in public_functions(tree):
            for issue in problems(fn):
                report.setdefault(module, []).append(f"{name} (line {fn.lineno}): {issue}")
    return report


def test_public_functions_have_google_style_docstrings():
    report = docstring_problems()
    regressed = {m: p for m, p in report.items() if m not in NOT_YET_CONVERTED}
    assert not regressed, "\n".join(f"{m}: {p}" for m, ps in regressed.items() for p in ps)


def test_not_yet_converted_list_only_shrinks():
    report = docstring_problems()
    converted = sorted(m for m in NOT_YET_CONVERTED if m not in report)
    assert not converted, f"these modules pass now: remove them from NOT_YET_CONVERTED: {converted}"
    unknown = sorted(m for m in NOT_YET_CONVERTED if m not in module_files())
    assert not unknown, f"NOT_YET_CONVERTED names modules that do not exist: {unknown}"


def test_griffe_reads_converted_docstrings_without_warnings():
    """What mkdocstrings would say when a converted function gets an API entry: an ``Args:``
    entry naming no parameter, a parameter with neither annotation nor documented type."""
    import logging

    griffe = pytest.importorskip("griffe")
    warnings: List[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                warnings.append(record.getMessage())

    handler = Collect()
    loggers = [logging.getLogger(name) for name in ("griffe", "_griffe")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        package = griffe.load(PACKAGE, search_paths=[str(ROOT)], docstring_parser="google")

        def parse(obj) -> None:
            for member in obj.members.values():
                if member.is_alias:
                    continue
                if member.docstring is not None:
                    member.docstring.parsed  # noqa: B018 - parsing is what logs the warnings
                if member.is_module or member.is_class:
                    parse(member)

        parse(package)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    files = {str(path.relative_to(ROOT)): module for module, path in module_files().items()}
    converted = [
        w for w in warnings
        if w.split(":")[0] in files and files[w.split(":")[0]] not in NOT_YET_CONVERTED
    ]
    assert not converted, "\n".join(converted)


def test_the_check_reads_google_style():
    good = ast.parse(
        'def f(a, *rest, b=1, **extra):\n'
        '    """Sum.\n\n    Args:\n        a: first.\n        *rest: more values,\n'
        '            continued here.\n        b (int): second.\n        **extra: ignored.\n\n'
        '    Returns:\n        The sum.\n    """\n    return a + b\n'
    ).body[0]
    assert problems(good) == []
    missing = ast.parse('def f(a, b):\n    """Sum.\n\n    Args:\n        a: first.\n    """\n').body[0]
    assert problems(missing) == ["Args: leaves out ['b']"]
    stale = ast.parse(
        'def f(a):\n    """Sum.\n\n    Args:\n        a: first.\n        c: gone.\n\n'
        '    Returns:\n        x.\n    """\n    return a\n'
    ).body[0]
    assert problems(stale) == ["Args: names no parameter ['c']"]
    no_returns = ast.parse('def f(a):\n    """Sum.\n\n    Args:\n        a: first.\n    """\n    return a\n').body[0]
    assert problems(no_returns) == ["returns a value but has no Returns: section"]
    two_returns = ast.parse(
        'def f(a):\n    """Sum.\n\n    Args:\n        a: first.\n\n    Returns:\n        The sum,\n'
        '        continued at the entry indent.\n    """\n    return a\n'
    ).body[0]
    assert problems(two_returns)[0].startswith("Returns: has 2 entries")
    assert problems(ast.parse('def f(a):\n    """Sum of a."""\n').body[0]) == ["no Args: section"]
    assert problems(ast.parse('def f():\n    return 1\n').body[0]) == []


SPHINX_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj|ref):`")


def test_no_sphinx_role_is_left():
    """mkdocstrings shows a Sphinx role (``:class:`X```) as it is written; references are
    mkdocstrings cross-references (``[`X`][llama_index_hiqa.module.X]``, checked by the strict
    site build) or plain backticks for what the site does not render."""
    left = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / PACKAGE).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if SPHINX_ROLE.search(line)
    ]
    assert not left, "\n".join(left[:20])
