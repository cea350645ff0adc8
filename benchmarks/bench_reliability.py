"""Reliability: the fault-injection suite's outcomes by cause, ingestion time against the size
of one document, and concurrent writers on one folder store (section "Reliability" of
RESULTS.md).

(a) The cases of ``tests/fault_cases.py`` (damaged store files, unusable paths, concurrent and
    killed writers, removed files, bad settings, odd questions, a damaged cache), each run in a
    fresh folder; ``--before PATH`` also runs them against another checkout of the pack (the
    main branch) for comparison. Cases needing a tmpfs run only as root.
(b) One text document of 1, 2, 4, ... MB ingested by ``hiqa ingest`` (hashing embedding and
    rules-only keywords, so the figures are the pack's own stages, not the model's), each size
    in its own process, with the time per stage; ``--before PATH`` runs the same against the
    other checkout up to ``--before-max-mb``.
(c) ``--writers N`` concurrent ``hiqa ingest --add`` processes (each adding its own folder of
    documents) on one store, ``--runs`` times: documents expected and found.

    python benchmarks/bench_reliability.py --sizes 1 2 4 8 16 --before ../main
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _results import markdown_table, write_section  # noqa: E402

RESULT_FILE = ROOT / "benchmarks" / "reliability.json"


def _run_python(code: str, package_root: Path, timeout: float) -> Dict[str, Any]:
    """Run ``code`` in a new process importing the pack from ``package_root``; its last
    stdout line is JSON."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package_root), str(ROOT)]),
           "HIQA_PACKAGE_ROOT": str(package_root), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout,
                              cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        return {"timeout": True, "seconds": time.monotonic() - started}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1], "seconds": time.monotonic() - started}
    return json.loads(lines[-1])


# --- (a) the fault suite --------------------------------------------------------------------------
SUITE = r'''
import json, sys, tempfile, importlib.util
from pathlib import Path
spec = importlib.util.spec_from_file_location("fault_cases", str(Path(%(root)r) / "tests" / "fault_cases.py"))
fc = importlib.util.module_from_spec(spec); sys.modules["fault_cases"] = fc; spec.loader.exec_module(fc)
base = fc.build_store(Path(tempfile.mkdtemp()) / "store")
# A case that asks for tens of GiB (a setting without an upper bound) gets a MemoryError, counted
# as not handled, instead of the kernel ending the whole suite.
import resource
with open("/proc/self/status") as status:
    used = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (used + (6 << 30), resource.getrlimit(resource.RLIMIT_AS)[1]))
out = []
for item in fc.CASES:
    tmp = Path(tempfile.mkdtemp())
    try:
        handled, note = fc.run_case(item, tmp, base)
    except BaseException as exc:
        handled, note = False, f"{type(exc).__name__}: {exc}"[:200]
    out.append({"cause": item.cause, "name": item.name, "handled": handled, "note": note})
print(json.dumps({"cases": out}))
'''


def run_suite(package_root: Path) -> List[Dict[str, Any]]:
    result = _run_python(SUITE % {"root": str(ROOT)}, package_root, timeout=1800)
    if "cases" not in result:
        raise RuntimeError(f"the fault suite did not run: {result}")
    return result["cases"]


def suite_table(cases: List[Dict[str, Any]], before: Optional[List[Dict[str, Any]]]) -> str:
    rows = []
    by_cause: Dict[str, List[Dict[str, Any]]] = defaultdict(list)
    for c in cases:
        by_cause[c["cause"]].append(c)
    old = {(c["cause"], c["name"]): c["handled"] for c in before or []}
    for cause, items in by_cause.items():
        ran = [c for c in items if c["handled"] is not None]
        row = [cause, len(items), len(ran), sum(1 for c in ran if c["handled"])]
        if before is not None:
            row.append(sum(1 for c in items if old.get((cause, c["name"])) is True))
        rows.append(row)
    ran_all = [c for c in cases if c["handled"] is not None]
    total = ["**all**", len(cases), len(ran_all), sum(1 for c in ran_all if c["handled"])]
    if before is not None:
        total.append(sum(1 for c in before if c["handled"] is True))
    rows.append(total)
    headers = ["cause", "cases", "ran", "handled"] + (["handled before (main)"] if before is not None else [])
    return markdown_table(headers, rows)


