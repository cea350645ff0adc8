"""`hiqa serve` in a real browser: Debian's chromium, driven by Playwright (no browser is
downloaded), opens the app on the demo store, asks two demo questions and checks what a reader
sees: the gold datasheet first, its page image with a highlight over the gold passage, the route
bars; a screenshot is saved and checked for its size and its colours.

``make test`` installs chromium when it is missing; without it this test fails, naming the fix.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pymupdf
import pytest

from llama_index_hiqa.demo import load_demo_documents
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from tests.pack_helpers import HashEmbedding
from tests.test_views import FAST, QUESTIONS, gold_rect, overlaps

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``hiqa serve`` on the demo store (hashing embedding: tests.cheap_cli), on a free port."""
    store = tmp_path_factory.mktemp("serve") / "store"
    HiQAPack.from_documents(load_demo_documents(), embed_model=HashEmbedding(), **FAST).persist(store)
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.cheap_cli", "serve", "--store", str(store), "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/api/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"hiqa serve did not start: {process.stdout.read() if process.stdout else ''}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run `make install` (it runs `apt-get install -y chromium`)", pytrace=False)
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1200, "height": 1000},
        )
        try:
            yield context
        finally:
            context.close()


def test_two_demo_questions_in_the_browser(served, browser, tmp_path):
    page = browser.new_page()
    page.goto(served + "/")
    for question, document_id, section, gold_page in QUESTIONS:
        page.fill("input[name=q]", question)
        page.click("button[type=submit]")
        page.wait_for_selector(".hiqa-evidence")
        first = page.locator(".hiqa-evidence").first
        assert first.get_attribute("data-document-id") == document_id
        # The gold datasheet's page, loaded from the app, with a highlight over the gold passage.
        gold = gold_rect(document_id, section, gold_page)
        shown = page.locator(f".hiqa-evidence[data-document-id='{document_id}'] .hiqa-page[data-page='{gold_page}']")
        assert shown.count() >= 1
        image = shown.first.locator("img")
        assert image.get_attribute("src").startswith(f"/page/{document_id}/{gold_page}.png")
        assert image.evaluate("img => img.complete && img.naturalWidth") > 300
        hits = []
        for i in range(shown.count()):
            box_of_page = shown.nth(i).bounding_box()
            for highlight in shown.nth(i).locator(".hiqa-highlight").all():
                rect = tuple(float(v) for v in highlight.get_attribute("data-rect").split(","))
                on_screen = highlight.bounding_box()
                # The highlight is drawn inside its page image, where its rectangle says.
                assert box_of_page["x"] - 1 <= on_screen["x"] and on_screen["y"] + on_screen["height"] <= box_of_page["y"] + box_of_page["height"] + 1
                hits.append(overlaps(rect, gold))
        assert any(hits)
        routes = first.locator(".hiqa-route")
        assert {routes.nth(i).get_attribute("data-route") for i in range(routes.count())} >= {"vector", "bm25", "keywords", "fused"}
        assert first.locator(".hiqa-bar").first.bounding_box()["width"] >= 0
    # The second question's page, as a reader sees it.
    first_card = page.locator(".hiqa-evidence").first
    first_card.scroll_into_view_if_needed()
    shot = tmp_path / "serve.png"
    page.screenshot(path=str(shot), clip={"x": 0, "y": 0, "width": 1200, "height": 1000})
    pixmap = pymupdf.Pixmap(str(shot))
    assert (pixmap.width, pixmap.height) == (1200, 1000)
    samples, n = pixmap.samples, pixmap.n
    colours = {tuple(samples[i:i + 3]) for i in range(0, len(samples), n * 97)}
    # Not a blank page: many colours, the highlight's amber and the bars' blue among them.
    assert len(colours) > 50
    assert any(r > 200 and 150 < g < 235 and b < 150 for r, g, b in colours), "no highlight colour on screen"
    assert any(b > 150 and r < 120 for r, g, b in colours), "no route bar on screen"


def test_a_bad_question_is_one_line_on_the_page(served, browser):
    page = browser.new_page()
    page.goto(served + "/?q=" + "x" * 2500)
    errors = page.locator(".hiqa-error")
    assert errors.count() == 1 and "2,500 characters" in errors.inner_text()
    assert page.locator(".hiqa-evidence").count() == 0
