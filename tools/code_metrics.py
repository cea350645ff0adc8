"""Measure a checkout of llama_index_hiqa and render CHANGELOG's before/after table from two runs.

What it counts (every figure from the checkout's files, none typed by hand):

- ``root_modules``: the ``.py`` files directly in the package folder (``__init__.py`` left out);
- ``traced_files``: the package's files whose functions run while ``HiQAPack.from_directory``
  reads the demo datasheets and while ``HiQAPack.run`` answers one question on that pack with no
  LLM (a subprocess with the checkout first on ``sys.path``; a file counts when a function, method
  or lambda of it runs, so module bodies executed by an import do not count);
- ``any_annotations``: parameters, returns and annotated assignments annotated exactly ``Any``,
  per folder of the package (its layers, found by walking the folders) and in total;
- ``mypy``: ``python -m mypy --strict -p llama_index_hiqa`` on the checkout, with no config file
  (so a ratchet's per-module settings do not change the count), from mypy's summary line;
- ``imports_in_functions``: ``import`` statements inside a function (not under
  ``if TYPE_CHECKING:``), in total and of the package's own modules;
- ``duplicates``: the pairs the ``duplicates`` command reports over the package folder;
- ``longest_classes`` / ``longest_modules``: the ten longest by lines, with their code lines
  (no blank lines, comments or docstrings), and how many classes exceed 300 lines.

Use::

    python tools/code_metrics.py --checkout DIR --out metrics.json
    python tools/code_metrics.py --changelog tools/code_metrics_before.json metrics.json

The second form writes the table into CHANGELOG.md between ``<!-- begin: code-metrics -->`` and
``<!-- end: code-metrics -->`` inside the ``### Folders that are the layers`` subsection of
``## [Unreleased]`` (created with one sentence when missing).
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import tokenize
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

PACKAGE = "llama_index_hiqa"
ROOT = Path(__file__).resolve().parents[1]
CHANGELOG = ROOT / "CHANGELOG.md"
ROOT_LAYER = "(root)"  # the folder key of the modules directly in the package folder
LONG_CLASS_LINES = 300
TOP = 10  # classes and modules in the JSON
TABLE_TOP = 5  # of them in the CHANGELOG table (a cell of ten is unreadable)
DEMO_QUESTION = "What is the maximum output current of the NX-2043?"
SECTION_TITLE = "### Folders that are the layers"
SECTION_SENTENCE = (
    "The package's folders are its layers; the table below is measured by "
    "`tools/code_metrics.py` on the code before and after this work."
)
LINE_WIDTH = 99  # CHANGELOG's prose is wrapped at about 100 characters
TABLE_NOTE = (
    "Written by `python tools/code_metrics.py --changelog BEFORE.json AFTER.json` from two runs of "
    "`python tools/code_metrics.py --checkout DIR --out FILE` (the before side is "
    "`tools/code_metrics_before.json`). Code lines leave out blank lines, comments and docstrings; "
    "a traced file is one whose functions or methods run; mypy runs with no config file, so a "
    "ratchet's per-module settings do not change the count; its file count includes `demo_data`, "
    "a folder mypy takes for a namespace package."
)
BEGIN_MARK = "<!-- begin: code-metrics -->"
END_MARK = "<!-- end: code-metrics -->"
# "Found 478 errors in 89 files (checked 122 source files)" / "Success: no issues found in 122 source files"
_MYPY_FOUND = re.compile(r"Found (\d+) errors? in (\d+) files? \(checked (\d+) source files?\)")
_MYPY_SUCCESS = re.compile(r"Success: no issues found in (\d+) source files?")
# "52 pairs of places (130 files read), ..." / "no duplicates (130 files read)"
_DUPLICATES_PAIRS = re.compile(r"^(\d+) pairs? of places \((\d+) files? read\)")
_DUPLICATES_NONE = re.compile(r"^no duplicates \((\d+) files? read\)")
_DUPLICATES_SHAPE = re.compile(r"(\d+) by shape alone")


# --- files and layers --------------------------------------------------------------------------


def package_files(package_dir: Path) -> List[Path]:
    """The package's ``.py`` files, sorted (``__pycache__`` and hidden folders left out)."""
    return sorted(
        path for path in package_dir.rglob("*.py")
        if not any(part.startswith((".", "__pycache__")) for part in path.relative_to(package_dir).parts)
    )


