"""The web app of ``hiqa serve``: one loaded pack answering questions in the browser and over JSON.

A Starlette application (the ``serve`` extra; uvicorn runs it) with server-rendered HTML and a
few lines of JavaScript, no front-end build:

* ``GET /?q=...``: the question box and, for a question, the answer (with an LLM) or the
  evidence (without), each node on its page with its text highlighted, its heading path and a
  bar per route ([`explanation_html`][llama_index_hiqa.views.explanation.explanation_html]).
* ``POST /api/retrieve`` ``{"question": "..."}``: the evidence as JSON
  ([`Explanation.to_dict`][llama_index_hiqa.views.explanation.Explanation.to_dict]).
* ``POST /api/ask`` ``{"question": "..."}``: the answer and its sources as JSON.
* ``GET /page/{document_id}/{page}.png``: a page of a document in the store (page from 0). The
  file is found from the store's own record of the document: no path comes from the client.
* ``GET /api/health``: ``{"status": "ok", "documents": N}``.

A bad request is one line: on the page, and as ``{"error": "..."}`` with status 400 (bad
question or body), 404 (unknown document or page) or 500. Questions are answered one at a
time (the pack's retrievers share their store connections); the page renders happen outside
that lock.
"""

from __future__ import annotations

import html
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from llama_index_hiqa import schema
from llama_index_hiqa.errors import HiQAError
from llama_index_hiqa.questions import question_text
from llama_index_hiqa.views.explanation import Explanation, explain_nodes, explanation_html
from llama_index_hiqa.views.page_images import PageGeometry, PageImageError, PageRenderer

if TYPE_CHECKING:
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack

logger = logging.getLogger(__name__)

# Longer than any question a person types; the pack's own limit is for programs.
MAX_QUESTION_CHARS = 2000


