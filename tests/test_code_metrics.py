"""tools/code_metrics.py: the counts behind CHANGELOG's before/after table, on small sources."""

from __future__ import annotations

import json
import textwrap

import pytest

from tools import code_metrics as cm


def _src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def test_any_annotations_are_counted_by_kind_and_only_when_exactly_any():
    source = _src('''
        import typing
        from typing import Any, Dict, Optional

        def f(a: Any, b: int, *args: Any, c: "Any" = 1, **kwargs: Any) -> Any:
            x: Any = a
            y: Dict[str, Any] = {}
            z: Optional[Any] = None
            return x

        class C:
            field: typing.Any
            other: int

            async def g(self, d: Any) -> Dict[str, Any]:
                return {}
    ''')
    counts = cm.count_any_annotations(source)
    # a, *args, c ("Any"), **kwargs, d; f's return; x, field. Dict[str, Any] and Optional[Any] say something.
    assert counts == {"parameters": 5, "variadic": 2, "returns": 1, "assignments": 2, "total": 8}


def test_imports_inside_functions_leave_out_module_level_and_type_checking_imports():
    source = _src('''
        import os
        from typing import TYPE_CHECKING
        from llama_index_hiqa import schema

        if TYPE_CHECKING:
            from llama_index_hiqa.errors import HiQAError

        def f():
            import json
            from llama_index_hiqa.models import defaults
            from . import sibling
            if TYPE_CHECKING:
                from llama_index_hiqa.pack import HiQAPack
            else:
                import llama_index_hiqa.demo

            def inner():
                import numpy as np

        class C:
            import re  # a class body is not a function

            async def m(self):
                from llama_index_hiqa_other import x
    ''')
    assert cm.count_imports_in_functions(source) == {"total": 6, "own": 3}


def test_code_lines_leave_out_blanks_comments_and_docstrings_but_keep_other_strings():
    source = _src('''
        """Module docstring
        over two lines."""
        # a comment

        X = """not a docstring
        two lines"""


        def f():
            """Docstring."""
            return 1  # trailing comment
    ''')
    assert cm.code_line_numbers(source) == {5, 6, 9, 11}
    assert cm.module_length(source) == {"lines": 11, "code_lines": 4}


def test_class_lengths_count_from_the_decorator_and_name_nested_classes():
    source = _src('''
        import dataclasses

        @dataclasses.dataclass
        class Outer:
            """Doc."""

            a: int = 1

            class Inner:
                b = 2

            def f(self):
                return self.a
    ''')
    rows = cm.class_lengths(source, "pkg/m.py")
    assert rows == [
        {"name": "Outer", "module": "pkg/m.py", "lines": 11, "code_lines": 7},
        {"name": "Outer.Inner", "module": "pkg/m.py", "lines": 2, "code_lines": 2},
    ]


def test_static_metrics_group_by_the_folders_found():
    long_class = "class Big:\n" + "    x = 1\n" * 301
    sources = {
        "__init__.py": "",
        "schema.py": "from typing import Any\ndef f(a: Any) -> Any:\n    import json\n",
        "pack/hiqa_pack.py": long_class,
        "storage/backends/pg.py": "def g(b: Any):\n    from llama_index_hiqa import schema\n",
    }
    metrics = cm.static_metrics(sources)
    assert metrics["root_modules"] == {"count": 1, "names": ["schema.py"]}
    assert metrics["layers"] == ["(root)", "pack", "storage/backends"]
    assert metrics["any_annotations"]["by_layer"] == {"(root)": 2, "pack": 0, "storage/backends": 1}
    assert metrics["imports_in_functions"]["total"] == 2 and metrics["imports_in_functions"]["own"] == 1
    assert metrics["classes_over_300_lines"] == 1
    assert metrics["longest_classes"][0] == {"name": "Big", "module": "pack/hiqa_pack.py", "lines": 302, "code_lines": 302}
    assert [m["module"] for m in metrics["longest_modules"]][:1] == ["pack/hiqa_pack.py"]


def test_layer_of_a_module():
    assert cm.layer_of("storage/backends/pg_routes.py") == "storage/backends"
    assert cm.layer_of("schema.py") == cm.ROOT_LAYER