def layer_of(relative: str) -> str:
    """The folder (a layer) a module's path relative to the package lies in, e.g.
    ``storage/backends/pg_routes.py`` -> ``storage/backends``, ``schema.py`` -> ``(root)``."""
    folder = relative.rpartition("/")[0]
    return folder or ROOT_LAYER


def root_modules(relatives: Iterable[str]) -> List[str]:
    """The modules directly in the package folder, ``__init__.py`` left out."""
    return sorted(r for r in relatives if "/" not in r and r != "__init__.py")


# --- AST counts ----------------------------------------------------------------------------------


def _is_any(annotation: Optional[ast.expr]) -> bool:
    """``Any``, ``typing.Any`` or the string ``"Any"``: an annotation that says nothing."""
    if isinstance(annotation, ast.Name):
        return annotation.id == "Any"
    if isinstance(annotation, ast.Attribute):
        return annotation.attr == "Any" and isinstance(annotation.value, ast.Name) and annotation.value.id in ("typing", "t")
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.strip() in ("Any", "typing.Any")
    return False


def count_any_annotations(source: str) -> Dict[str, int]:
    """Annotations that are exactly ``Any`` in one module, by kind.

    Returns:
        ``parameters`` (of which ``variadic``: ``*args``/``**kwargs``), ``returns``,
        ``assignments`` and their ``total``.
    """
    counts = {"parameters": 0, "variadic": 0, "returns": 0, "assignments": 0}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            named = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            variadic = [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
            counts["parameters"] += sum(_is_any(a.annotation) for a in named + variadic)
            counts["variadic"] += sum(_is_any(a.annotation) for a in variadic)
            counts["returns"] += _is_any(node.returns)
        elif isinstance(node, ast.AnnAssign):
            counts["assignments"] += _is_any(node.annotation)
    counts["total"] = counts["parameters"] + counts["returns"] + counts["assignments"]
    return counts


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports_in_functions(node: ast.AST, in_function: bool = False) -> Iterator[ast.stmt]:
    """The Import/ImportFrom nodes at or below ``node`` that a function encloses; the body of
    ``if TYPE_CHECKING:`` is skipped (it never runs), its ``else:`` is not."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        if in_function:
            yield node
        return
    inside = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    children = node.orelse if isinstance(node, ast.If) and _is_type_checking(node.test) else ast.iter_child_nodes(node)
    for child in children:
        yield from _imports_in_functions(child, inside)


def _imports_own_package(node: ast.stmt, package: str) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == package
    assert isinstance(node, ast.Import)
    return any(alias.name.split(".")[0] == package for alias in node.names)


def count_imports_in_functions(source: str, package: str = PACKAGE) -> Dict[str, int]:
    """Import statements inside functions in one module (``if TYPE_CHECKING:`` blocks left out).

    Returns:
        ``total`` and ``own``: those that import the package's own modules.
    """
    imports = list(_imports_in_functions(ast.parse(source)))
    return {"total": len(imports), "own": sum(_imports_own_package(node, package) for node in imports)}


def code_line_numbers(source: str) -> Set[int]:
    """The numbers of the lines that hold code: not blank, not only a comment, not a docstring."""
    lines: Set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENCODING, tokenize.ENDMARKER}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skip:
            lines.update(range(token.start[0], token.end[0] + 1))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.difference_update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def class_lengths(source: str, module: str) -> List[Dict[str, object]]:
    """Every class of one module (nested ones too, as ``Outer.Inner``) with its lines (from its
    first decorator to its last line) and code lines."""
    code = code_line_numbers(source)
    found: List[Dict[str, object]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                end = child.end_lineno or child.lineno
                name = f"{prefix}{child.name}"
                found.append({"name": name, "module": module, "lines": end - start + 1,
                              "code_lines": len(code.intersection(range(start, end + 1)))})
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def module_length(source: str) -> Dict[str, int]:
    """A module's lines and code lines."""
    return {"lines": len(source.splitlines()), "code_lines": len(code_line_numbers(source))}


def _by_length(rows: Iterable[Dict[str, object]]) -> List[Dict[str, object]]:
    return sorted(rows, key=lambda r: (-int(str(r["lines"])), str(r.get("module", "")), str(r.get("name", ""))))


def static_metrics(sources: Mapping[str, str], package: str = PACKAGE) -> Dict[str, object]:
    """Every count that reads the sources only, from ``{path relative to the package: source}``."""
    any_by_layer: Dict[str, int] = {}
    any_kinds = {"parameters": 0, "variadic": 0, "returns": 0, "assignments": 0, "total": 0}
    imports_by_layer: Dict[str, int] = {}
    imports = {"total": 0, "own": 0}
    classes: List[Dict[str, object]] = []
    modules: List[Dict[str, object]] = []
    for relative, source in sorted(sources.items()):
        layer = layer_of(relative)
        found = count_any_annotations(source)
        for kind in any_kinds:
            any_kinds[kind] += found[kind]
        any_by_layer[layer] = any_by_layer.get(layer, 0) + found["total"]
        inside = count_imports_in_functions(source, package)
        imports["total"] += inside["total"]
        imports["own"] += inside["own"]
        imports_by_layer[layer] = imports_by_layer.get(layer, 0) + inside["total"]
        classes += class_lengths(source, relative)
        modules.append({"module": relative, **module_length(source)})
    ranked_classes = _by_length(classes)
    roots = root_modules(sources)
    return {
        "modules": len(sources),
        "layers": sorted(any_by_layer),
        "root_modules": {"count": len(roots), "names": roots},
        "any_annotations": {**any_kinds, "by_layer": dict(sorted(any_by_layer.items()))},
        "imports_in_functions": {**imports, "by_layer": dict(sorted(imports_by_layer.items()))},
        "classes_over_300_lines": sum(int(str(c["lines"])) > LONG_CLASS_LINES for c in classes),
        "longest_classes": ranked_classes[:TOP],
        "longest_modules": _by_length(modules)[:TOP],
    }


# --- tools run on the checkout -------------------------------------------------------------------


def parse_mypy_summary(output: str) -> Dict[str, Optional[int]]:
    """Errors, files with errors and files checked from mypy's last summary line."""
    found = _MYPY_FOUND.findall(output)
    if found:
        errors, files, checked = found[-1]
        return {"errors": int(errors), "files_with_errors": int(files), "files_checked": int(checked)}
    success = _MYPY_SUCCESS.findall(output)
    if success:
        return {"errors": 0, "files_with_errors": 0, "files_checked": int(success[-1])}
    return {"errors": None, "files_with_errors": None, "files_checked": None}


def parse_duplicates_summary(output: str) -> Dict[str, Optional[int]]:
    """Pairs, files read and pairs alike by shape only, from the first line ``duplicates`` prints."""
    first = output.strip().splitlines()[0] if output.strip() else ""
    pairs = _DUPLICATES_PAIRS.match(first)
    if pairs:
        shape = _DUPLICATES_SHAPE.search(first)
        return {"pairs": int(pairs.group(1)), "files_read": int(pairs.group(2)),
                "by_shape": int(shape.group(1)) if shape else 0}
    none = _DUPLICATES_NONE.match(first)
    if none:
        return {"pairs": 0, "files_read": int(none.group(1)), "by_shape": 0}
    return {"pairs": None, "files_read": None, "by_shape": None}


def run_mypy(checkout: Path, python: str, timeout: float) -> Dict[str, object]:
    """``mypy --strict -p llama_index_hiqa`` on the checkout, ignoring its config files."""
    command = [python, "-m", "mypy", "--strict", "-p", PACKAGE]
    with tempfile.TemporaryDirectory(prefix="code-metrics-mypy-") as tmp:
        config = Path(tmp) / "mypy.ini"
        config.write_text("[mypy]\n", encoding="utf-8")
        env = {**os.environ, "MYPYPATH": str(checkout)}
        try:
            done = subprocess.run(
                [*command, "--config-file", str(config), "--cache-dir", str(Path(tmp) / "cache")],
                cwd=checkout, env=env, capture_output=True, text=True, timeout=timeout,
            )
            output = done.stdout + done.stderr
        except subprocess.TimeoutExpired:
            output = ""
    return {"command": " ".join(command[1:]) + " (no config file)", **parse_mypy_summary(output)}


def run_duplicates(checkout: Path, timeout: float) -> Dict[str, object]:
    """The ``duplicates`` command over the package folder (it asks git which files there are, so
    any checkout or worktree works); null figures when it is not on PATH or says nothing."""
    command = ["duplicates", "--repo", str(checkout / PACKAGE), "--most", "1", "--seconds", str(int(timeout))]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout + 30)
        output = done.stdout
    except (OSError, subprocess.TimeoutExpired):
        output = ""
    incomplete = [line for line in output.splitlines() if line.startswith("incomplete:")]
    return {"command": f"duplicates --repo {PACKAGE}", **parse_duplicates_summary(output), "incomplete": incomplete}


