"""``hiqa serve``: what a loaded pack answers in, against a new ``hiqa ask`` process a question.

Question: once the store is loaded behind the web app, how long does a question take, alone and
with 4 or 16 clients asking at once, and how does that compare with ``pack.retrieve`` called
in-process (the floor) and with ``hiqa ask`` (a process a question)?

For each store (the demo datasheets and the 46 FinanceBench filings, each built with
``HiQAPack.from_directory`` defaults):

* time to first answer: from starting ``hiqa serve`` to the first ``/api/retrieve`` answer;
* ``/api/retrieve`` latency p50/p95 at 1, 4 and 16 concurrent clients (loopback; each level
  bounded in requests and seconds), with the count of errors;
* page rendering: ``/page/...png`` cold (first render) and warm (from the cache);
* the server's resident memory after the load;
* ``pack.retrieve`` in-process p50/p95 over the same questions, and ``hiqa ask`` wall seconds
  a question.

Run niced: ``PYTHONPATH=. nice -n 10 .venv/bin/python benchmarks/bench_serve.py
[--financebench-store DIR] [--screenshot docs/assets/serve.png]``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import _results  # noqa: E402

STORES = Path(os.environ.get("HIQA_BENCH_STORES", "/work/bench_stores/see-why"))
LEVELS = (1, 4, 16)
REQUESTS_PER_CLIENT = {1: 40, 4: 15, 16: 6}  # bounded count ...
LEVEL_SECONDS = 90.0  # ... and time: a level stops sending after this
ASK_QUESTIONS = 2  # `hiqa ask` runs (a process each: seconds apiece)
PAGES = 6  # page renders timed, cold then warm


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(url: str, payload: Dict[str, Any], timeout: float = 120.0) -> Tuple[int, Dict[str, Any]]:
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {"error": exc.read().decode(errors="replace")}


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _env() -> Dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT))


def demo_store() -> Path:
    from llama_index_hiqa.demo import DEMO_DATA_DIR
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack

    store = STORES / "demo"
    if not store.exists():
        HiQAPack.from_directory(DEMO_DATA_DIR, store=store).persist()
    return store


def demo_questions() -> List[str]:
    from llama_index_hiqa.demo import DEMO_DATA_DIR

    return [json.loads(line)["question"] for line in (Path(DEMO_DATA_DIR) / "questions.jsonl").read_text().splitlines()]


def financebench_questions() -> List[str]:
    from benchmarks.shared_data import load_financebench_questions

    return [q.question for q in load_financebench_questions()][:40]


def load_level(url: str, questions: List[str], clients: int) -> Dict[str, Any]:
    latencies: List[float] = []
    errors: List[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + LEVEL_SECONDS

    def client(offset: int) -> None:
        for i in range(REQUESTS_PER_CLIENT[clients]):
            if time.monotonic() > stop_at:
                return
            question = questions[(offset * 7 + i) % len(questions)]
            started = time.perf_counter()
            try:
                status, body = _post(url + "/api/retrieve", {"question": question})
            except OSError as exc:
                status, body = 0, {"error": str(exc)}
            elapsed = time.perf_counter() - started
            with lock:
                if status == 200 and body.get("results"):
                    latencies.append(elapsed)
                else:
                    errors.append(f"{status}: {str(body.get('error'))[:100]}")

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    return {
        "clients": clients, "requests": len(latencies) + len(errors), "errors": len(errors),
        "first_errors": errors[:3], "p50_ms": 1000 * _percentile(latencies, 0.5),
        "p95_ms": 1000 * _percentile(latencies, 0.95), "per_s": len(latencies) / wall if wall else 0.0,
    }


def page_renders(url: str, questions: List[str]) -> Dict[str, float]:
    results = [r for q in questions[:5] for r in _post(url + "/api/retrieve", {"question": q})[1].get("results", [])]
    pages = list(dict.fromkeys((r["document_id"], int(p)) for r in results for p in r["boxes"]))[:PAGES]
    timings: Dict[str, List[float]] = {"cold": [], "warm": []}
    for kind in ("cold", "warm"):
        for document_id, page in pages:
            started = time.perf_counter()
            with urllib.request.urlopen(f"{url}/page/{urllib.request.quote(document_id, safe='')}/{page}.png", timeout=60) as r:
                r.read()
            timings[kind].append(time.perf_counter() - started)
    return {k: 1000 * statistics.median(v) for k, v in timings.items() if v} | {"pages": len(pages)}


def paired(url: str, store: Path, questions: List[str]) -> Dict[str, float]:
    """``pack.retrieve`` in this process and ``/api/retrieve`` of the server, question by question
    in turn (the order alternating), so both are timed under the same load of a shared machine."""
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack

    pack = HiQAPack.load(store)
    pack.retrieve(questions[0])  # warm-up, as the server's
    local: List[float] = []
    served: List[float] = []
    explained: List[float] = []

    def timed_local(question: str) -> None:
        started = time.perf_counter()
        pack.retrieve(question)
        local.append(time.perf_counter() - started)

    def timed_served(question: str) -> None:
        started = time.perf_counter()
        status, _ = _post(url + "/api/retrieve", {"question": question})
        if status == 200:
            served.append(time.perf_counter() - started)

    for i, question in enumerate(questions[: REQUESTS_PER_CLIENT[1]]):
        first, second = (timed_local, timed_served) if i % 2 else (timed_served, timed_local)
        first(question)
        second(question)
        started = time.perf_counter()
        pack.explain(question).to_dict()
        explained.append(time.perf_counter() - started)
    pack.close()
    return {
        "p50_ms": 1000 * _percentile(local, 0.5), "p95_ms": 1000 * _percentile(local, 0.95),
        "explain_p50_ms": 1000 * _percentile(explained, 0.5),
        "served_p50_ms": 1000 * _percentile(served, 0.5), "served_p95_ms": 1000 * _percentile(served, 0.95),
    }


def hiqa_ask(store: Path, questions: List[str]) -> float:
    walls = []
    for question in questions[:ASK_QUESTIONS]:
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "llama_index_hiqa.cli", "ask", question, "--store", str(store)],
            cwd=ROOT, env=_env(), check=True, capture_output=True, timeout=300,
        )
        walls.append(time.perf_counter() - started)
    return statistics.median(walls)


def bench_store(name: str, store: Path, questions: List[str], screenshot: Optional[Path]) -> Dict[str, Any]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-m", "llama_index_hiqa.cli", "serve", "--store", str(store), "--port", str(port)],
        cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        first: Optional[Dict[str, Any]] = None
        while first is None:
            if server.poll() is not None:
                raise RuntimeError(f"hiqa serve exited: {server.stderr.read() if server.stderr else ''}")
            try:
                status, body = _post(url + "/api/retrieve", {"question": questions[0]}, timeout=300)
                if status == 200:
                    first = body
            except OSError:
                time.sleep(0.2)
        first_answer = time.perf_counter() - started
        floor = paired(url, store, questions)
        levels = [load_level(url, questions, clients) for clients in LEVELS]
        renders = page_renders(url, questions)
        rss = _rss_mb(server.pid)
        if screenshot is not None:
            take_screenshot(url, questions[0], screenshot)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"{name}: first answer {first_answer:.1f}s, levels {levels}, renders {renders}, rss {rss:.0f} MB", flush=True)
    ask = hiqa_ask(store, questions)
    print(f"{name}: in-process {floor}, hiqa ask {ask:.1f}s", flush=True)
    return {"name": name, "first_answer_s": first_answer, "levels": levels, "renders": renders, "rss_mb": rss,
            "in_process": floor, "ask_s": ask}


def take_screenshot(url: str, question: str, path: Path) -> None:
    """The app answering ``question``, as docs/ shows it (Debian's chromium, no download)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"],
        )
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(f"{url}/?q={urllib.request.quote(question)}")
        page.wait_for_selector(".hiqa-evidence img")
        page.wait_for_function("Array.from(document.images).every(i => i.complete)")
        path.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(path))
        browser.close()


