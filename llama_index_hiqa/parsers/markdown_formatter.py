"""MarkdownFormatterParser: HiQA's Markdown Formatter as a LlamaIndex ``NodeParser``.

HiQA paper, §Markdown Formatter and Algorithm 1 ("PDF2Markdown Formatting"): an LLM rewrites
each document as Markdown in which every chapter of any depth is a numbered heading and every
table a Markdown table with its title; the Markdown is then cut into *segments*, one per
chapter, instead of fixed-size chunks (tables: appendix A.4).

The document is read in a sliding window of ``W`` words with step ``W`` and ``K`` words of
padding on each side, ``T = ceil(N / W)`` calls per document; the call for window ``t`` also
receives window ``t-1``'s input and output (equation 1), so numbering, open tables and
half-finished chapters carry across the seam. The model returns only the Markdown of the
window proper (the padding is context), so the stitched output neither repeats nor skips the
seams; window borders are moved to the nearest line break so that no line is cut in two.

Every window's answer is checked against its source (share of the source's words found in
the output; share of output words not in the source; a kept tail; Markdown rather than JSON
or a one-line blob). A failing answer, an LLM error or a timeout is retried with backoff,
then the window falls back to [`LayoutMarkdownParser`][llama_index_hiqa.parsers.layout_markdown.LayoutMarkdownParser] on the window's own text, and the
nodes say which path produced them (``schema.PARSE_PATH``: ``"llm"`` or
``"layout_fallback"``). The document's word coverage is kept on every node
(``schema.COVERAGE``) and a [`MarkdownCoverageWarning`][llama_index_hiqa.parsers.markdown_formatter.MarkdownCoverageWarning] is raised below a threshold.
With no LLM (none given and no ``Settings.llm``) the layout parser does the whole job.

>>> from llama_index_hiqa import MarkdownFormatterParser
>>> parser = MarkdownFormatterParser(llm=OpenAI(model="gpt-4o"))
>>> nodes = parser.get_nodes_from_documents(documents)  # or inside an IngestionPipeline
"""

from __future__ import annotations

import asyncio
import bisect
import difflib
import logging
import math
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple

from llama_index.core.async_utils import asyncio_run, run_jobs
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, Document, TextNode

from llama_index_hiqa.component_dict import PartsRoundTrip
from llama_index_hiqa import schema
from llama_index_hiqa.figures import images_as_nodes_field, with_figure_nodes
from llama_index_hiqa.models.defaults import resolve_llm
from llama_index_hiqa.errors import LLMOutputError
from llama_index_hiqa.models.llm_calls import (
    LLMCallPolicy, max_retries_field, report_failed_attempt, retry_backoff_field, timeout_field, with_timeout,
)
from llama_index_hiqa.headings import markdown_headings, parse_heading_number
from llama_index_hiqa.parsers._markdown_segments import (
    SegmentNodeParser,
    as_document,
    HeadingMark,
    LevelResolver,
    build_pieces,
    drop_title_marks,
    pieces_to_nodes,
)
from llama_index_hiqa.parsers.layout_markdown import LayoutMarkdownParser

logger = logging.getLogger(__name__)

PARSE_PATH_LLM = "llm"
PARSE_PATH_FALLBACK = "layout_fallback"
PARSE_PATH_LAYOUT = "layout"

NO_PREVIOUS = "(none: this is the first window)"