# The subprocess that traces one document pass and one question: argv = checkout, question.
_TRACE_SCRIPT = r"""
import inspect, json, os, sys, threading
checkout, question = sys.argv[1], sys.argv[2]
package_dir = os.path.join(os.path.realpath(checkout), "llama_index_hiqa") + os.sep
from llama_index.core import Settings
Settings.llm = None  # no LLM: the pack's no-LLM paths
import llama_index_hiqa
if not os.path.realpath(llama_index_hiqa.__file__).startswith(package_dir):
    sys.exit("imported " + llama_index_hiqa.__file__ + ", not the checkout's package")
from llama_index_hiqa import HiQAPack, demo_data_dir
files = set()
def tracer(frame, event, arg):
    code = frame.f_code
    if code.co_flags & inspect.CO_OPTIMIZED and code.co_filename.startswith(package_dir):
        files.add(os.path.relpath(code.co_filename, package_dir).replace(os.sep, "/"))
    return None  # no line events: the calls are all that is counted
def traced(call):
    files.clear()
    threading.settrace(tracer); sys.settrace(tracer)
    try:
        result = call()
    finally:
        sys.settrace(None); threading.settrace(None)
    return result, sorted(files)
pack, document_files = traced(lambda: HiQAPack.from_directory(demo_data_dir()))
answer, question_files = traced(lambda: pack.run(question))
print(json.dumps({"from_directory": document_files, "run": question_files,
                  "answer_sources": len(getattr(answer, "source_nodes", []) or [])}))
"""


