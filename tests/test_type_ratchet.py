"""The type checker in the suite: mypy ``--strict`` over the package (``[tool.mypy]`` of
pyproject.toml), held by ``tools/type_ratchet.py``: the clean set has no error, every other
file no more than ``tools/type_baseline.json`` allows. A cold run (a fresh clone) takes about a
minute of CPU; mypy's cache (``.mypy_cache``) makes the next one take seconds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("type_ratchet", ROOT / "tools" / "type_ratchet.py")
assert _spec is not None and _spec.loader is not None
ratchet = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ratchet)

REPORT = """\
llama_index_hiqa/readers/pdf.py:12: error: Missing type arguments for generic type "dict"  [type-arg]
llama_index_hiqa/readers/pdf.py:40: note: See https://mypy.readthedocs.io
llama_index_hiqa/readers/pdf.py:41:5: error: Returning Any from function declared to return "str"  [no-any-return]
llama_index_hiqa/schema.py:9: error: Function is missing a return type annotation  [no-untyped-def]
"""


def test_error_lines_are_grouped_by_file_without_notes():
    found = ratchet.error_lines(REPORT)
    assert {name: len(lines) for name, lines in found.items()} == {
        "llama_index_hiqa/readers/pdf.py": 2, "llama_index_hiqa/schema.py": 1,
    }
    assert found["llama_index_hiqa/schema.py"][0].endswith("[no-untyped-def]")


def test_a_file_over_its_baseline_fails_and_one_under_it_does_not():
    baseline = {"llama_index_hiqa/readers/pdf.py": 2, "llama_index_hiqa/parsers/x.py": 5}
    counts = {"llama_index_hiqa/readers/pdf.py": 3, "llama_index_hiqa/parsers/x.py": 4}
    assert ratchet.regressions(baseline, counts) == {"llama_index_hiqa/readers/pdf.py": "3 errors (baseline 2)"}
    assert ratchet.improvements(baseline, counts) == {"llama_index_hiqa/parsers/x.py": "5 -> 4"}


def test_a_file_the_baseline_does_not_name_may_have_no_error():
    assert ratchet.regressions({}, {"llama_index_hiqa/new.py": 1}) == {"llama_index_hiqa/new.py": "1 error (baseline 0)"}
    # A file with no error left drops out of the count and is an improvement.
    assert ratchet.improvements({"llama_index_hiqa/old.py": 2}, {}) == {"llama_index_hiqa/old.py": "2 -> 0"}


def test_the_clean_set_allows_no_error_whatever_the_baseline_says():
    clean = ratchet.CLEAN[0]
    assert ratchet.regressions({clean: 9}, {clean: 1}) == {clean: "1 error (in the clean set)"}


def test_update_writes_only_files_with_errors_and_reads_back(tmp_path):
    path = tmp_path / "baseline.json"
    ratchet.write_baseline({"b.py": 2, "a.py": 1, "c.py": 0}, path)
    assert ratchet.read_baseline(path) == {"a.py": 1, "b.py": 2}
    assert list(ratchet.read_baseline(path)) == ["a.py", "b.py"]  # sorted: a one-line diff per file
    assert ratchet.read_baseline(tmp_path / "missing.json") == {}


def test_the_clean_set_and_the_baseline_name_files_that_exist():
    missing = [name for name in (*ratchet.CLEAN, *ratchet.read_baseline()) if not (ROOT / name).exists()]
    assert not missing, f"regenerate with `python tools/type_ratchet.py --update`: {missing}"


def test_no_file_has_more_type_errors_than_the_ratchet_allows():
    found = ratchet.error_lines(ratchet.run_mypy())
    counts = {name: len(lines) for name, lines in found.items()}
    failing = ratchet.regressions(ratchet.read_baseline(), counts)
    assert not failing, "mypy --strict errors over the ratchet (tools/type_ratchet.py):\n" + "\n".join(
        f"{name}: {why}\n" + "\n".join(found[name]) for name, why in failing.items()
    )