# The paper's three rules (§Markdown Formatter), plus what the sliding window needs.
FORMAT_PROMPT = """\
You convert one window of a long document into Markdown for a question-answering system.
Rules:
1. Every chapter of ANY depth becomes one Markdown heading line "# <number> <title>", e.g.
   "# 2 Features", "# 2.3 Timing Requirements", "# Item 7A. Quantitative and Qualitative
   Disclosures About Market Risk". Always a single "#"; the number gives the depth.
2. The chapter number is the document's own number, written exactly as the document numbers
   it, and consistent with your output for the previous window (continue its numbering;
   never restart or invent numbers). A heading without a number keeps no number.
3. Tables become Markdown tables. Write the table's title on its own line just above the
   table. A table that continues from the previous window continues without a new title or
   a repeated header row.
4. Keep all the text of the window, in order: do not summarise, translate or comment.
5. Output ONLY the Markdown of the WINDOW section. The context before and after it is for
   understanding only: do not output it. If the window starts inside a chapter or a table,
   continue it (no new heading).

PREVIOUS WINDOW (its source text):
<<<PREVIOUS_INPUT
{prev_input}
PREVIOUS_INPUT>>>

PREVIOUS WINDOW (your Markdown for it):
<<<PREVIOUS_OUTPUT
{prev_output}
PREVIOUS_OUTPUT>>>

CONTEXT BEFORE THE WINDOW (do not output):
<<<BEFORE
{before}
BEFORE>>>

WINDOW (convert this):
<<<WINDOW
{window}
WINDOW>>>

CONTEXT AFTER THE WINDOW (do not output):
<<<AFTER
{after}
AFTER>>>

Markdown of the WINDOW only:
"""

RETRY_NOTE = """
Your previous answer for this window was rejected ({reason}). Answer again with the complete
Markdown of the WINDOW, keeping all of its text and nothing else.
"""

_WORD_RE = re.compile(r"[A-Za-z0-9]+")
_FENCE_WRAP_RE = re.compile(r"^\s*```[\w-]*\s*\n(.*?)\n?```\s*$", re.S)
_TABLE_ROW_RE = re.compile(r"^\s*\|.*\|\s*$")
_TABLE_SEP_RE = re.compile(r"^\s*\|?\s*:?-{2,}")


class MarkdownCoverageWarning(UserWarning):
    """A document's Markdown holds less of its source's words than ``min_document_coverage``."""


def window_from_prompt(prompt: str) -> str:
    """The WINDOW section of a formatter prompt (for scripted LLMs in tests/benchmarks).

    Args:
        prompt: the prompt sent to the LLM.

    Returns:
        The window's source text; ``""`` when the prompt has none.
    """
    match = re.search(r"<<<WINDOW\n(.*?)\nWINDOW>>>", prompt, re.S)
    return match.group(1) if match else ""


@dataclass
class WindowCheck:
    """How an answer compares with its window's source text."""

    ok: bool
    coverage: float
    novelty: float
    reason: str = ""


@dataclass
class _Window:
    index: int
    start: int  # character span of the window proper in the document text
    end: int
    before: str
    after: str


@dataclass
class _Result:
    window: _Window
    markdown: str
    path: str
    check: Optional[WindowCheck] = None
    attempts: int = 0
    errors: List[str] = field(default_factory=list)


def _words(text: str) -> List[str]:
    return [w.lower() for w in _WORD_RE.findall(text)]


def clean_answer(answer: str) -> str:
    """Unwrap a fenced ```markdown block, the most common wrapper LLMs add.

    Args:
        answer: the LLM's answer.

    Returns:
        The Markdown inside the fence (or the answer), without leading and trailing newlines.
    """
    match = _FENCE_WRAP_RE.match(answer)
    return (match.group(1) if match else answer).strip("\n")


def invented_numbers(output: str, context: str) -> List[str]:
    """Chapter numbers of the answer's headings that the source text never writes.

    The paper's rule is the document's own number, so an invented one is a hallucination.

    Args:
        output: the LLM's Markdown.
        context: the text the numbers must occur in (the window, its padding, the previous
            window).

    Returns:
        The invented numbers, in order.
    """
    out = []
    for _, _, _, body in markdown_headings(output):
        number = parse_heading_number(body).number
        digits = number.split()[-1] if number else ""
        # pymupdf may space a numeral's letters ("PART I V"): allow a space between them
        spaced = r"\s?".join(re.escape(ch) for ch in digits)
        if digits and not re.search(rf"(?<![\w.]){spaced}(?![\w])", context, re.I):
            out.append(number)
    return out