def trace_passes(checkout: Path, python: str, timeout: float, question: str = DEMO_QUESTION) -> Dict[str, object]:
    """The package files one document pass (``HiQAPack.from_directory`` on the demo datasheets)
    and one question (``HiQAPack.run``, no LLM) run functions of, traced in a subprocess that
    imports the checkout's package."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    with tempfile.TemporaryDirectory(prefix="code-metrics-trace-") as tmp:
        done = subprocess.run([python, "-c", _TRACE_SCRIPT, str(checkout), question], cwd=tmp, env=env,
                              capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"tracing failed in {checkout}:\n{done.stderr[-3000:]}")
    traced = json.loads(done.stdout.strip().splitlines()[-1])
    both = sorted(set(traced["from_directory"]) | set(traced["run"]))
    return {
        "question": question,
        "from_directory": {"count": len(traced["from_directory"]), "files": traced["from_directory"]},
        "run": {"count": len(traced["run"]), "files": traced["run"]},
        "either": len(both),
    }


def git_commit(checkout: Path) -> Optional[str]:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True)
    except OSError:
        return None
    return done.stdout.strip() or None


def measure(checkout: Path, python: str = sys.executable, trace: bool = True, mypy: bool = True,
            duplicates: bool = True, timeout: float = 900) -> Dict[str, object]:
    """Every figure of one checkout."""
    checkout = checkout.resolve()
    package_dir = checkout / PACKAGE
    if not (package_dir / "__init__.py").is_file():
        raise SystemExit(f"--checkout {checkout}: no {PACKAGE}/__init__.py there")
    sources = {p.relative_to(package_dir).as_posix(): p.read_text(encoding="utf-8") for p in package_files(package_dir)}
    metrics: Dict[str, object] = {"checkout": str(checkout), "commit": git_commit(checkout), **static_metrics(sources)}
    metrics["traced_files"] = trace_passes(checkout, python, timeout) if trace else None
    metrics["mypy"] = run_mypy(checkout, python, timeout) if mypy else None
    metrics["duplicates"] = run_duplicates(checkout, min(timeout, 600)) if duplicates else None
    return metrics


# --- the CHANGELOG table -------------------------------------------------------------------------


def _get(metrics: Mapping[str, object], *path: str) -> object:
    value: object = metrics
    for key in path:
        if not isinstance(value, Mapping) or value.get(key) is None:
            return None
        value = value[key]
    return value


def _figure(value: object) -> str:
    if value is None:
        return "not measured"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _top(rows: object, count: int, key: str) -> str:
    if not isinstance(rows, list):
        return "not measured"
    named = [f"`{row[key]}` {row['lines']} / {row['code_lines']}" for row in rows[:count]]
    return ", ".join(named)


def _mypy(metrics: Mapping[str, object]) -> str:
    errors = _get(metrics, "mypy", "errors")
    if errors is None:
        return "not measured"
    return f"{errors:,} in {_get(metrics, 'mypy', 'files_with_errors')} of {_get(metrics, 'mypy', 'files_checked')} files"


def table_rows(before: Mapping[str, object], after: Mapping[str, object]) -> List[Tuple[str, str, str]]:
    """The rows of the before/after table: (what is measured, before, after)."""

    def both(render: Callable[[Mapping[str, object]], str]) -> Tuple[str, str]:
        return render(before), render(after)

    def count(*path: str) -> Callable[[Mapping[str, object]], str]:
        return lambda m: _figure(_get(m, *path))

    def imports(m: Mapping[str, object]) -> str:
        total, own = _get(m, "imports_in_functions", "total"), _get(m, "imports_in_functions", "own")
        return "not measured" if total is None else f"{total:,} ({own:,} of the package's own modules)"

    def any_annotations(m: Mapping[str, object]) -> str:
        total, variadic = _get(m, "any_annotations", "total"), _get(m, "any_annotations", "variadic")
        return "not measured" if total is None else f"{total:,} ({variadic:,} of them `*args`/`**kwargs`)"

    return [
        ("modules in the package", *both(count("modules"))),
        ("modules at the package root", *both(count("root_modules", "count"))),
        ("package files `HiQAPack.from_directory` runs (demo datasheets)", *both(count("traced_files", "from_directory", "count"))),
        ("package files `HiQAPack.run` runs (one question, no LLM)", *both(count("traced_files", "run", "count"))),
        ("`: Any` annotations (parameters, returns, assignments)", *both(any_annotations)),
        ("`mypy --strict` errors", *both(_mypy)),
        ("imports inside functions", *both(imports)),
        ("`duplicates` pairs over the package", *both(count("duplicates", "pairs"))),
        (f"classes over {LONG_CLASS_LINES} lines", *both(count("classes_over_300_lines"))),
        (f"the {TABLE_TOP} longest classes (lines / code lines)",
         *both(lambda m: _top(m.get("longest_classes"), TABLE_TOP, "name"))),
        (f"the {TABLE_TOP} longest modules (lines / code lines)",
         *both(lambda m: _top(m.get("longest_modules"), TABLE_TOP, "module"))),
    ]


def render_table(before: Mapping[str, object], after: Mapping[str, object]) -> str:
    """The markdown table, with the commits measured and the command that wrote it."""
    lines = [
        f"| measured | before (`{before.get('commit') or '?'}`) | after (`{after.get('commit') or '?'}`) |",
        "| --- | --- | --- |",
        *(f"| {what} | {was} | {now} |" for what, was, now in table_rows(before, after)),
        "",
        textwrap.fill(TABLE_NOTE, width=LINE_WIDTH),
    ]
    return "\n".join(lines)


def place_in_changelog(changelog: str, table: str) -> str:
    """The CHANGELOG text with ``table`` between the markers, inside the layers subsection of
    ``## [Unreleased]`` (the subsection created, with one sentence, when missing)."""
    block = f"{BEGIN_MARK}\n{table}\n{END_MARK}"
    marked = re.compile(re.escape(BEGIN_MARK) + r".*?" + re.escape(END_MARK), re.S)
    if marked.search(changelog):
        return marked.sub(lambda _: block, changelog, count=1)
    unreleased = re.search(r"^## \[Unreleased\][^\n]*\n", changelog, re.M)
    if unreleased is None:
        raise ValueError("CHANGELOG.md has no '## [Unreleased]' heading")
    section = re.search(rf"^{re.escape(SECTION_TITLE)}[^\n]*\n", changelog[unreleased.end():], re.M)
    if section is None:
        insert_at = unreleased.end()
        text = f"\n{SECTION_TITLE}\n{textwrap.fill(SECTION_SENTENCE, width=LINE_WIDTH)}\n\n{block}\n"
        return changelog[:insert_at] + text + changelog[insert_at:]
    start = unreleased.end() + section.end()
    following = re.search(r"^##", changelog[start:], re.M)  # the next subsection or release
    end = start + following.start() if following else len(changelog)
    body = changelog[start:end].rstrip("\n")
    return changelog[:start] + f"{body}\n\n{block}\n\n" + changelog[end:]