class RequestError(HiQAError):
    """A request the app refuses; ``status`` is its HTTP status, the message one line."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


class PackApp:
    """The pack, its page renderer and the answers, shared by the routes of `create_app`.

    Args:
        pack: the loaded pack (its LLM, when it has one, writes the answers).
        renderer: renders the pages (default: a `PageRenderer` with its bounded cache).
        max_question_chars: longer questions are refused with status 400.
    """

    def __init__(self, pack: "HiQAPack", renderer: Optional[PageRenderer] = None, max_question_chars: int = MAX_QUESTION_CHARS) -> None:
        self.pack = pack
        self.renderer = renderer or PageRenderer()
        self.max_question_chars = max_question_chars
        self.documents = set(pack.document_ids)
        self._files: Dict[str, Tuple[str, int]] = {}
        self._lock = threading.Lock()

    def question(self, value: Any) -> str:
        """The request's question as the pack's text.

        Args:
            value: the ``question`` the request gave.

        Returns:
            The cleaned question.

        Raises:
            RequestError: 400: empty, not a string, too long or refused by the pack.
        """
        if not isinstance(value, str) or not value.strip():
            raise RequestError(400, "the question is empty: type a question")
        if len(value) > self.max_question_chars:
            raise RequestError(400, f"the question has {len(value):,} characters; at most {self.max_question_chars:,} are read")
        try:
            return question_text(value).strip()
        except HiQAError as exc:
            raise RequestError(400, str(exc)) from exc

    def explain(self, question: str, with_answer: bool) -> Explanation:
        """Retrieve (and, with an LLM and ``with_answer``, answer) one question.

        Args:
            question: the cleaned question.
            with_answer: ask the LLM too, when the pack has one.

        Returns:
            The explanation of the evidence (with the answer when asked).
        """
        with self._lock:
            if with_answer and self.pack.llm is not None:
                response = self.pack.run(question)
                return explain_nodes(question, response.source_nodes or [], str(response), self.renderer)
            return explain_nodes(question, self.pack.retrieve(question), renderer=self.renderer)

    def document_file(self, document_id: str) -> Tuple[str, int]:
        """The source file and page count of a document of the store, from its stored nodes.

        Args:
            document_id: the document's ``schema.DOCUMENT_ID``, as the client sent it.

        Returns:
            ``(path, page count)``.

        Raises:
            RequestError: 404: the store has no such document, or its file is not here.
        """
        known = self._files.get(document_id)
        if known is not None:
            return known
        if document_id not in self.documents:
            raise RequestError(404, f"no document {document_id!r} in this store")
        with self._lock:
            multi_route = self.pack.multi_route
            ids = multi_route.document_node_ids(document_id)[:1]
            nodes = list(multi_route.nodes_by_id(ids).values()) if ids else []
        path = str(nodes[0].metadata.get(schema.FILE_PATH) or "") if nodes else ""
        if not path or not Path(path).is_file():
            raise RequestError(404, f"the source file of {document_id!r} is not on this machine")
        found = (path, int(nodes[0].metadata.get(schema.PAGE_COUNT) or 0))
        self._files[document_id] = found
        return found

    def image_source(self, document_id: str, path: str, page: int) -> Optional[Tuple[str, PageGeometry]]:
        """Where a page shows in the app (an ``ImageSource`` of the explanation's HTML).

        Args:
            document_id: the node's document.
            path: the node's file path (unused: the store's record of the document decides).
            page: the page, from 0.

        Returns:
            Its URL and geometry; ``None`` when the file is not on this machine.
        """
        try:
            stored, _ = self.document_file(document_id)
            # Rendered now (the browser asks for it next; the cache then serves it).
            return f"/page/{quote(document_id, safe='')}/{page}.png", self.renderer.render(stored, page).geometry
        except (RequestError, PageImageError):
            return None


def create_app(pack: "HiQAPack", renderer: Optional[PageRenderer] = None, max_question_chars: int = MAX_QUESTION_CHARS) -> Starlette:
    """The Starlette application of ``hiqa serve`` over a loaded pack.

    Args:
        pack: the loaded pack.
        renderer: renders the page images (default: a new bounded one).
        max_question_chars: the longest question accepted.

    Returns:
        The ASGI application (run it with uvicorn).
    """
    state = PackApp(pack, renderer, max_question_chars)

    def home(request: Request) -> HTMLResponse:
        raw = request.query_params.get("q")
        if raw is None:
            return HTMLResponse(_page(state, "", ""))
        try:
            question = state.question(raw)
            started = time.perf_counter()
            explanation = state.explain(question, with_answer=True)
            body = _results_html(state, explanation, time.perf_counter() - started)
            return HTMLResponse(_page(state, question, body))
        except RequestError as exc:
            return HTMLResponse(_page(state, raw if isinstance(raw, str) else "", _error_html(str(exc))), status_code=exc.status)
        except HiQAError as exc:
            return HTMLResponse(_page(state, raw, _error_html(str(exc))), status_code=500)

    async def api_retrieve(request: Request) -> JSONResponse:
        return await _json_route(request, state, with_answer=False)

    async def api_ask(request: Request) -> JSONResponse:
        return await _json_route(request, state, with_answer=True)

    def page_image(request: Request) -> Response:
        document_id = request.path_params["document_id"]
        try:
            page = int(request.path_params["page"])
            path, count = state.document_file(document_id)
            if not 0 <= page < max(count, 1):
                raise RequestError(404, f"{document_id!r} has no page {page} (pages 0 to {count - 1})")
            image = state.renderer.render(path, page)
        except RequestError as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        except (ValueError, PageImageError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        return Response(image.png, media_type="image/png", headers={"Cache-Control": "private, max-age=3600"})

    def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "documents": len(state.documents)})

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        status = int(getattr(exc, "status_code", 500))
        detail = getattr(exc, "detail", "") or "error"
        return JSONResponse({"error": f"{request.method} {request.url.path}: {detail}"}, status_code=status)

    app = Starlette(
        exception_handlers={404: http_error, 405: http_error},
        routes=[
            Route("/", home),
            Route("/api/retrieve", api_retrieve, methods=["POST"]),
            Route("/api/ask", api_ask, methods=["POST"]),
            Route("/api/health", health),
            Route("/page/{document_id}/{page}.png", page_image),
        ]
    )
    app.state.pack_app = state
    return app


async def _json_route(request: Request, state: PackApp, with_answer: bool) -> JSONResponse:
    from starlette.concurrency import run_in_threadpool

    try:
        try:
            body = await request.json()
        except ValueError:
            raise RequestError(400, 'the body is not JSON; send {"question": "..."}') from None
        if not isinstance(body, dict):
            raise RequestError(400, 'the body must be a JSON object: {"question": "..."}')
        question = state.question(body.get("question"))
        started = time.perf_counter()
        explanation = await run_in_threadpool(state.explain, question, with_answer)
        elapsed = time.perf_counter() - started
    except RequestError as exc:
        return JSONResponse({"error": str(exc)}, status_code=exc.status)
    except HiQAError as exc:
        return JSONResponse({"error": str(exc)}, status_code=500)
    data = explanation.to_dict()
    data["elapsed_ms"] = round(elapsed * 1000, 1)
    if with_answer:
        data["llm"] = state.pack.llm is not None
    return JSONResponse(data)


_PAGE_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.2em auto;max-width:1150px;padding:0 1em;color:#222}
form{display:flex;gap:.5em;margin:.6em 0 1em}
input[name=q]{flex:1;font-size:16px;padding:.45em}
button{font-size:16px;padding:.45em 1em}
.hiqa-error{color:#b00020;font-weight:600}
.hiqa-answer{background:#eef4ff;padding:.6em;border-radius:6px;white-space:pre-wrap;margin:.5em 0}
.hiqa-meta{color:#777;font-size:12px}
"""

