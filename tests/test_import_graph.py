"""The package's import graph has no cycles beyond the ones listed here (a ratchet: the list
may only shrink). Imports inside functions count (a lazy import still ties two modules
together); imports under ``if TYPE_CHECKING:`` do not (they never run)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set, Tuple

PACKAGE = "llama_index_hiqa"
ROOT = Path(__file__).resolve().parents[1]

KNOWN_CYCLES: List[Set[str]] = []


def module_files() -> Dict[str, Path]:
    files = {}
    for path in (ROOT / PACKAGE).rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        files[name] = path
    return files


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_names(module: str, path: Path) -> List[str]:
    """Every module name ``module`` imports (``from a import b`` yields ``a`` and ``a.b``)."""
    names: List[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names.append(source)
            names.extend(f"{source}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return names


def import_graph() -> Dict[str, Set[str]]:
    files = module_files()

    def owner(name: str) -> str:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name

    graph: Dict[str, Set[str]] = {}
    for module, path in files.items():
        targets = {owner(n) for n in imported_names(module, path) if n.startswith(PACKAGE)}
        # The package root only re-exports (lazily): an import of it is not a layer edge.
        graph[module] = {t for t in targets if t and t not in (module, PACKAGE)}
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[Set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[Set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_cycle_finder_sees_a_lazy_import_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_type_checking_imports_are_not_edges(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from llama_index_hiqa.x import A\n"
        "def f():\n    from llama_index_hiqa.y import B\n",
        encoding="utf-8",
    )
    names = imported_names("llama_index_hiqa.m", source)
    assert "llama_index_hiqa.y" in names and "llama_index_hiqa.x" not in names


def test_no_import_cycles_beyond_the_known_ones():
    found = cycles(import_graph())
    unexpected = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert not unexpected, f"import cycles: {unexpected}"
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert not gone, f"these cycles are gone: remove them from KNOWN_CYCLES {gone}"


def test_no_store_module_imports_the_pack():
    """Stores are what the pack holds: no module of ``storage`` (leaf stores or backends)
    imports ``pack`` or anything that imports it."""
    graph = import_graph()
    above = {m for m in graph if m.startswith(f"{PACKAGE}.pack.") and m != f"{PACKAGE}.pack.config"}
    changed = True
    while changed:  # every module that reaches the pack
        reaching = {m for m, targets in graph.items() if targets & above} - above
        changed = bool(reaching)
        above |= reaching
    offenders = sorted(m for m in graph if m.startswith(f"{PACKAGE}.storage") and m in above)
    assert not offenders, f"storage modules that import the pack: {offenders}"
    assert f"{PACKAGE}.storage.backends.folder" in graph  # the check sees the backends


# The layers of docs/architecture.md, lowest first: a module may import its own layer and the
# ones before it. Each entry is a module or a package prefix; the longest match decides.
LAYERS: List[Tuple[str, Tuple[str, ...]]] = [
    # The package root holds the foundation (the vocabulary every layer imports) and, at the
    # other end, the two front ends; every other layer is a folder.
    ("foundation", ("schema", "page_geometry", "errors", "events", "headings", "settings", "figures",
                    "text_repair", "progress", "component_dict", "questions")),
    ("models", ("models",)),
    ("vocabularies", ("vocabularies",)),
    ("indexes", ("indexes",)),
    ("readers", ("readers",)),
    ("parsers", ("parsers",)),
    ("transforms", ("transforms",)),
    ("stores", ("storage",)),
    ("retrievers", ("retrievers",)),
    ("postprocessors", ("postprocessors",)),
    ("evaluation", ("evaluation",)),
    # Page images and the explanation of a ranking: they read nodes, the pack returns them.
    ("views", ("views",)),
    # The pack's settings: the store backends build and store them, so they sit below the
    # backends although they live with the pack (``pack/__init__`` imports nothing).
    ("configuration", ("pack.config",)),
    ("store backends", ("storage.backends",)),
    ("pack", ("pack",)),
    ("front ends", ("cli", "demo", "serve")),
]
TOOLS = ("testing",)  # test tools: may import only the foundation


# Imports that go against the layer order today (a ratchet: the list may only shrink).
KNOWN_UPWARD: Set[Tuple[str, str]] = set()


def layer_of(module: str) -> int:
    """The index in LAYERS of ``module`` (its longest matching entry)."""
    short = module[len(PACKAGE) + 1:]
    best, rank = -1, len(LAYERS)
    for i, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            if (short == entry or short.startswith(entry + ".")) and len(entry) > best:
                best, rank = len(entry), i
    return rank


def upward_imports() -> Set[Tuple[str, str]]:
    found = set()
    for module, targets in import_graph().items():
        if module == PACKAGE:
            continue
        short = module[len(PACKAGE) + 1:]
        if short.split(".")[0] in TOOLS:
            found |= {(module, t) for t in targets if layer_of(t) > 0 and t.split(".")[1] not in TOOLS}
            continue
        found |= {(module, t) for t in targets if layer_of(t) > layer_of(module)}
    return found


def test_every_module_has_a_layer():
    unplaced = [m for m in module_files() if m != PACKAGE and layer_of(m) == len(LAYERS)
                and m[len(PACKAGE) + 1:].split(".")[0] not in TOOLS]
    assert not unplaced, f"modules in no layer (add them to LAYERS and docs/architecture.md): {unplaced}"


def test_imports_follow_the_layer_order():
    found = upward_imports()
    unexpected = sorted(found - KNOWN_UPWARD)
    assert not unexpected, f"imports against the layer order (docs/architecture.md): {unexpected}"
    gone = sorted(KNOWN_UPWARD - found)
    assert not gone, f"these upward imports are gone: remove them from KNOWN_UPWARD {gone}"