# --- command line --------------------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the checkout to measure (default: this one)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here (default: print them)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs mypy and the trace")
    parser.add_argument("--no-trace", action="store_true", help="skip the traced document pass and question")
    parser.add_argument("--no-mypy", action="store_true", help="skip the type checker")
    parser.add_argument("--no-duplicates", action="store_true", help="skip the duplicates command")
    parser.add_argument("--timeout", type=float, default=900, help="seconds each tool may take")
    parser.add_argument("--changelog", nargs=2, type=Path, metavar=("BEFORE", "AFTER"),
                        help="render the table of two JSON files into CHANGELOG.md instead of measuring")
    parser.add_argument("--changelog-file", type=Path, default=CHANGELOG, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.changelog:
        before, after = (json.loads(path.read_text(encoding="utf-8")) for path in args.changelog)
        text = args.changelog_file.read_text(encoding="utf-8")
        args.changelog_file.write_text(place_in_changelog(text, render_table(before, after)), encoding="utf-8")
        print(f"wrote the table into {args.changelog_file}")
        return 0
    metrics = measure(args.checkout, python=args.python, trace=not args.no_trace, mypy=not args.no_mypy,
                      duplicates=not args.no_duplicates, timeout=args.timeout)
    rendered = json.dumps(metrics, indent=2) + "\n"
    if args.out:
        args.out.write_text(rendered, encoding="utf-8")
        print(f"wrote {args.out}")
    else:
        print(rendered, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
