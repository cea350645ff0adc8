"""``make bench``: run every ``benchmarks/bench_*.py`` in turn; each rewrites its own section
of ``benchmarks/RESULTS.md`` (and its figures). A failing benchmark is reported and the
others still run; the exit status is non-zero when any failed.

    .venv/bin/python benchmarks/run_all.py [--only ablation ...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description="run every benchmark")
    parser.add_argument("--only", nargs="+", help="topics, e.g. ablation (bench_ablation.py)")
    args = parser.parse_args()
    scripts = sorted(HERE.glob("bench_*.py"))
    if args.only:
        scripts = [s for s in scripts if s.stem[len("bench_"):] in args.only]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    failed = []
    for script in scripts:
        print(f"== {script.name}", flush=True)
        started = time.perf_counter()
        code = subprocess.call([sys.executable, str(script)], cwd=HERE.parent, env=env)
        print(f"== {script.name}: exit {code} in {time.perf_counter() - started:.0f} s", flush=True)
        if code:
            failed.append(script.name)
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
