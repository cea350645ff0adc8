"""Why the pack returned each node, as data, as text and as HTML.

[`Explanation`][llama_index_hiqa.views.explanation.Explanation] holds, for each returned node,
what a reader checks: its text, its document and heading path, where it lies on its pages
(``schema.PAGE_BOXES``), one score per retrieval route and the fused score (HiQA, "HiQA: A
Hierarchical Contextual Augmentation RAG for Multi-Documents QA", §Multi-Route Retrieval), the
chunk-graph chain it belongs to (IIER, "IIER: Improving the Integration of Information in
Retrieval", §Chunk Interaction Graph) and what the document focus chose. In a notebook it
displays itself (``_repr_html_``: each page inline as a data URI, the node's rectangles drawn
over it, a bar per route); ``str()`` is a text form; `to_dict` is the data the web app's JSON
API returns. [`explanation_html`][llama_index_hiqa.views.explanation.explanation_html] is the
one HTML renderer: the notebook and ``hiqa serve`` differ only in where a page image comes from.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from llama_index.core.schema import NodeWithScore

from llama_index_hiqa import schema
from llama_index_hiqa.retrievers.document_focus import FOCUS, FOCUS_DOCUMENTS
from llama_index_hiqa.views.page_images import PageGeometry, PageImageError, PageRenderer

# The routes shown as bars, in this order (others the ranking reports follow, by name).
ROUTE_ORDER = ("vector", "bm25", "keywords", "heading", "heading_words", "table", FOCUS)
# Route-score entries that are not a route's score.
_NOT_ROUTES = ("fused", "failed", FOCUS_DOCUMENTS)
PAGES_SHOWN = 2  # pages drawn per node: a node rarely spans more; its page list names them all
TEXT_SHOWN = 1200  # characters of a node's text in the views (the JSON keeps it all)

# Where a page image comes from: (document id, file path, page) -> (src for <img>, geometry),
# or None when it cannot be shown.
ImageSource = Callable[[str, str, int], Optional[Tuple[str, PageGeometry]]]


@dataclass
class Evidence:
    """One returned node, as the views show it."""

    rank: int
    node_id: str
    document_id: str
    document_title: str
    file_path: str
    score: Optional[float]
    kind: str
    heading_path: List[str]
    pages: List[int]  # from 0
    boxes: Dict[int, List[Tuple[float, float, float, float]]]
    routes: Dict[str, float]
    fused: Optional[float]
    chain: Optional[Dict[str, Any]]
    text: str

    def to_dict(self) -> Dict[str, Any]:
        """The node's facts as JSON-able data (pages from 0, boxes in PDF points).

        Returns:
            ``rank``, ``node_id``, ``document_id``, ``document_title``, ``score``, ``kind``,
                ``heading_path``, ``pages``, ``boxes`` (``{page: [[x0, y0, x1, y1], ...]}``),
                ``routes``, ``fused``, ``chain`` and ``text``.
        """
        return {
            "rank": self.rank, "node_id": self.node_id, "document_id": self.document_id,
            "document_title": self.document_title, "score": self.score, "kind": self.kind,
            "heading_path": self.heading_path, "pages": self.pages,
            "boxes": {str(p): [list(r) for r in rects] for p, rects in self.boxes.items()},
            "routes": self.routes, "fused": self.fused, "chain": self.chain, "text": self.text,
        }


@dataclass
class FocusDecision:
    """What the document focus did for the question, read from the returned nodes."""

    documents: List[str]  # the focused documents, in the order their nodes come
    places: int  # how many of the first places their re-ranked nodes hold

    @property
    def summary(self) -> str:
        """One sentence saying what the focus chose."""
        if not self.documents:
            return "Document focus: no document was ranked again; the order is the fused multi-route ranking."
        names = ", ".join(self.documents)
        share = "" if len(self.documents) == 1 else " sharing them"
        return (
            f"Document focus chose {names}: its nodes, ranked again within their document, "
            f"hold the first {self.places} place(s){share}."
        )


@dataclass
class Explanation:
    """The evidence for one question, each node with why it ranks where it does.

    Display it in a notebook, print it, or take `to_dict`. Built by
    [`HiQAPack.explain`][llama_index_hiqa.pack.hiqa_pack.HiQAPack.explain] or
    [`explain_nodes`][llama_index_hiqa.views.explanation.explain_nodes].
    """

    question: str
    evidence: List[Evidence]
    focus: FocusDecision
    answer: Optional[str] = None
    renderer: PageRenderer = field(default_factory=PageRenderer, repr=False)

    def to_dict(self) -> Dict[str, Any]:
        """The explanation as JSON-able data (what ``/api/retrieve`` returns).

        Returns:
            ``question``, ``answer`` (``None`` without an LLM), ``focus`` (``documents``,
                ``places``, ``summary``) and ``results`` (one `Evidence.to_dict` a node).
        """
        return {
            "question": self.question,
            "answer": self.answer,
            "focus": {"documents": self.focus.documents, "places": self.focus.places, "summary": self.focus.summary},
            "results": [e.to_dict() for e in self.evidence],
        }

    def __str__(self) -> str:
        lines = [f"Question: {self.question}"]
        if self.answer is not None:
            lines += ["", self.answer]
        lines += ["", self.focus.summary]
        for e in self.evidence:
            pages = ", ".join(str(p + 1) for p in e.pages) or "-"
            lines += ["", f"#{e.rank} {e.document_title} ({e.document_id}) · p. {pages} · score {_number(e.score)}"]
            if e.heading_path:
                lines.append("   " + " > ".join(e.heading_path))
            if e.routes:
                lines.append("   " + "  ".join(f"{name} {_number(v)}" for name, v in e.routes.items()))
            if e.chain is not None:
                lines.append(f"   chain {e.chain['id']} hop {e.chain['hop']} (walk score {_number(e.chain.get('score'))})")
            lines.append("   " + _shorten(e.text, 300).replace("\n", " "))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return explanation_html(self, self._data_uri)

    def _data_uri(self, document_id: str, path: str, page: int) -> Optional[Tuple[str, PageGeometry]]:
        try:
            image = self.renderer.render(path, page)
        except PageImageError:
            return None
        return "data:image/png;base64," + base64.b64encode(image.png).decode("ascii"), image.geometry


def explain_nodes(
    question: str, nodes: Sequence[NodeWithScore], answer: Optional[str] = None, renderer: Optional[PageRenderer] = None
) -> Explanation:
    """The [`Explanation`][llama_index_hiqa.views.explanation.Explanation] of retrieved nodes.

    Args:
        question: the question they answer.
        nodes: the retrieved nodes, best first (their ``schema.ROUTE_SCORES`` as the
            retrievers wrote them).
        answer: the LLM's answer, when there is one.
        renderer: renders the pages (a shared one keeps its cache across questions).

    Returns:
        The explanation.
    """
    evidence = [_evidence(rank, hit) for rank, hit in enumerate(nodes, 1)]
    focused = [e for e in evidence if FOCUS_DOCUMENTS in _route_scores(nodes[e.rank - 1])]
    focus = FocusDecision(list(dict.fromkeys(e.document_id for e in focused)), len(focused))
    return Explanation(question, evidence, focus, answer, renderer or PageRenderer())


def _route_scores(hit: NodeWithScore) -> Dict[str, Any]:
    scores = hit.node.metadata.get(schema.ROUTE_SCORES)
    return scores if isinstance(scores, dict) else {}


def _evidence(rank: int, hit: NodeWithScore) -> Evidence:
    node = hit.node
    scores = _route_scores(hit)
    routes = {
        name: float(value)
        for name, value in sorted(
            scores.items(), key=lambda kv: (ROUTE_ORDER.index(kv[0]) if kv[0] in ROUTE_ORDER else len(ROUTE_ORDER), kv[0])
        )
        if name not in _NOT_ROUTES and isinstance(value, (int, float))
    }
    page_range = schema.get_page_range(node) if schema.has_pages(node) else None
    chain = None
    if node.metadata.get(schema.CHAIN_ID) is not None:
        chain = {
            "id": int(node.metadata[schema.CHAIN_ID]),
            "hop": int(node.metadata.get(schema.CHAIN_HOP) or 0),
            "score": node.metadata.get(schema.CHAIN_SCORE),
        }
    fused = scores.get("fused")
    return Evidence(
        rank=rank,
        node_id=node.node_id,
        document_id=schema.get_document_id(node) or "",
        document_title=schema.get_document_title(node),
        file_path=str(node.metadata.get(schema.FILE_PATH) or ""),
        score=hit.score,
        kind=schema.get_segment_kind(node),
        heading_path=[h.label() for h in schema.get_heading_path(node)],
        pages=list(range(page_range[0], page_range[1] + 1)) if page_range else [],
        boxes=schema.get_page_boxes(node) if schema.has_pages(node) else {},
        routes=routes,
        fused=float(fused) if isinstance(fused, (int, float)) else hit.score,
        chain=chain,
        text=node.get_content(),
    )


# --- HTML ----------------------------------------------------------------------------------

_STYLE = """
.hiqa-explain{font-family:system-ui,sans-serif;font-size:14px;color:#222;max-width:1100px}
.hiqa-focus{margin:.4em 0 1em;color:#444}
.hiqa-evidence{border:1px solid #ddd;border-radius:6px;margin:0 0 1em;padding:.6em;display:flex;gap:1em;flex-wrap:wrap}
.hiqa-pages{display:flex;gap:.5em;flex-wrap:wrap}
.hiqa-page{position:relative;display:inline-block;width:420px;max-width:100%;border:1px solid #ccc;line-height:0}
.hiqa-page img{width:100%;display:block}
.hiqa-highlight{position:absolute;background:rgba(255,196,0,.35);outline:2px solid rgba(230,120,0,.9)}
.hiqa-info{flex:1;min-width:280px}
.hiqa-title{font-weight:600;margin-bottom:.2em}
.hiqa-path{color:#555;margin-bottom:.4em}
.hiqa-bars{border-collapse:collapse;margin:.3em 0}
.hiqa-bars td{padding:1px 6px 1px 0;font-size:12px;line-height:1.3}
.hiqa-bar{display:inline-block;height:10px;background:#4a7bd0;vertical-align:middle}
.hiqa-bar.hiqa-fused{background:#d05a2a}
.hiqa-text{white-space:pre-wrap;font-size:12px;background:#f7f7f7;padding:.4em;max-height:14em;overflow:auto;line-height:1.35}
.hiqa-chain{color:#2a6;font-size:12px}
.hiqa-nopage{color:#777;font-style:italic;line-height:1.4}
"""


def explanation_html(explanation: Explanation, image_source: ImageSource, bare: bool = False) -> str:
    """The explanation as one HTML fragment: per node its page images with the node's
    rectangles highlighted, its heading path, a bar per route and the fused score, its chain.

    Args:
        explanation: what to show.
        image_source: gives each page image's ``src`` (a data URI in notebooks, a URL of the
            web app) and geometry; ``None`` shows a line instead of the page.
        bare: leave out the question and answer (the web app shows them itself).

    Returns:
        The fragment, with its own ``<style>``; every text escaped.
    """
    e = html.escape
    maxima = _route_maxima(explanation.evidence)
    parts = [f"<div class='hiqa-explain'><style>{_STYLE}</style>"]
    if not bare:
        parts.append(f"<div class='hiqa-question'><b>{e(explanation.question)}</b></div>")
        if explanation.answer is not None:
            parts.append(f"<div class='hiqa-answer'>{e(explanation.answer)}</div>")
    parts.append(f"<div class='hiqa-focus'>{e(explanation.focus.summary)}</div>")
    for item in explanation.evidence:
        parts.append(
            f"<div class='hiqa-evidence' data-rank='{item.rank}' data-document-id='{e(item.document_id)}' "
            f"data-node-id='{e(item.node_id)}'>"
        )
        parts.append(f"<div class='hiqa-pages'>{_pages_html(item, image_source)}</div>")
        pages = ", ".join(str(p + 1) for p in item.pages)
        parts.append("<div class='hiqa-info'>")
        parts.append(
            f"<div class='hiqa-title'>#{item.rank} {e(item.document_title or item.document_id)}"
            f"{' · p. ' + pages if pages else ''} · {e(item.kind)}</div>"
        )
        if item.heading_path:
            parts.append(f"<div class='hiqa-path'>{e(' › '.join(item.heading_path))}</div>")
        parts.append(_bars_html(item, maxima))
        if item.chain is not None:
            parts.append(
                f"<div class='hiqa-chain'>chunk-graph chain {item.chain['id']}, hop {item.chain['hop']}"
                f" (walk score {_number(item.chain.get('score'))})</div>"
            )
        parts.append(f"<div class='hiqa-text'>{e(_shorten(item.text, TEXT_SHOWN))}</div>")
        parts.append("</div></div>")
    parts.append("</div>")
    return "".join(parts)


def _pages_html(item: Evidence, image_source: ImageSource) -> str:
    e = html.escape
    if not item.boxes:
        where = " › ".join(item.heading_path) or item.document_title
        return f"<div class='hiqa-nopage'>No page image: the node lies in section {e(where)}.</div>"
    out = []
    for page in list(item.boxes)[:PAGES_SHOWN]:
        source = image_source(item.document_id, item.file_path, page) if item.file_path else None
        if source is None:
            out.append(f"<div class='hiqa-nopage'>Page {page + 1}: the source file cannot be shown.</div>")
            continue
        src, geometry = source
        boxes = []
        for rect in item.boxes[page]:
            left, top, width, height = geometry.fractions(rect)
            boxes.append(
                f"<div class='hiqa-highlight' data-rect='{','.join(f'{v:g}' for v in rect)}' "
                f"style='left:{left:.4%};top:{top:.4%};width:{width:.4%};height:{height:.4%}'></div>"
            )
        out.append(
            f"<div class='hiqa-page' data-page='{page}'><img src='{e(src)}' alt='page {page + 1} of "
            f"{e(item.document_id)}'>{''.join(boxes)}</div>"
        )
    return "".join(out)


def _route_maxima(evidence: Sequence[Evidence]) -> Dict[str, float]:
    maxima: Dict[str, float] = {}
    for item in evidence:
        for name, value in [*item.routes.items(), ("fused", item.fused or 0.0)]:
            maxima[name] = max(maxima.get(name, 0.0), float(value))
    return maxima


def _bars_html(item: Evidence, maxima: Dict[str, float]) -> str:
    """One bar a route (its length relative to the best score that route gave any result of
    the question: routes score on different scales) and the fused score."""
    rows = []
    for name, value in [*item.routes.items(), ("fused", item.fused or 0.0)]:
        top = maxima.get(name, 0.0)
        width = 0 if top <= 0 else max(0.0, min(float(value) / top, 1.0)) * 120
        kind = " hiqa-fused" if name == "fused" else ""
        rows.append(
            f"<tr class='hiqa-route' data-route='{html.escape(name)}'><td>{html.escape(name)}</td>"
            f"<td><span class='hiqa-bar{kind}' style='width:{width:.0f}px'></span></td>"
            f"<td>{_number(value)}</td></tr>"
        )
    return f"<table class='hiqa-bars'>{''.join(rows)}</table>"


def _number(value: Any) -> str:
    return "-" if value is None else f"{float(value):.3g}"


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
