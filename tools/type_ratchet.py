"""The type checker's ratchet: mypy ``--strict`` errors per file may only go down.

mypy runs with the configuration of ``pyproject.toml`` (``[tool.mypy]``: the package under
``--strict``). Two rules:

* the clean set (``CLEAN``: the public API as a user's type checker reads it, the foundation
  modules and the layer seams, the Protocols) has no error at all;
* every other file has at most the errors ``tools/type_baseline.json`` allows it (a file the
  baseline does not name is allowed none).

Usage (from the repository root)::

    python tools/type_ratchet.py            # check; exit status 1 names each file that went up
    python tools/type_ratchet.py --update   # write today's counts to the baseline

``--update`` after fixing errors lowers the baseline (commit it with the fix); after merging
branches it regenerates the baseline in one command. It never accepts an error in the clean set.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Mapping

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "tools" / "type_baseline.json"

CLEAN = (
    "llama_index_hiqa/__init__.py",
    "llama_index_hiqa/schema.py",
    "llama_index_hiqa/page_geometry.py",
    "llama_index_hiqa/errors.py",
    "llama_index_hiqa/events.py",
    "llama_index_hiqa/settings.py",
    "llama_index_hiqa/storage/backends/base.py",
    "llama_index_hiqa/retrievers/routes.py",
)

_ERROR_LINE = re.compile(r"^(?P<file>[^:\s]+\.pyi?):\d+(?::\d+)?: error: ")


def run_mypy() -> str:
    """mypy's report on the package (configured by ``pyproject.toml``), one message a line.

    Raises:
        RuntimeError: When mypy could not check the package (not installed, a crash or a bad
            configuration), with what it printed.
    """
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--no-pretty"],
        cwd=ROOT, capture_output=True, text=True,
    )
    # Exit status 1 is "errors found"; with no error line it is Python failing to start mypy.
    found_errors = checked.returncode == 1 and any(map(_ERROR_LINE.match, checked.stdout.splitlines()))
    if checked.returncode != 0 and not found_errors:
        raise RuntimeError(f"mypy failed (exit status {checked.returncode}):\n{checked.stdout}{checked.stderr}")
    return checked.stdout


def error_lines(report: str) -> Dict[str, List[str]]:
    """``{file relative to the repository: [its error lines]}`` of a mypy report."""
    found: Dict[str, List[str]] = {}
    for line in report.splitlines():
        match = _ERROR_LINE.match(line)
        if match is None:
            continue
        found.setdefault(Path(match["file"]).as_posix(), []).append(line)
    return found


def regressions(baseline: Mapping[str, int], counts: Mapping[str, int]) -> Dict[str, str]:
    """``{file: why it fails}`` for each file over its allowance (the clean set's is zero)."""
    failing: Dict[str, str] = {}
    for name, count in sorted(counts.items()):
        allowed = 0 if name in CLEAN else baseline.get(name, 0)
        if count > allowed:
            rule = "in the clean set" if name in CLEAN else f"baseline {allowed}"
            failing[name] = f"{count} error{'' if count == 1 else 's'} ({rule})"
    return failing


def improvements(baseline: Mapping[str, int], counts: Mapping[str, int]) -> Dict[str, str]:
    """``{file: its drop}`` for each file with fewer errors than the baseline allows."""
    return {
        name: f"{allowed} -> {counts.get(name, 0)}"
        for name, allowed in sorted(baseline.items())
        if counts.get(name, 0) < allowed
    }


def read_baseline(path: Path = BASELINE) -> Dict[str, int]:
    """The committed counts (an empty baseline when the file does not exist)."""
    if not path.exists():
        return {}
    return {str(name): int(count) for name, count in json.loads(path.read_text(encoding="utf-8")).items()}


def write_baseline(counts: Mapping[str, int], path: Path = BASELINE) -> None:
    """Write ``counts`` (files with errors only, sorted) as the new baseline."""
    kept = {name: count for name, count in sorted(counts.items()) if count}
    path.write_text(json.dumps(kept, indent=1) + "\n", encoding="utf-8")


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="write today's counts to the baseline")
    args = parser.parse_args(argv)

    found = error_lines(run_mypy())
    counts = {name: len(lines) for name, lines in found.items()}
    baseline = read_baseline()
    total = sum(counts.values())
    print(f"mypy --strict: {total} errors in {len(counts)} files (baseline {sum(baseline.values())})")

    unclean = {name: why for name, why in regressions({}, counts).items() if name in CLEAN}
    failing = unclean if args.update else regressions(baseline, counts)
    for name, why in failing.items():
        print(f"\n{name}: {why}")
        print("\n".join(found[name]))
    if failing:
        print("\nFix these errors (the clean set must stay at zero)." if args.update else
              "\nFix the new errors; a deliberate increase needs `python tools/type_ratchet.py --update`.")
        return 1
    if args.update:
        write_baseline(counts)
        print(f"wrote {BASELINE.relative_to(ROOT)}")
        return 0
    lower = improvements(baseline, counts)
    if lower:
        print("fewer errors than the baseline: lower it with `python tools/type_ratchet.py --update`")
        for name, drop in lower.items():
            print(f"  {name}: {drop}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