_SCRIPT = """
document.querySelector('form').addEventListener('submit', function (event) {
  var box = event.target.querySelector('input[name=q]');
  if (!box.value.trim()) { event.preventDefault(); box.focus(); return; }
  var button = event.target.querySelector('button');
  button.disabled = true; button.textContent = 'Asking…';
});
"""


def _page(state: PackApp, question: str, body: str) -> str:
    e = html.escape
    documents = len(state.documents)
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{e(question) + ' · ' if question else ''}HiQA</title><style>{_PAGE_STYLE}</style></head><body>"
        f"<h1>HiQA</h1><div class='hiqa-meta'>{documents} document(s) · "
        f"{'answers by the LLM, with their evidence' if state.pack.llm is not None else 'evidence only (no LLM configured)'}</div>"
        f"<form method='get' action='/'><input name='q' value='{e(question)}' maxlength='{state.max_question_chars}' "
        "placeholder='Ask a question about the documents' autofocus><button type='submit'>Ask</button></form>"
        f"<main>{body}</main><script>{_SCRIPT}</script></body></html>"
    )


def _results_html(state: PackApp, explanation: Explanation, seconds: float) -> str:
    parts = []
    if explanation.answer is not None:
        parts.append(f"<div class='hiqa-answer'>{html.escape(explanation.answer)}</div>")
    parts.append(f"<div class='hiqa-meta'>{len(explanation.evidence)} result(s) in {seconds * 1000:.0f} ms</div>")
    parts.append(explanation_html(explanation, state.image_source, bare=True))
    return "".join(parts)


def _error_html(message: str) -> str:
    return f"<p class='hiqa-error'>{html.escape(' '.join(message.split()))}</p>"


def serve(pack: "HiQAPack", host: str = "127.0.0.1", port: int = 8000, log_level: str = "warning") -> None:
    """Serve the pack with uvicorn until interrupted (loopback unless ``host`` says otherwise).

    Args:
        pack: the loaded pack.
        host: the address to bind.
        port: the port (0: any free one).
        log_level: uvicorn's log level.
    """
    import uvicorn

    uvicorn.run(create_app(pack), host=host, port=port, log_level=log_level)