def check_window(
    source: str, output: str, *, min_coverage: float, max_novelty: float, context: str = ""
) -> WindowCheck:
    """Compare the formatter's answer with its window's source text.

    Coverage of the source's words in ``output`` and share of output words that are not in the
    source; also flags empty, truncated (the window's last words missing), non-Markdown (JSON,
    one flattened line for a multi-line source) answers and heading numbers found nowhere in
    ``source`` + ``context``.

    Args:
        source: the window's text.
        output: the LLM's Markdown.
        min_coverage: the least share of the source's words the answer must keep (0 to 1).
        max_novelty: the largest share of answer words not in the source (0 to 1).
        context: more text heading numbers may come from (the padding, the previous window).

    Returns:
        A [`WindowCheck`][llama_index_hiqa.parsers.markdown_formatter.WindowCheck]: whether it passes, coverage, novelty and the reason it failed.
    """
    src, out = _words(source), _words(output)
    if not src:
        return WindowCheck(True, 1.0, 0.0)
    if not out:
        return WindowCheck(False, 0.0, 0.0, "empty answer")
    src_count, out_count = Counter(src), Counter(out)
    coverage = sum(min(c, out_count[w]) for w, c in src_count.items()) / len(src)
    novelty = sum(c for w, c in out_count.items() if w not in src_count) / len(out)
    stripped = output.lstrip()
    if stripped.startswith(("{", "[")) and not stripped.startswith("[!"):
        return WindowCheck(False, coverage, novelty, "not Markdown (JSON-like answer)")
    if source.count("\n") >= 5 and output.count("\n") == 0 and len(out) > 40:
        return WindowCheck(False, coverage, novelty, "not Markdown (one flattened line)")
    if coverage < min_coverage:
        return WindowCheck(False, coverage, novelty, f"dropped text: coverage {coverage:.2f}")
    if novelty > max_novelty:
        return WindowCheck(False, coverage, novelty, f"text not in the source: {novelty:.2f}")
    tail = src[-8:]
    if len(src) >= 40 and sum(w in set(out[-80:]) for w in tail) < len(tail) / 2:
        return WindowCheck(False, coverage, novelty, "truncated: the window's end is missing")
    invented = invented_numbers(output, source + "\n" + context)
    if invented:
        return WindowCheck(
            False, coverage, novelty, f"chapter numbers not in the source: {', '.join(invented)}"
        )
    return WindowCheck(True, coverage, novelty)