@pytest.mark.parametrize("output, expected", [
    ("llama_index_hiqa/x.py:1: error: ...\nFound 478 errors in 89 files (checked 122 source files)\n",
     {"errors": 478, "files_with_errors": 89, "files_checked": 122}),
    ("Found 1 error in 1 file (checked 3 source files)", {"errors": 1, "files_with_errors": 1, "files_checked": 3}),
    ("Success: no issues found in 122 source files\n", {"errors": 0, "files_with_errors": 0, "files_checked": 122}),
    ("mypy: can't read file\n", {"errors": None, "files_with_errors": None, "files_checked": None}),
])
def test_mypy_summary_line(output, expected):
    assert cm.parse_mypy_summary(output) == expected


def test_duplicates_summary_line():
    first = ("52 pairs of places (130 files read), each sharing runs of 6 or more identical or same-shape "
             "lines (39 by shape alone, 21 of those marked boilerplate)\nD1 a.py:1-7 ~ b.py:3-9\n")
    assert cm.parse_duplicates_summary(first) == {"pairs": 52, "files_read": 130, "by_shape": 39}
    assert cm.parse_duplicates_summary("no duplicates (12 files read)\n")["pairs"] == 0
    assert cm.parse_duplicates_summary("incomplete: git did not answer\n")["pairs"] is None


def _metrics(commit: str, root: int, errors):
    return {
        "commit": commit,
        "root_modules": {"count": root, "names": []},
        "any_annotations": {"total": 10, "variadic": 2},
        "imports_in_functions": {"total": 7, "own": 3},
        "mypy": None if errors is None else {"errors": errors, "files_with_errors": 2, "files_checked": 5},
        "duplicates": {"pairs": 4},
        "traced_files": None,
        "classes_over_300_lines": 1,
        "longest_classes": [{"name": "Big", "module": "m.py", "lines": 302, "code_lines": 200}],
        "longest_modules": [{"module": "m.py", "lines": 400, "code_lines": 250}],
    }


def test_the_table_goes_between_markers_in_a_new_subsection_and_is_replaced_on_a_rerun():
    changelog = "# Changelog\n\n## [Unreleased]\n\n### Other work\n- a line\n\n## [0.0.1]\n- old\n"
    table = cm.render_table(_metrics("aaa1111", 30, 492), _metrics("bbb2222", 12, None))
    assert "| modules at the package root | 30 | 12 |" in table
    assert "| `mypy --strict` errors | 492 in 2 of 5 files | not measured |" in table
    assert "| package files `HiQAPack.run` runs (one question, no LLM) | not measured | not measured |" in table
    first = cm.place_in_changelog(changelog, table)
    section = first.index(cm.SECTION_TITLE)
    assert first.index("## [Unreleased]") < section < first.index(cm.BEGIN_MARK) < first.index("### Other work")
    again = cm.place_in_changelog(first, table.replace("| 12 |", "| 11 |"))
    assert again.count(cm.BEGIN_MARK) == 1 and "| 30 | 11 |" in again and "| 30 | 12 |" not in again
    assert again.count(cm.SECTION_TITLE) == 1 and again.endswith("## [0.0.1]\n- old\n")


def test_the_table_is_appended_to_an_existing_subsection_keeping_its_text():
    changelog = ("## [Unreleased]\n\n### Other\n- x\n\n### Folders that are the layers\nThe lead's text.\n\n"
                 "### Later\n- y\n")
    placed = cm.place_in_changelog(changelog, "TABLE")
    assert "### Folders that are the layers\nThe lead's text.\n\n" + cm.BEGIN_MARK + "\nTABLE\n" + cm.END_MARK in placed
    assert placed.index(cm.END_MARK) < placed.index("### Later")


def test_main_writes_the_changelog_table_from_two_json_files(tmp_path):
    before, after, changelog = tmp_path / "before.json", tmp_path / "after.json", tmp_path / "CHANGELOG.md"
    before.write_text(json.dumps(_metrics("aaa1111", 30, 492)))
    after.write_text(json.dumps(_metrics("bbb2222", 12, 400)))
    changelog.write_text("# Changelog\n\n## [Unreleased]\n")
    assert cm.main(["--changelog", str(before), str(after), "--changelog-file", str(changelog)]) == 0
    assert "| `mypy --strict` errors | 492 in 2 of 5 files | 400 in 2 of 5 files |" in changelog.read_text()