# --- (b) ingestion time against document size -----------------------------------------------
SIZE = r'''
import json, sys, time, contextlib, io
from pathlib import Path
from tests.fault_cases import cheap_models  # PYTHONPATH: the pack's checkout first, then this one
from llama_index_hiqa import cli
err = io.StringIO()
start = time.perf_counter()
with cheap_models(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()) as out:
    code = cli.main(["ingest", %(folder)r, "--store", %(store)r])
seconds = time.perf_counter() - start
import resource
print(json.dumps({"code": code, "seconds": seconds, "summary": out.getvalue().strip()[-300:],
                  "progress_lines": err.getvalue().count("running for"),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''


def one_document(folder: Path, megabytes: float) -> None:
    """One .txt document of ``megabytes`` MB: numbered sections of datasheet-like paragraphs."""
    folder.mkdir(parents=True, exist_ok=True)
    target = int(megabytes * 2**20)
    parts, size, i = [], 0, 0
    while size < target:
        if i % 40 == 0:
            block = f"\n\n# Chapter {i // 40}\n\n"
        else:
            block = (f"Part NX-{i} delivers {i % 17} amps at {i % 5} volts in operating mode {i}; "
                     f"the regulator keeps its output within {i % 3 + 1} percent from -40 to 85 C.\n\n")
        parts.append(block)
        size += len(block)
        i += 1
    (folder / "big.txt").write_text("".join(parts), encoding="utf-8")


def run_sizes(sizes: List[float], package_root: Path, timeout: float) -> List[Dict[str, Any]]:
    rows = []
    for mb in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            one_document(Path(tmp) / "docs", mb)
            result = _run_python(
                SIZE % {"root": str(ROOT), "folder": str(Path(tmp) / "docs"), "store": str(Path(tmp) / "store")},
                package_root, timeout,
            )
        result["mb"] = mb
        rows.append(result)
        print(f"  {mb} MB: {result}", flush=True)
        if result.get("timeout"):
            break  # larger sizes take longer still
    return rows


def _stage(summary: str, stage: str) -> str:
    import re

    found = re.search(rf"{stage} (\d+\.\d)s", summary or "")
    return found.group(1) if found else "<0.05"


def size_notes(rows: List[Dict[str, Any]], before: List[Dict[str, Any]]) -> str:
    """One paragraph reading the size table: seconds per MB here, the index stage there."""
    done = [r for r in rows if not r.get("timeout") and r.get("mb")]
    if not done:
        return ""
    per_mb = [r["seconds"] / r["mb"] for r in done]
    text = (f"\nThis branch: {min(per_mb):.1f}-{max(per_mb):.1f} s per MB from {done[0]['mb']:g} to "
            f"{done[-1]['mb']:g} MB (linear; the keyword rules are the largest stage), index stage "
            f"{_stage(done[-1].get('summary', ''), 'index')} s at {done[-1]['mb']:g} MB.")
    old = [r for r in before if not r.get("timeout")]
    if old:
        text += (f" Before (main): the index stage grows about fourfold per doubling (LlamaIndex's per-node "
                 f"docstore writes), {_stage(old[0].get('summary', ''), 'index')} s at {old[0]['mb']:g} MB to "
                 f"{_stage(old[-1].get('summary', ''), 'index')} s at {old[-1]['mb']:g} MB, "
                 f"{old[-1]['seconds']:.0f} s in all.")
    return text + " Each size runs in its own process; the machine is shared, so expect ±20% on a row.\n"


def size_table(rows: List[Dict[str, Any]], before: List[Dict[str, Any]], timeout: float) -> str:
    old = {r["mb"]: r for r in before}
    headers = ["MB", "nodes", "total s", "s per MB", "parse s", "keywords s", "embed s", "index s", "persist s",
               "peak RSS MB", "'running for' lines"] + (["total s before (main)", "index s before (main)"] if before else [])
    out = []
    for r in rows:
        if r.get("timeout"):
            out.append([f"{r['mb']:g}", "-", f"> {timeout:.0f} (stopped)"] + ["-"] * (len(headers) - 3))
            continue
        import re

        nodes = re.search(r"(\d+) nodes \(", r.get("summary", ""))
        row = [f"{r['mb']:g}", nodes.group(1) if nodes else "?", f"{r['seconds']:.1f}", f"{r['seconds'] / r['mb']:.1f}"]
        row += [_stage(r.get("summary", ""), s) for s in ("parse", "keywords", "embed", "index", "persist")]
        row += [f"{r.get('rss_mb', 0):.0f}", r.get("progress_lines", 0)]
        if before:
            b = old.get(r["mb"])
            row.append("-" if b is None else (f"> {timeout:.0f} (stopped)" if b.get("timeout") else f"{b['seconds']:.1f}"))
            row.append("-" if b is None or b.get("timeout") else _stage(b.get("summary", ""), "index"))
        out.append(row)
    return markdown_table(headers, out)


# --- (c) concurrent writers -----------------------------------------------------------------------
def run_writers(writers: int, runs: int, package_root: Path) -> List[Dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package_root), str(ROOT)])}
    cli = [sys.executable, str(ROOT / "tests" / "cheap_cli.py")]
    results = []
    for run in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            tmp_path = Path(tmp)
            base = tmp_path / "base"
            base.mkdir()
            (base / "base.txt").write_text("# Base\n\nThe first document.\n")
            store = tmp_path / "store"
            subprocess.run(cli + ["ingest", str(base), "--store", str(store), "--quiet"], env=env, check=True,
                           capture_output=True)
            expected = {"base"}
            procs = []
            for w in range(writers):
                folder = tmp_path / f"w{w}"
                folder.mkdir()
                for d in range(3):
                    name = f"w{w}d{d}"
                    (folder / f"{name}.txt").write_text(f"# {name}\n\nDocument {d} of writer {w}.\n")
                    expected.add(name)
                procs.append(subprocess.Popen(cli + ["ingest", str(folder), "--store", str(store), "--add", "--quiet"],
                                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            codes = [p.wait(timeout=600) for p in procs]
            pointer = (store / "CURRENT").read_text().strip()
            found = set(json.loads((store / pointer / "hiqa_pack.json").read_text())["documents"])
            results.append({"run": run, "exit_codes": codes, "expected": len(expected), "found": len(found & expected),
                            "lost": sorted(expected - found)})
            print(f"  run {run}: {results[-1]}", flush=True)
    return results


def writers_table(after: List[Dict[str, Any]], before: List[Dict[str, Any]], writers: int) -> str:
    rows = []
    for label, results in (("this branch", after), ("before (main)", before)):
        if not results:
            continue
        rows.append([
            label, writers, len(results), sum(r["expected"] for r in results), sum(r["found"] for r in results),
            sum(1 for r in results if r["found"] < r["expected"]),
            ", ".join(str(Counter(r["exit_codes"]).most_common()) for r in results[:1]),
        ])
    return markdown_table(["pack", "writers", "runs", "documents expected", "documents found", "runs losing a document",
                           "exit codes (first run)"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 2, 4, 8, 16], help="document sizes in MB")
    parser.add_argument("--size-timeout", type=float, default=900, help="seconds before a size is stopped")
    parser.add_argument("--before", type=Path, help="another checkout of the pack (main) to compare with")
    parser.add_argument("--before-max-mb", type=float, default=4, help="largest size run against --before")
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--skip", nargs="*", default=[], choices=["suite", "sizes", "sizes-here", "writers"],
                        help="parts not to run again (sizes-here: keep this checkout's sizes, run only --before's)")
    args = parser.parse_args()
    data: Dict[str, Any] = json.loads(RESULT_FILE.read_text()) if RESULT_FILE.exists() else {}
    if "suite" not in args.skip:
        print("fault suite", flush=True)
        data["suite"] = run_suite(ROOT)
        data["suite_before"] = run_suite(args.before) if args.before else None
    if "sizes" not in args.skip:
        print("document sizes", flush=True)
        if "sizes-here" not in args.skip or not data.get("sizes"):
            data["sizes"] = run_sizes(args.sizes, ROOT, args.size_timeout)
        data["sizes_before"] = (
            run_sizes([s for s in args.sizes if s <= args.before_max_mb], args.before, args.size_timeout)
            if args.before else []
        )
    if "writers" not in args.skip:
        print("concurrent writers", flush=True)
        data["writers"] = run_writers(args.writers, args.runs, ROOT)
        data["writers_before"] = run_writers(args.writers, args.runs, args.before) if args.before else []
        data["writer_count"] = args.writers
    if args.before:
        done = subprocess.run(["git", "-C", str(args.before), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        for part in ("suite", "sizes", "writers"):
            if part not in args.skip:
                data[f"{part}_before_commit"] = done.stdout.strip() or "?"
    RESULT_FILE.write_text(json.dumps(data, indent=1))
    body = [
        "\"Before (main)\" is the main branch's checkout, run by the same cases and scripts (fault suite at "
        f"{data.get('suite_before_commit', '?')}, sizes at {data.get('sizes_before_commit', '?')}, writers at "
        f"{data.get('writers_before_commit', '?')}).\n",
        "### Fault-injection suite (`tests/fault_cases.py`)\n",
        "A case is *handled* when the work is done, or the command prints one line naming what is wrong "
        "(exit code 2, no traceback) and the store still loads. Cases needing a tmpfs run only as root.\n",
        suite_table(data.get("suite") or [], data.get("suite_before")),
        "\n### Ingestion time against the size of one document\n",
        "`hiqa ingest` of one `.txt` document, hashing embedding and rules-only keywords (the pack's own "
        "stages, not the embedding model's: MiniLM on 2 cores embeds about 20 chunks a second, which alone "
        "would take hours at these sizes). 'running for' lines: what `hiqa ingest` printed while one stage ran "
        "longer than 10 s inside the single batch (the per-batch line comes only at its end).\n",
        size_table(data.get("sizes") or [], data.get("sizes_before") or [], args.size_timeout),
        "\n### Concurrent writers on one folder store\n",
        f"{data.get('writer_count', args.writers)} `hiqa ingest --add` processes started together, each adding "
        "3 documents of its own folder to a store holding 1.\n",
        writers_table(data.get("writers") or [], data.get("writers_before") or [], data.get("writer_count", args.writers)),
    ]
    body.insert(6, size_notes(data.get("sizes") or [], data.get("sizes_before") or []))
    command = ("python benchmarks/bench_reliability.py --sizes 1 2 4 8 16 32 64 --before ../main "
               f"--before-max-mb 64 --runs {len(data.get('writers') or []) or args.runs}")
    write_section("reliability", "Reliability", "\n".join(body), command=command)


if __name__ == "__main__":
    main()