class MarkdownFormatterParser(PartsRoundTrip, SegmentNodeParser):
    """One node per chapter segment of LLM-formatted Markdown (HiQA Markdown Formatter)."""

    part_names: ClassVar[Tuple[str, ...]] = ("llm",)  # not serialised: component_dict

    def to_dict(self, **kwargs: Any) -> Dict[str, Any]:
        """``PartsRoundTrip.to_dict`` with the layout parser's own (its tokenizer recorded).

        Args:
            **kwargs: passed to ``BaseComponent.to_dict``.

        Returns:
            The dictionary.
        """
        data = super().to_dict(**kwargs)
        data["layout_parser"] = self.layout_parser.to_dict(**kwargs)
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any], **kwargs: Any) -> "MarkdownFormatterParser":
        """The parser again, its layout parser from its own dictionary.

        Args:
            data: ``to_dict``'s dictionary.
            **kwargs: the parts (``llm=...``, ``layout_parser=...``) and settings to override.

        Returns:
            The parser.

        Raises:
            UnserializedPartError: a part that was set is not passed back.
        """
        nested = data.get("layout_parser")
        if isinstance(nested, dict) and "layout_parser" not in kwargs:
            kwargs["layout_parser"] = LayoutMarkdownParser.from_dict(nested)
        return super().from_dict(data, **kwargs)

    window_words: int = Field(
        default=2000,
        description=(
            "W: words per window (step W). 2000 words ≈ 2.7k tokens in and out: with the "
            "previous window's input and output and the padding a call stays near 9k "
            "tokens, far inside a gpt-4o-class context, and the answer well under its 16k "
            "output cap, where long answers start to get truncated."
        ),
    )
    padding_words: int = Field(
        default=200, description="K: words of context shown before and after each window."
    )
    max_retries: int = max_retries_field("a window after an LLM error or an unusable answer")
    retry_backoff_seconds: float = retry_backoff_field()
    timeout_seconds: Optional[float] = timeout_field(180.0)
    min_window_coverage: float = Field(
        default=0.85, description="Share of the window's words the answer must keep."
    )
    max_window_novelty: float = Field(
        default=0.15, description="Largest share of answer words that may be absent from the source."
    )
    min_document_coverage: float = Field(
        default=0.9, description="Warn (MarkdownCoverageWarning) when a document's coverage is lower."
    )
    num_workers: int = Field(
        default=4, description="Documents formatted concurrently (windows of one document are sequential)."
    )
    max_segment_chars: Optional[int] = Field(
        default=4000, ge=1,
        description="Sub-split longer segments (metadata kept, positions consecutive); None: whole chapters.",
    )
    tables_as_nodes: bool = Field(
        default=True, description="Give each Markdown table (with its title) its own node."
    )
    images_as_nodes: bool = images_as_nodes_field()
    fallback_to_layout: bool = Field(
        default=True,
        description=(
            "When a window's answer stays unusable after the retries, use the layout parser "
            "on that window (True) or raise LLMOutputError (False)."
        ),
    )
    layout_parser: LayoutMarkdownParser = Field(
        default_factory=LayoutMarkdownParser,
        description="The no-LLM parser: used when no LLM is set and for windows that fall back.",
    )

    _llm: Optional[LLM] = PrivateAttr(default=None)

    def __init__(self, llm: Optional[LLM] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Private: the LLM is not a field, so it stays out of IngestionPipeline's cache key
        # and serialisation, as in LlamaIndex's own LLM-driven node parsers.
        self._llm = resolve_llm(llm)

    def __getstate__(self) -> Dict[str, Any]:
        # LlamaIndex pickles a component as its fields and rebuilds it with __init__: the LLM,
        # private here, goes along as the constructor argument it was (a Ray or process
        # worker gets the LLM parser it was given, not a silent fall back to the layout parser).
        state = dict(super().__getstate__())
        state["__dict__"] = {**state["__dict__"], "llm": self._llm}
        return state

    @classmethod
    def class_name(cls) -> str:
        return "MarkdownFormatterParser"

    @property
    def llm(self) -> Optional[LLM]:
        return self._llm

    # --- LlamaIndex NodeParser API ------------------------------------------------------

    def _parse_nodes(
        self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any
    ) -> List[BaseNode]:
        if self._llm is None:
            return self._layout_only(nodes, show_progress)
        return asyncio_run(self._aparse_nodes(nodes, show_progress=show_progress, **kwargs))

    async def _aparse_nodes(
        self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any
    ) -> List[BaseNode]:
        if self._llm is None:
            return self._layout_only(nodes, show_progress)
        jobs = [self.aformat_document(as_document(doc)) for doc in self.source_documents(nodes).documents]
        results = await run_jobs(
            jobs, show_progress=show_progress, workers=self.num_workers,
            desc="Formatting documents as Markdown",
        )
        return [node for doc_nodes in results for node in doc_nodes]


    def _layout_only(self, nodes: Sequence[BaseNode], show_progress: bool) -> List[BaseNode]:
        parser = self.layout_parser.model_copy(
            update={"max_segment_chars": self.max_segment_chars, "read_source_files": self.read_source_files,
                    "tables_as_nodes": self.tables_as_nodes, "images_as_nodes": self.images_as_nodes}
        )
        return parser._parse_nodes(nodes, show_progress=show_progress)

    # --- one document -------------------------------------------------------------------

    def windows(self, text: str) -> List[_Window]:
        """The T = ceil(N / W) windows of a text, borders moved to the nearest line break.

        Args:
            text: the document's text.

        Returns:
            The windows, in order; none for an empty text.
        """
        spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
        n, w, k = len(spans), max(1, self.window_words), max(0, self.padding_words)
        if n == 0:
            return []
        t_count = math.ceil(n / w)
        borders = [0]
        for t in range(1, t_count):
            borders.append(self._snap(text, spans, t * w, max(1, min(k, w // 4))))
        borders.append(n)
        out = []
        for t in range(t_count):
            a, b = borders[t], borders[t + 1]
            start = 0 if t == 0 else spans[a][0]
            end = len(text) if t == t_count - 1 else spans[b][0]
            before = text[spans[max(0, a - k)][0] : start] if a > 0 and k else ""
            after = text[end : spans[min(n, b + k) - 1][1]] if b < n and k else ""
            out.append(_Window(t, start, end, before, after))
        return out

    @staticmethod
    def _snap(text: str, spans: List[Tuple[int, int]], idx: int, reach: int) -> int:
        """The word index near ``idx`` that starts a line (a paragraph preferred)."""
        best, best_score = idx, None
        for j in range(max(1, idx - reach), min(len(spans) - 1, idx + reach) + 1):
            gap = text[spans[j - 1][1] : spans[j][0]]
            if "\n" not in gap:
                continue
            score = (0 if "\n\n" in gap else 1, abs(j - idx))
            if best_score is None or score < best_score:
                best, best_score = j, score
        return best

    def _prompt(self, window: _Window, text: str, prev: Optional[_Result], reason: str) -> str:
        prompt = FORMAT_PROMPT.format(
            prev_input=text[prev.window.start : prev.window.end] if prev else NO_PREVIOUS,
            prev_output=prev.markdown if prev else NO_PREVIOUS,
            before=window.before or "(start of document)",
            window=text[window.start : window.end],
            after=window.after or "(end of document)",
        )
        return prompt + RETRY_NOTE.format(reason=reason) if reason else prompt

    async def _call(self, prompt: str) -> str:
        response = await with_timeout(self._llm.acomplete(prompt), self.timeout_seconds)
        return response.text or ""

    async def _format_window(self, window: _Window, text: str, prev: Optional[_Result]) -> _Result:
        source = text[window.start : window.end]
        result = _Result(window, source, PARSE_PATH_FALLBACK)
        if not source.strip():
            result.markdown, result.path = source, PARSE_PATH_LLM
            return result
        reason = ""
        for attempt in range(self.max_retries + 1):
            result.attempts = attempt + 1
            try:
                answer = clean_answer(await self._call(self._prompt(window, text, prev, reason)))
                if prev is not None and prev.path == PARSE_PATH_LLM:
                    # what the model repeats of its previous answer is not new text
                    answer = _trim_seam(prev.markdown, answer)
            except Exception as exc:  # any LLM/client error or timeout: retry with backoff
                reason = f"{type(exc).__name__}: {exc}"
                result.errors.append(reason)
                reason = ""  # an error is not the model's fault: no note in the next prompt
                delay = report_failed_attempt(f"formatting window {window.index}", LLMCallPolicy.of(self), attempt, exc)
                if delay:
                    await asyncio.sleep(delay)
                continue
            context = window.before + "\n" + window.after
            if prev is not None:
                context += "\n" + text[prev.window.start : prev.window.end]
            check = check_window(
                source, answer, min_coverage=self.min_window_coverage,
                max_novelty=self.max_window_novelty, context=context,
            )
            result.check = check
            if check.ok:
                result.markdown, result.path = answer, PARSE_PATH_LLM
                return result
            reason = check.reason
            result.errors.append(reason)
        if not self.fallback_to_layout:
            raise LLMOutputError(
                f"window {window.index} (chars {window.start}-{window.end}): no usable answer "
                f"after {result.attempts} attempts: {'; '.join(result.errors)}"
            )
        logger.warning(
            "window %d (chars %d-%d): LLM output unusable after %d attempts (%s); "
            "falling back to the layout parser",
            window.index, window.start, window.end, result.attempts, "; ".join(result.errors),
        )
        return result  # markdown = the window's own text, parsed by the layout parser

    async def aformat_document(self, doc: Document) -> List[TextNode]:
        """Format one document window by window (sequentially) and cut it into nodes.

        A window whose answer fails the checks falls back to [`LayoutMarkdownParser`][llama_index_hiqa.parsers.layout_markdown.LayoutMarkdownParser] on
        the window's own text (parse path ``"layout_fallback"``).

        Args:
            doc: the document.

        Returns:
            The segment nodes in order; none for a blank document.
        """
        text = doc.text
        if not text.strip():
            logger.warning("document %s is empty: no segments", doc.doc_id)
            return []
        results: List[_Result] = []
        prev: Optional[_Result] = None
        for window in self.windows(text):
            prev = await self._format_window(window, text, prev)
            results.append(prev)
        return self._nodes_from_results(doc, results)

    def format_document(self, doc: Document) -> List[TextNode]:
        """Synchronous [`aformat_document`][llama_index_hiqa.parsers.markdown_formatter.MarkdownFormatterParser.aformat_document]; the layout parser's nodes without an LLM.

        Args:
            doc: the document.

        Returns:
            The segment nodes in order.
        """
        if self._llm is None:
            return self.layout_parser.parse_document(doc)
        return asyncio_run(self.aformat_document(doc))

    # --- stitching and segments ----------------------------------------------------------

    def _nodes_from_results(self, doc: Document, results: List[_Result]) -> List[TextNode]:
        text = doc.text
        layout_marks: Optional[List[HeadingMark]] = None
        md_parts: List[str] = []
        # (md_offset, src_offset) anchors, and each part's md range / window / path
        anchors: List[Tuple[int, int]] = []
        parts: List[Tuple[int, int, _Result]] = []
        marks: List[HeadingMark] = []
        resolver = LevelResolver(min_style=1)
        md_len = 0
        prev_md = ""
        for res in results:
            piece_md = res.markdown
            joiner = ""
            if md_parts:
                joiner = "\n" if _ends_in_table(prev_md) and _starts_in_table(piece_md) else "\n\n"
            md_len += len(joiner)
            part_start = md_len
            md_parts.append(joiner + piece_md)
            md_len += len(piece_md)
            parts.append((part_start, md_len, res))
            src = text[res.window.start : res.window.end]
            if res.path == PARSE_PATH_FALLBACK:
                # identity mapping: the part is the window's own text
                anchors.append((part_start, res.window.start))
                if layout_marks is None:
                    layout_marks = self.layout_parser.detect_headings(text, doc.metadata)
                for m in layout_marks:
                    if res.window.start <= m.start < res.window.end:
                        off = part_start + m.start - res.window.start
                        marks.append(HeadingMark(off, off + m.end - m.start, m.number, m.title, m.level))
                        resolver.last = (m.level, 1, "decimal" if m.number else "none")
            else:
                anchors.extend(_align(piece_md, part_start, src, res.window.start))
                for h_start, h_end, hashes, body in markdown_headings(piece_md):
                    parsed = parse_heading_number(body)
                    level = resolver.level(parsed, hashes)
                    marks.append(HeadingMark(part_start + h_start, part_start + h_end,
                                             parsed.number, parsed.title, level))
            prev_md = piece_md
        markdown = "".join(md_parts)
        marks = drop_title_marks(marks, doc.metadata.get(schema.DOCUMENT_TITLE))
        anchors.sort()
        pieces = build_pieces(
            markdown, marks, max_chars=self.max_segment_chars,
            tables_as_nodes=self.tables_as_nodes,
        )
        # Source spans tile the document: each node starts where its first words are found
        # in the source (moved back to the start of that line) and ends where the next begins.
        starts = [0]
        for piece in pieces[1:]:
            starts.append(max(starts[-1], _to_source(piece.start, anchors, parts, text)))
        ends = starts[1:] + [len(text)]
        spans = {id(p): (s, e) for p, s, e in zip(pieces, starts, ends)}
        part_starts = [p[0] for p in parts]

        def path_of(piece: Any) -> str:
            # a node with any text from a fallback window says so
            first = max(0, bisect.bisect_right(part_starts, piece.start) - 1)
            last = max(0, bisect.bisect_left(part_starts, piece.end) - 1)
            paths = {parts[i][2].path for i in range(first, last + 1)}
            return PARSE_PATH_FALLBACK if PARSE_PATH_FALLBACK in paths else PARSE_PATH_LLM

        coverage = _coverage(text, markdown)
        if coverage < self.min_document_coverage:
            warnings.warn(
                f"document {schema.DOCUMENT_ID}={doc.metadata.get(schema.DOCUMENT_ID, doc.doc_id)}: "
                f"the Markdown keeps only {coverage:.0%} of the source's words",
                MarkdownCoverageWarning, stacklevel=2,
            )
        nodes = pieces_to_nodes(
            doc, pieces,
            node_text=lambda p: markdown[p.start : p.end],
            source_span=lambda p: spans[id(p)],
            parse_path=path_of,
            id_func=self.id_func,
            extra_metadata={schema.COVERAGE: round(coverage, 4)},
        )
        return with_figure_nodes(doc, nodes, self.id_func) if self.images_as_nodes else nodes


def _coverage(source: str, markdown: str) -> float:
    src = Counter(_words(source))
    if not src:
        return 1.0
    out = Counter(_words(markdown))
    return sum(min(c, out[w]) for w, c in src.items()) / sum(src.values())


def _align(md: str, md_base: int, src: str, src_base: int) -> List[Tuple[int, int]]:
    """Anchors (md offset, source offset) of the words the answer shares with its source,
    found by a monotone alignment (difflib) of the two word sequences."""
    md_words = [(m.group().lower(), m.start()) for m in _WORD_RE.finditer(md)]
    src_words = [(m.group().lower(), m.start()) for m in _WORD_RE.finditer(src)]
    matcher = difflib.SequenceMatcher(
        None, [w for w, _ in md_words], [w for w, _ in src_words], autojunk=False
    )
    anchors = [(md_base, src_base)]
    for a, b, size in matcher.get_matching_blocks():
        for i in range(size):
            anchors.append((md_base + md_words[a + i][1], src_base + src_words[b + i][1]))
    return anchors


def _to_source(md_pos: int, anchors: List[Tuple[int, int]], parts, text: str) -> int:
    """Source offset of the Markdown position ``md_pos``: inside a fallback part the text is
    the source itself; inside an LLM part, the first aligned word at or after ``md_pos``.
    The result is moved back to the start of its line (a heading starts a line)."""
    part = next((p for p in parts if p[0] <= md_pos <= p[1]), parts[-1])
    part_start, part_end, res = part
    w_start, w_end = res.window.start, res.window.end
    if res.path == PARSE_PATH_FALLBACK:
        src = w_start + (md_pos - part_start)
    else:
        idx = bisect.bisect_left(anchors, (md_pos, -1))
        src = anchors[idx][1] if idx < len(anchors) and anchors[idx][0] <= part_end else w_end
    src = min(max(src, w_start), w_end)
    return max(text.rfind("\n", w_start, src) + 1, w_start)


def _ends_in_table(md: str) -> bool:
    lines = md.rstrip().split("\n")
    return bool(lines) and bool(_TABLE_ROW_RE.match(lines[-1]))


def _starts_in_table(md: str) -> bool:
    lines = md.lstrip().split("\n")
    return bool(lines) and bool(_TABLE_ROW_RE.match(lines[0]))


def _trim_seam(prev: str, cur: str) -> str:
    """Remove what an answer repeats of the previous one at the seam: leading lines equal
    to the previous answer's last lines, and a table header row repeated when a table
    continues across the seam."""
    prev_lines = [ln.strip() for ln in prev.rstrip().split("\n")]
    cur_lines = cur.lstrip("\n").split("\n")
    for n in range(min(8, len(prev_lines), len(cur_lines)), 0, -1):
        if [ln.strip() for ln in cur_lines[:n]] == prev_lines[-n:] and any(prev_lines[-n:]):
            cur_lines = cur_lines[n:]
            break
    if _TABLE_ROW_RE.match(prev_lines[-1] if prev_lines else "") and len(cur_lines) >= 2:
        header = _last_table_header(prev_lines)
        if header and cur_lines[0].strip() == header and _TABLE_SEP_RE.match(cur_lines[1]):
            cur_lines = cur_lines[2:]
    return "\n".join(cur_lines)


def _last_table_header(lines: List[str]) -> Optional[str]:
    i = len(lines) - 1
    while i > 0 and _TABLE_ROW_RE.match(lines[i - 1]):
        i -= 1
    return lines[i] if _TABLE_ROW_RE.match(lines[i]) else None
