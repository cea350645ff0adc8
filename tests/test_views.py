"""See why: `HiQAPack.explain` in a notebook (HTML with the page, the highlight and the route
bars), as text and as data; the page renderer's bounds; the web app's routes and errors; the
same view over PostgreSQL."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pymupdf
import pytest
from starlette.testclient import TestClient

from llama_index_hiqa.demo import DEMO_DATA_DIR
from llama_index_hiqa.pack.hiqa_pack import HiQAPack
from llama_index_hiqa.serve.app import create_app
from llama_index_hiqa.testing import ScriptedLLM
from llama_index_hiqa.views.page_images import PageGeometry, PageImageError, PageRenderer
from tests.pack_helpers import HashEmbedding
from tests.test_pack import FAST, documents, pack  # noqa: F401  (the demo pack fixtures)
from tests.test_page_boxes import gold_passage_words

# Two demo questions, their gold datasheet, section and page (questions.jsonl).
QUESTIONS = [
    ("What is the maximum output current of the NX-2040?", "NX-2040", "4.2 Electrical characteristics", 1),
    ("What is the absolute maximum input voltage of the NX-2046?", "NX-2046", "4.1 Absolute maximum ratings", 0),
]


def gold_rect(document_id, section, page):
    """The gold passage's own bounding box on its page, from PyMuPDF's words."""
    words = gold_passage_words(document_id, section, page)
    return (min(w[0] for w in words), min(w[1] for w in words), max(w[2] for w in words), max(w[3] for w in words))


def overlaps(a, b):
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


class _Evidence(HTMLParser):
    """The facts a reader sees in the explanation's HTML: per result its document, the page
    images (src) and highlight rectangles (data-rect, PDF points), the route rows."""

    def __init__(self):
        super().__init__()
        self.results = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class", "")
        if "hiqa-evidence" in cls.split():
            self.results.append({"document": a["data-document-id"], "images": [], "rects": [], "routes": []})
        elif not self.results:
            return
        elif tag == "div" and cls == "hiqa-page":
            self.results[-1]["page"] = int(a["data-page"])
        elif tag == "img":
            self.results[-1]["images"].append(a["src"])
        elif cls == "hiqa-highlight":
            rect = tuple(float(v) for v in a["data-rect"].split(","))
            self.results[-1]["rects"].append((self.results[-1].get("page"), rect, a["style"]))
        elif cls == "hiqa-route":
            self.results[-1]["routes"].append(a["data-route"])


def parsed(html):
    parser = _Evidence()
    parser.feed(html)
    return parser.results


def check_first_result_shows_the_gold_passage(results, document_id, section, page, image_prefix):
    """The gold datasheet ranks first, its page images show, a highlight of one of its
    results overlaps the gold passage, and every result has its route bars."""
    first = results[0]
    assert first["document"] == document_id
    assert first["images"] and all(src.startswith(image_prefix) for src in first["images"])
    gold = gold_rect(document_id, section, page)
    rects = [(p, rect) for r in results if r["document"] == document_id for p, rect, _ in r["rects"]]
    assert any(p == page and overlaps(rect, gold) for p, rect in rects), (rects, gold)
    assert all({"vector", "bm25", "keywords", "fused"} <= set(r["routes"]) for r in results)


@pytest.mark.parametrize("question,document_id,section,page", QUESTIONS)
def test_notebook_view_shows_the_gold_page_highlighted_with_route_bars(pack, question, document_id, section, page):
    explanation = pack.explain(question)
    results = parsed(explanation._repr_html_())
    check_first_result_shows_the_gold_passage(results, document_id, section, page, "data:image/png;base64,")
    png = base64.b64decode(results[0]["images"][0].split(",", 1)[1])
    pix = pymupdf.Pixmap(png)
    assert max(pix.width, pix.height) <= 900 and min(pix.width, pix.height) > 300
    # Text and data say the same.
    text = str(explanation)
    assert text.startswith(f"Question: {question}") and f"({document_id})" in text.split("\n#1 ")[1].split("\n")[0]
    data = json.loads(json.dumps(explanation.to_dict()))
    top = data["results"][0]
    assert top["document_id"] == document_id and top["routes"]["vector"] >= 0 and top["fused"] == pytest.approx(top["score"])
    gold = next(r for r in data["results"] if r["document_id"] == document_id and section in r["heading_path"])
    assert str(page) in gold["boxes"] and page in gold["pages"]
    assert data["focus"]["documents"][:1] == [document_id] and "Document focus chose" in data["focus"]["summary"]


def test_renderer_bounds_its_pages_and_its_cache_and_names_bad_input(tmp_path):
    path = str(Path(DEMO_DATA_DIR) / "NX-2040.pdf")
    renderer = PageRenderer(max_pixels=300, cache_bytes=60_000)
    first = renderer.render(path, 0)
    assert max(first.width, first.height) == 300 and first.png.startswith(b"\x89PNG")
    assert renderer.render(path, 0) is first  # cached
    renderer.render(path, 1)
    renderer.render(str(Path(DEMO_DATA_DIR) / "NX-2041.pdf"), 0)
    assert 0 < renderer.cached_bytes <= 60_000
    with pytest.raises(PageImageError, match="no such page"):
        renderer.render(path, 7)
    with pytest.raises(PageImageError, match="cannot be read"):
        renderer.render(str(tmp_path / "gone.pdf"), 0)
    (tmp_path / "x.pdf").write_bytes(b"not a pdf")
    with pytest.raises(PageImageError, match="not a readable PDF"):
        renderer.render(str(tmp_path / "x.pdf"), 0)
    with pytest.raises(ValueError, match="max_pixels"):
        PageRenderer(max_pixels=10)


def test_a_rotated_page_places_the_highlight_where_the_text_is_shown(tmp_path):
    pdf = pymupdf.open()
    page = pdf.new_page(width=600, height=800)
    page.insert_text((72, 100), "Rotated passage")
    page.set_rotation(90)
    pdf.save(tmp_path / "r.pdf")
    rect = pymupdf.open(tmp_path / "r.pdf")[0].search_for("Rotated passage")[0]
    geometry = PageRenderer().render(str(tmp_path / "r.pdf"), 0).geometry
    assert (geometry.width, geometry.height) == (800, 600)
    left, top, width, height = geometry.fractions(tuple(rect))
    # Text near the top-left of the unrotated page shows near the top-right once turned 90°.
    assert left > 0.8 and top < 0.3 and height > width
    assert PageGeometry(100, 100, (1, 0, 0, 1, 0, 0)).fractions((-10, 50, 50, 200)) == (0.0, 0.5, 0.5, 0.5)


@pytest.fixture(scope="module")
def client(pack):
    return TestClient(create_app(pack))


def test_api_retrieve_and_ask_without_an_llm(client):
    question, document_id, section, page = QUESTIONS[0]
    data = client.post("/api/retrieve", json={"question": question}).json()
    assert data["results"][0]["document_id"] == document_id and data["elapsed_ms"] >= 0
    asked = client.post("/api/ask", json={"question": question}).json()
    assert asked["llm"] is False and asked["answer"] is None and asked["results"][0]["document_id"] == document_id
    image = client.get(f"/page/{document_id}/{page}.png")
    assert image.status_code == 200 and image.headers["content-type"] == "image/png"
    assert pymupdf.Pixmap(image.content).width > 300
    assert client.get("/api/health").json() == {"status": "ok", "documents": 10}


def test_the_page_shows_the_evidence_with_page_urls_of_the_store(client):
    question, document_id, section, page = QUESTIONS[1]
    response = client.get("/", params={"q": question})
    assert response.status_code == 200
    check_first_result_shows_the_gold_passage(parsed(response.text), document_id, section, page, f"/page/{document_id}/")
    assert "evidence only (no LLM configured)" in response.text
    assert client.get("/").status_code == 200


@pytest.mark.parametrize(
    "request_args,status,message",
    [
        ({"json": {"question": ""}}, 400, "empty"),
        ({"json": {"question": "x" * 2001}}, 400, "2,001 characters"),
        ({"json": {"question": 5}}, 400, "empty"),
        ({"json": ["a list"]}, 400, "JSON object"),
        ({"content": b"{not json"}, 400, "not JSON"),
    ],
)
def test_bad_requests_get_one_line_json_errors_with_a_status(client, request_args, status, message):
    for route in ("/api/retrieve", "/api/ask"):
        response = client.post(route, **request_args)
        assert response.status_code == status and message in response.json()["error"]


def test_page_images_only_of_documents_in_the_store(client):
    for url in ("/page/NX-9999/0.png", "/page/..%2F..%2Fetc%2Fpasswd/0.png", "/page/NX-2040/5.png", "/page/NX-2040/x.png"):
        response = client.get(url)
        assert response.status_code == 404 and response.json()["error"], url
    assert client.get("/api/retrieve").status_code == 405


def test_an_error_is_one_line_on_the_page(client):
    response = client.get("/", params={"q": "x" * 5000})
    assert response.status_code == 400
    errors = re.findall(r"<p class='hiqa-error'>([^<]*)</p>", response.text)
    assert len(errors) == 1 and "5,000 characters" in errors[0] and "\n" not in errors[0]
    assert "hiqa-evidence" not in response.text


def test_ask_with_an_llm_returns_its_cited_answer(documents):
    pack = HiQAPack.from_documents(documents[:2], embed_model=HashEmbedding(), **FAST)
    pack.llm = ScriptedLLM(default_response="The NX-2040 delivers up to 150 mA [1].")
    client = TestClient(create_app(pack))
    data = client.post("/api/ask", json={"question": QUESTIONS[0][0]}).json()
    assert data["llm"] is True and "150 mA" in data["answer"] and data["results"][0]["document_id"] == "NX-2040"
    page = client.get("/", params={"q": QUESTIONS[0][0]}).text
    assert "<div class='hiqa-answer'>The NX-2040 delivers up to 150 mA [1].</div>" in page


def test_explain_on_postgresql_shows_the_same_view(server, documents):
    url = server.database()
    pack = HiQAPack.from_documents(documents, embed_model=HashEmbedding(), store=url, **FAST)
    pack.close()
    loaded = HiQAPack.load(url, embed_model=HashEmbedding(), **FAST)
    try:
        question, document_id, section, page = QUESTIONS[0]
        results = parsed(loaded.explain(question)._repr_html_())
        check_first_result_shows_the_gold_passage(results, document_id, section, page, "data:image/png;base64,")
        client = TestClient(create_app(loaded))
        assert client.post("/api/retrieve", json={"question": question}).json()["results"][0]["boxes"]
        assert client.get(f"/page/{document_id}/{page}.png").status_code == 200
    finally:
        loaded.close()


def test_serve_command_refuses_a_missing_store_in_one_line(tmp_path, capsys):
    from llama_index_hiqa import cli

    assert cli.main(["serve", "--store", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hiqa serve: ") and "no such store" in err and "\n" not in err
    args = cli.build_parser().parse_args(["serve", "--store", "s"])
    assert (args.host, args.port) == ("127.0.0.1", 8000)
