"""The first run: how long a new user waits for the first line of output and the first answer.

Question: after ``pip install``, how many seconds pass before the README quickstart
(``HiQAPack.from_directory(demo_data_dir())`` then ``pack.run(question)``) prints anything, and
before it answers; the same for ``hiqa ingest`` + ``hiqa ask`` on the demo datasheets. With a
fresh cache (a new empty ``HIQA_CACHE_DIR``: the embedding model is exported to ONNX once and
every vector is computed) and a warm one (the same cache again: the ONNX file and the vectors
are there).

Set-up: each row is a new Python process (the quickstart is the README's block, read from
README.md, with its store in a temporary folder); every line it writes to stdout or stderr is
stamped with the seconds since the process started. "First line" is the first line of any
kind; "first answer" is the first line of the answer (the quickstart's printed response,
``hiqa ask``'s first stdout line). ``--baseline PATH`` runs the same rows against another
checkout (e.g. the commit before the progress lines) for comparison; its rows are labelled
with that checkout's commit.

Run: ``nice -n 10 .venv/bin/python benchmarks/bench_first_run.py [--baseline /path/to/checkout]``
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import _results  # noqa: E402

SECTION = "first-run"
TITLE = "First run"
QUESTION = "What is the maximum output current of the NX-2043?"
ANSWER_PREFIXES = ("No LLM is configured", "The NX-2043")  # the no-LLM answer's notice, or an LLM's
TIME_LIMIT = 900


def quickstart_code(checkout: Path, store: Path, call_mark: Path) -> str:
    """The README's quickstart block, its store in ``store``; before it, the import of
    ``HiQAPack`` and the moment ``from_directory`` is called (``time.monotonic()``, one clock
    for every process on Linux) written to ``call_mark``, not to the output."""
    readme = (checkout / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- --8<-- [start:quickstart] -->", 1)[1].split("<!-- --8<-- [end:quickstart] -->", 1)[0]
    code = block.split("```python", 1)[1].split("```", 1)[0]
    mark = (
        "import time as _time\nfrom llama_index_hiqa import HiQAPack as _HiQAPack\n"
        f"open({str(call_mark)!r}, 'w').write(repr(_time.monotonic()))\n"
    )
    return mark + code.replace('"hiqa_store"', repr(str(store)))


def stamped_run(
    command: List[str], env: Dict[str, str], cwd: Path, call_mark: Optional[Path] = None
) -> List[Tuple[float, str, str]]:
    """Run ``command``; every output line as ``(seconds since start, "out"|"err", text)``, and
    ``(seconds, "call", "")`` for the moment written to ``call_mark``."""
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    lines: List[Tuple[float, str, str]] = []
    lock = threading.Lock()

    def pump(stream, tag: str) -> None:
        for line in stream:
            with lock:
                lines.append((time.monotonic() - started, tag, line.rstrip("\n")))

    pumps = [threading.Thread(target=pump, args=(process.stdout, "out")), threading.Thread(target=pump, args=(process.stderr, "err"))]
    for thread in pumps:
        thread.start()
    try:
        code = process.wait(timeout=TIME_LIMIT)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    for thread in pumps:
        thread.join()
    if code != 0:
        raise RuntimeError(f"{command} exited {code}:\n" + "\n".join(text for _, _, text in lines[-20:]))
    lines.append((time.monotonic() - started, "exit", ""))
    if call_mark is not None:
        lines.append((float(call_mark.read_text()) - started, "call", ""))
    return sorted(lines)


def figures(lines: List[Tuple[float, str, str]], answer_stream: str = "out") -> Dict[str, object]:
    """First line (time, text), first answer line's time, exit time; and the first line after
    the ``from_directory`` call, in seconds from the call (NaN without a call mark)."""
    shown = [(t, text) for t, tag, text in lines if tag in ("out", "err") and text.strip()]
    first = shown[0] if shown else (float("nan"), "")
    answer = next(
        (t for t, tag, text in lines if tag == answer_stream and text.startswith(ANSWER_PREFIXES)),
        float("nan"),
    )
    call = next((t for t, tag, _ in lines if tag == "call"), float("nan"))
    after_call = next((t - call for t, _ in shown if t >= call), float("nan"))
    exit_time = next(t for t, tag, _ in lines if tag == "exit")
    return {"first": first[0], "first_text": first[1], "after_call": after_call, "answer": answer, "exit": exit_time}


def run_checkout(checkout: Path, label: str) -> List[List[object]]:
    """The four rows (quickstart and CLI, fresh and warm) for one checkout."""
    python = sys.executable
    rows: List[List[object]] = []
    with tempfile.TemporaryDirectory(prefix="hiqa-first-run-") as tmp:
        tmp_path = Path(tmp)
        cache = tmp_path / "cache"
        cache.mkdir()
        env = {**os.environ, "PYTHONPATH": str(checkout), "HIQA_CACHE_DIR": str(cache),
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        env.pop("OPENAI_API_KEY", None)
        demo = checkout / "llama_index_hiqa" / "demo_data"
        for cache_state in ("fresh", "warm"):
            mark = tmp_path / f"call-{cache_state}"
            code = quickstart_code(checkout, tmp_path / f"quickstart-{cache_state}", mark)
            quick = figures(stamped_run([python, "-c", code], env, tmp_path, call_mark=mark))
            rows.append([label, "README quickstart", cache_state, quick["first"], quick["first_text"],
                         quick["after_call"], quick["answer"], quick["exit"]])
            store = tmp_path / f"store-{cache_state}"
            ingest = figures(stamped_run(
                [python, "-m", "llama_index_hiqa.cli", "ingest", str(demo), "--store", str(store)], env, tmp_path
            ))
            ask = figures(stamped_run(
                [python, "-m", "llama_index_hiqa.cli", "ask", QUESTION, "--store", str(store)], env, tmp_path
            ))
            rows.append([label, "`hiqa ingest`", cache_state, ingest["first"], ingest["first_text"], float("nan"),
                         float("nan"), ingest["exit"]])
            rows.append([label, "`hiqa ask`", cache_state, ask["first"], ask["first_text"], float("nan"),
                         ask["answer"], ask["exit"]])
            print(*rows[-3:], sep="\n", flush=True)
    return rows


def git_commit(checkout: Path) -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True)
    return out.stdout.strip() or "?"


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to measure the same way (e.g. main before)")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    rows = run_checkout(ROOT, f"this ({git_commit(ROOT)})")
    if args.baseline is not None:
        rows += run_checkout(args.baseline.resolve(), f"baseline ({git_commit(args.baseline)})")
    load_after = os.getloadavg()[0]

    def seconds(value: object) -> str:
        return "—" if value != value else f"{value:.1f}"  # NaN: no answer line in that row

    def shown(text: object) -> str:
        text = re.sub(r"\s+", " ", str(text)).replace("|", "\\|")
        return f"`{text[:70]}{'…' if len(text) > 70 else ''}`"

    table = _results.markdown_table(
        ["code", "run", "cache", "first line s", "first line", "first line after from_directory() s",
         "first answer s", "exit s"],
        [[r[0], r[1], r[2], seconds(r[3]), shown(r[4]), seconds(r[5]), seconds(r[6]), seconds(r[7])] for r in rows],
    )
    body = (
        "Seconds from the start of a new process to its first line of output (stdout or stderr), "
        "to the first line of the answer and to its exit, on the ten demo datasheets; "
        "\"fresh\" is a new empty `HIQA_CACHE_DIR` (the embedding model is exported to ONNX and every "
        "vector computed), \"warm\" the same cache again. `hiqa ask` runs on the store the row above built. "
        "The quickstart is the README's block as it stands; \"first line after from_directory()\" counts "
        "from the call, after `from llama_index_hiqa import HiQAPack` (which imports LlamaIndex). "
        f"Load average (1 min) {load_before:.1f} before the runs, {load_after:.1f} after, on "
        f"{os.cpu_count()} cores shared with other work: the seconds are inflated by that load; the "
        "order of the lines is not.\n\n" + table
    )
    _results.write_section(SECTION, TITLE, body)
    print(body)


if __name__ == "__main__":
    main()