def report(runs: List[Dict[str, Any]]) -> str:
    rows = []
    for run in runs:
        rows.append([
            run["name"], f"{run['first_answer_s']:.1f}", f"{run['ask_s']:.1f}",
            f"{run['in_process']['p50_ms']:.0f} / {run['in_process']['p95_ms']:.0f}",
            f"{run['in_process']['explain_p50_ms']:.0f}",
            f"{run['in_process']['served_p50_ms']:.0f} / {run['in_process']['served_p95_ms']:.0f}",
            f"{run['in_process']['served_p50_ms'] / run['in_process']['p50_ms']:.2f}x",
            f"{run['renders'].get('cold', float('nan')):.0f} / {run['renders'].get('warm', float('nan')):.1f}",
            f"{run['rss_mb']:.0f}",
        ])
    table = _results.markdown_table(
        ["store", "first answer after start (s)", "`hiqa ask` a question (s)", "`pack.retrieve` p50 / p95 (ms)",
         "`pack.explain` p50 (ms)", "`/api/retrieve` p50 / p95, 1 client (ms)", "server / in-process p50",
         "page render cold / cached (ms)", "server RSS (MB)"],
        rows,
    )
    load_rows = [
        [run["name"], lv["clients"], lv["requests"], lv["errors"], f"{lv['p50_ms']:.0f}", f"{lv['p95_ms']:.0f}", f"{lv['per_s']:.1f}"]
        for run in runs for lv in run["levels"]
    ]
    load = _results.markdown_table(["store", "clients", "requests", "errors", "p50 (ms)", "p95 (ms)", "answers/s"], load_rows)
    return (
        "`hiqa serve` on each store (built by `HiQAPack.from_directory` with defaults), asked over loopback; "
        "`/api/retrieve` returns the explanation (route scores, heading path, page boxes) of `pack.retrieve`'s nodes. "
        "The in-process and server columns are timed in turn, question by question, so that both see the same "
        "load of the shared machine. The server answers one question at a time (the pack's store connections are shared), so with more clients "
        "the latency grows with the queue while the answers per second stay those of one.\n\n"
        f"{table}\n\nUnder load (each level bounded to {LEVEL_SECONDS:.0f} s):\n\n{load}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--financebench-store", type=Path, default=STORES / "financebench")
    parser.add_argument("--screenshot", type=Path, help="save the app's screenshot (demo store) here")
    parser.add_argument("--skip-financebench", action="store_true")
    args = parser.parse_args()
    runs = [bench_store("demo datasheets (10)", demo_store(), demo_questions(), args.screenshot)]
    if not args.skip_financebench and args.financebench_store.exists():
        runs.append(bench_store("FinanceBench (46 filings)", args.financebench_store, financebench_questions(), None))
    _results.write_section("serve", "Serving", report(runs))


if __name__ == "__main__":
    main()
