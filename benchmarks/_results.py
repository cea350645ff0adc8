"""Write one benchmark's section of ``benchmarks/RESULTS.md`` (and nothing else of it).

Each benchmark script calls :func:`write_section` with its figures as Markdown; the section is
framed by ``<!-- begin: NAME -->`` / ``<!-- end: NAME -->`` markers so scripts run in any order
rewrite only their own part. Every section states the command, the date and the machine.
Notes written by hand below a ``<!-- notes -->`` line inside a section are kept when the script
re-writes its figures (a re-run would otherwise erase the reading of the table).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import sys
from pathlib import Path
from typing import Optional

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
NOTES_MARK = "<!-- notes -->"
HEADER = "# Benchmark results\n\nEach section is written by the script it names; re-run that command to refresh it.\n"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover
        torch_version = "n/a"
    return (
        f"{os.cpu_count()} cores ({cpu}), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, torch {torch_version}"
    )


def write_section(name: str, title: str, body: str, command: Optional[str] = None) -> Path:
    """Replace (or append) section ``name`` of RESULTS.md with ``body``."""
    command = command or "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else HEADER
    pattern = re.compile(
        rf"<!-- begin: {re.escape(name)} -->.*?<!-- end: {re.escape(name)} -->", re.S
    )
    existing = pattern.search(text)
    notes = ""
    if existing and NOTES_MARK in existing.group(0):
        notes = existing.group(0).split(NOTES_MARK, 1)[1].rsplit("<!-- end:", 1)[0].strip()
    section = (
        f"<!-- begin: {name} -->\n## {title}\n\n"
        f"Command: `{command}` — run {stamp} on {machine()}.\n\n"
        f"{body.strip()}\n"
        + (f"\n{NOTES_MARK}\n{notes}\n" if notes else "")
        + f"<!-- end: {name} -->"
    )
    if existing:
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    RESULTS.write_text(text, encoding="utf-8")
    return RESULTS


def markdown_table(headers, rows) -> str:
    """A Markdown table; floats printed with 3 decimals."""

    def cell(value) -> str:
        return f"{value:.3f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
