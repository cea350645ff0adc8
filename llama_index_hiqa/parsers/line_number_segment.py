"""LineNumberSegmentParser: LLM sectioning by line numbers that never loses a line.

TextRAG Part 1, "Context Segmentation" (Pei Ma's TextRAG blog post (2024)): the document is split
into numbered lines, an LLM says where the topics change by line number, and the answer is
validated and repaired so that the sections cover every line exactly once. The public
reference of the idea is dsRAG's semantic sectioning; this module is an independent
implementation for LlamaIndex with three differences:

* windows of a long document run **concurrently** (bounded, LlamaIndex ``run_jobs``) instead
  of one after the other; each window also sees the tail of the previous window as read-only
  context, and says whether its first section continues it, so sections cut by a window
  edge are joined again at the seam;
* the answer is structured output through LlamaIndex's ``structured_predict`` with a pydantic
  model, so any LlamaIndex LLM works (function calling or plain text completion);
* the repair is total: whatever the LLM returns (unsorted, overlapping, out of range, empty,
  invalid JSON, an exception, a timeout) the sections partition the lines exactly, and
  joining the section texts gives back ``Document.text`` character for character.

Output nodes carry the shared schema facts (``schema.set_segment_facts``): document id and
title, consecutive positions, character span, heading path ``[["", section title, 1]]``,
pages when the document has ``schema.PAGE_SPANS``, and ``PARSE_PATH`` ``"llm"`` (or
``"text"`` when no LLM answer was used). Sections can then be cut into chunks (default
about 800 characters, no overlap) that keep their section and consecutive positions, the
unit that segment integration (TextRAG Parts 3-4) merges back.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple

from llama_index.core.async_utils import asyncio_run, run_jobs
from llama_index.core.bridge.pydantic import BaseModel, Field, PrivateAttr, field_validator
from llama_index.core.llms import LLM
from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import BaseNode, NodeRelationship, TextNode

from llama_index_hiqa.component_dict import PartsRoundTrip
from llama_index_hiqa import schema
from llama_index_hiqa.figures import images_as_nodes_field, with_figure_nodes
from llama_index_hiqa.models.defaults import resolve_llm
from llama_index_hiqa.errors import LLMOutputError
from llama_index_hiqa.models.llm_calls import LLMCallPolicy, acall_llm, max_retries_field, retry_backoff_field, timeout_field
from llama_index_hiqa.page_geometry import pages_for_span
from llama_index_hiqa.parsers._markdown_segments import SegmentNodeParser

logger = logging.getLogger(__name__)

# The paper's prompt (TextRAG Part 1), adapted to windows: line numbers are global, the
# window may be an excerpt, and the tail of the previous window is shown as context only.
SECTIONING_PROMPT = """\
**Task: Structured Document Creation**

You are provided with an excerpt of a document in which every line starts with its line \
number in square brackets. Divide the excerpt into sections. Each section should focus on a \
single topic or concept.

**Document Division:**
- Divide the excerpt into sections based on its content. Each section should discuss a single \
topic or concept.
- The sections should align as closely as possible with the document's natural divisions, \
such as "Introduction", "Background", "Discussion", "Conclusion", etc.
- A section is normally several paragraphs long; do not make a section of a single short line.

**Line Number Annotation:**
- For each section, give start_index, the number of its first line, and end_index, the number \
of its last line, exactly as written in the square brackets.
- The first section must start at line {first_line}; the last section must end at line \
{last_line}. Sections must not overlap and must leave no gaps.

**Section Titles:**
- Give each section a concise, descriptive title, so that a reader grasps its content from \
the title alone; optionally add a one-sentence summary.

**Judgment and Flexibility:**
- This excerpt may be part of a larger document: do not assume that its first line is an \
"Introduction" or its last line a "Conclusion".
- Set continues_previous to true when the first line of the excerpt continues the topic of \
the PRECEDING CONTEXT below (which is not part of the excerpt and must not be sectioned).

PRECEDING CONTEXT (for reference only):
{preceding_context}

DOCUMENT EXCERPT (lines {first_line} to {last_line}):
{document_lines}
"""

NO_PRECEDING_CONTEXT = "(none: the excerpt starts at the beginning of the document)"

# Characters that str.splitlines() treats as line ends; stripped from the numbered view only.
_LINE_ENDS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


class SectionAnswer(BaseModel):
    """One section of the LLM's answer (paper: title, start_index, end_index, summary)."""

    title: Optional[str] = Field(
        default=None, description="Concise, descriptive title of the section."
    )
    start_index: int = Field(description="Line number of the first line of the section.")
    end_index: Optional[int] = Field(
        default=None, description="Line number of the last line of the section."
    )
    summary: Optional[str] = Field(
        default=None, description="Optional one-sentence summary of the section."
    )

    @field_validator("start_index", "end_index", mode="before")
    @classmethod
    def _line_number(cls, value: Any) -> Any:
        # LLMs often echo the label as shown ("[12]") or as a string; read the number.
        if isinstance(value, str):
            match = re.fullmatch(r"\s*\[?\s*(-?\d+)\s*\]?\s*", value)
            if match:
                return int(match.group(1))
        return value


class SectionedWindow(BaseModel):
    """The LLM's structured answer for one window of numbered lines."""

    continues_previous: bool = Field(
        default=False,
        description="True when the first line continues the topic of the preceding context.",
    )
    sections: List[SectionAnswer] = Field(
        description="Sections covering every line of the excerpt, in order."
    )


@dataclass
class Section:
    """A repaired section: the half-open line range ``[start, end)`` and its title."""

    start: int
    end: int
    title: str
    summary: Optional[str] = None
    from_llm: bool = True


@dataclass
class _Window:
    doc_index: int
    lo: int  # first line (global number)
    hi: int  # one past the last line
    prompt_lines: str
    preceding: str


# --- lines --------------------------------------------------------------------------------


def split_lines(text: str, max_line_chars: int = 200) -> List[Tuple[int, int]]:
    """Character spans ``(start, end)`` of the numbered lines; they partition ``text``.

    Lines keep their line ending; lines longer than ``max_line_chars`` are wrapped at the
    last whitespace of the second half of the limit (hard cut when there is none), so the
    LLM can cut inside long paragraphs.

    Args:
        text: the document's text.
        max_line_chars: the longest numbered line, in characters (at least 2).

    Returns:
        The spans, in order.
    """
    spans: List[Tuple[int, int]] = []
    pos = 0
    limit = max(2, int(max_line_chars))
    for raw in text.splitlines(keepends=True):
        end = pos + len(raw)
        while end - pos > limit:
            cut = _wrap_point(text, pos, pos + limit)
            spans.append((pos, cut))
            pos = cut
        spans.append((pos, end))
        pos = end
    return spans


def _wrap_point(text: str, start: int, limit: int) -> int:
    """Cut after the last whitespace in ``text[start + half : limit]``, else at ``limit``."""
    floor = start + (limit - start) // 2
    for i in range(limit - 1, floor - 1, -1):
        if text[i].isspace():
            return i + 1
    return limit


def _line_view(text: str, span: Tuple[int, int]) -> str:
    return text[span[0] : span[1]].rstrip(_LINE_ENDS)


def number_lines(text: str, spans: Sequence[Tuple[int, int]], lo: int, hi: int) -> str:
    """The LLM's view of lines ``lo..hi-1``: ``[i] line`` per line.

    Args:
        text: the document's text.
        spans: its line spans ([`split_lines`][llama_index_hiqa.parsers.line_number_segment.split_lines]).
        lo: the first line shown.
        hi: the line after the last one shown.

    Returns:
        The numbered lines joined by newlines.
    """
    return "\n".join(f"[{i}] {_line_view(text, spans[i])}" for i in range(lo, hi))


# --- validation and repair ----------------------------------------------------------------


def _clean_title(title: Any, lo: int, hi: int) -> str:
    text = " ".join(str(title or "").split())[:200]
    return text or line_range_title(lo, hi)


def line_range_title(lo: int, hi: int) -> str:
    """Title of a section nobody named: its line range (inclusive, as the LLM saw it).

    Args:
        lo: the section's first line.
        hi: the line after its last.

    Returns:
        ``"Lines lo-last"``.
    """
    return f"Lines {lo}-{max(lo, hi - 1)}"


def repair_sections(answers: Sequence[SectionAnswer], lo: int, hi: int) -> List[Section]:
    """Sections that partition ``[lo, hi)`` exactly, from any list of LLM sections.

    Start lines are clamped to the window and sorted; duplicates keep the first title; the
    first section is forced to start at ``lo``; every section ends where the next begins.
    That cuts overlaps and gives a gap to its preceding neighbour (the text continues the
    topic until a new one starts). End lines are advisory: a start line is the one fact an
    LLM gets right most often, and a partition is fully defined by its starts.

    Args:
        answers: the LLM's sections for the window.
        lo: the window's first line.
        hi: the line after its last.

    Returns:
        The sections, in order; one section named by its line range when the LLM gave none;
            empty for an empty window.
    """
    if hi <= lo:
        return []
    starts: Dict[int, SectionAnswer] = {}
    for answer in sorted(answers, key=lambda a: min(max(int(a.start_index), lo), hi - 1)):
        start = min(max(int(answer.start_index), lo), hi - 1)
        starts.setdefault(start, answer)
    if not starts:
        return [Section(lo, hi, line_range_title(lo, hi), from_llm=False)]
    ordered = sorted(starts.items())
    ordered[0] = (lo, ordered[0][1])
    sections = []
    for k, (start, answer) in enumerate(ordered):
        end = ordered[k + 1][0] if k + 1 < len(ordered) else hi
        summary = " ".join(str(answer.summary).split()) if answer.summary else None
        sections.append(Section(start, end, _clean_title(answer.title, start, end), summary))
    return sections


def merge_short_sections(
    sections: List[Section], spans: Sequence[Tuple[int, int]], min_chars: int
) -> List[Section]:
    """Over-sectioning guard: merge sections shorter than ``min_chars`` into a neighbour.

    A short section is usually a heading or a one-line lead-in, so it joins the section
    after it; the last section joins the one before. The merged section keeps the title of
    the longer part.

    Args:
        sections: the sections, partitioning the lines.
        spans: the line spans ([`split_lines`][llama_index_hiqa.parsers.line_number_segment.split_lines]).
        min_chars: the shortest section kept on its own, in characters.

    Returns:
        The sections, still a partition.
    """
    out = list(sections)

    def length(sec: Section) -> int:
        return spans[sec.end - 1][1] - spans[sec.start][0]

    i = 0
    while len(out) > 1 and i < len(out):
        if length(out[i]) >= min_chars:
            i += 1
            continue
        j = i + 1 if i + 1 < len(out) else i - 1
        a, b = (out[i], out[j]) if i < j else (out[j], out[i])
        keep = a if length(a) >= length(b) else b
        merged = replace(keep, start=a.start, end=b.end, from_llm=a.from_llm or b.from_llm)
        lo_idx = min(i, j)
        out[lo_idx : lo_idx + 2] = [merged]
        i = lo_idx
    return out


def _same_title(a: str, b: str) -> bool:
    norm = lambda s: re.sub(r"[^a-z0-9]+", " ", s.lower()).strip()  # noqa: E731
    return bool(norm(a)) and norm(a) == norm(b)


def join_windows(
    windows: Sequence[Tuple[List[Section], Optional[SectionedWindow]]],
) -> List[Section]:
    """Concatenate the windows' sections, joining a section cut by a window edge.

    A seam is joined when the later window says its first section continues the preceding
    context, or when both sides carry the same title.

    Args:
        windows: each window's repaired sections with the LLM's answer (``None`` when the
            window failed), in order.

    Returns:
        The document's sections, in order.
    """
    out: List[Section] = []
    for sections, answer in windows:
        if not sections:
            continue
        first = sections[0]
        if out and first.from_llm and out[-1].from_llm and (
            (answer is not None and answer.continues_previous)
            or _same_title(out[-1].title, first.title)
        ):
            out[-1] = replace(out[-1], end=first.end)
            sections = sections[1:]
        out.extend(sections)
    return out


def check_partition(sections: Sequence[Section], n_lines: int) -> None:
    """Check that ``sections`` cover ``[0, n_lines)`` exactly once.

    Args:
        sections: the sections, in order.
        n_lines: the document's number of lines.

    Raises:
        AssertionError: a gap, an overlap, an empty section or a wrong end.
    """
    expected = 0
    for sec in sections:
        if sec.start != expected or sec.end <= sec.start:
            raise AssertionError(f"sections do not partition the lines at {sec}")
        expected = sec.end
    if expected != n_lines:
        raise AssertionError(f"sections end at line {expected}, document has {n_lines}")


def chunk_section(
    spans: Sequence[Tuple[int, int]],
    section: Section,
    chunk_chars: int,
    text: Optional[str] = None,
) -> List[Tuple[int, int]]:
    """Character spans of the section's chunks: whole lines packed up to ``chunk_chars``.

    A chunk ends preferably after a real line end (not a wrap point inside a paragraph)
    when one lies in its second half, so chunks rarely start mid-sentence.

    Args:
        spans: the line spans ([`split_lines`][llama_index_hiqa.parsers.line_number_segment.split_lines]).
        section: the section to chunk.
        chunk_chars: the longest chunk, in characters (a single longer line is one chunk).
        text: the document's text, to tell real line ends from wrap points; ``None`` treats
            every line end alike.

    Returns:
        The chunks' ``(start, end)``, tiling the section.
    """
    chunks: List[Tuple[int, int]] = []
    start = spans[section.start][0]
    end = start
    last_break = -1  # end of the last line in this chunk that ends with a line break
    for i in range(section.start, section.end):
        s, e = spans[i]
        if e - start > chunk_chars and end > start:
            cut = last_break if last_break - start >= chunk_chars // 2 else end
            chunks.append((start, cut))
            start = cut
            last_break = -1
        end = e
        if text is not None and e > s and text[e - 1] in _LINE_ENDS:
            last_break = e
    chunks.append((start, end))
    return chunks


# --- the parser ---------------------------------------------------------------------------


class LineNumberSegmentParser(PartsRoundTrip, SegmentNodeParser):
    """One node per semantic section (or per chunk of a section), sectioned by an LLM.

    >>> parser = LineNumberSegmentParser(llm=llm)              # any LlamaIndex LLM
    >>> nodes = parser.get_nodes_from_documents(documents)     # or in an IngestionPipeline
    """

    part_names: ClassVar[Tuple[str, ...]] = ("llm",)  # not serialised: component_dict

    llm: Optional[LLM] = Field(
        default=None, exclude=True, description="LLM that sections; None: Settings.llm."
    )
    max_line_chars: int = Field(
        default=200, description="Lines longer than this are wrapped so the LLM can cut inside."
    )
    window_chars: int = Field(
        default=20_000,
        description="Characters of numbered lines per LLM call (paper/dsRAG: about 20k).",
    )
    context_chars: int = Field(
        default=600, description="Tail of the previous window shown as read-only context."
    )
    min_chars_for_llm: int = Field(
        default=2_000, description="Shorter documents are one section, without an LLM call."
    )
    min_section_chars: int = Field(
        default=300, description="Over-sectioning guard: shorter sections are merged."
    )
    chunk_chars: Optional[int] = Field(
        default=800,
        description="Cut sections into chunks of about this many characters (no overlap); "
        "None keeps one node per section.",
    )
    num_workers: int = Field(default=4, description="Windows sectioned concurrently.")
    max_retries: int = max_retries_field("a failing window")
    retry_backoff_seconds: float = retry_backoff_field()
    timeout_seconds: Optional[float] = timeout_field(120.0)
    images_as_nodes: bool = images_as_nodes_field()
    keep_section_summaries: bool = Field(
        default=False,
        description="Write the LLM's optional one-line section summaries to "
        "schema.SECTION_SUMMARY (shown in the embedding view).",
    )

    _failed_windows: int = PrivateAttr(default=0)

    @classmethod
    def class_name(cls) -> str:
        return "LineNumberSegmentParser"

    @property
    def failed_windows(self) -> int:
        """Windows of the last run that fell back to one section titled by its line range."""
        return self._failed_windows

    # -- LlamaIndex entry points -----------------------------------------------------------

    def _parse_nodes(
        self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any
    ) -> List[BaseNode]:
        return asyncio_run(self._aparse_nodes(nodes, show_progress=show_progress, **kwargs))

    async def _aparse_nodes(
        self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any
    ) -> List[BaseNode]:
        docs = self.source_documents(nodes).documents
        sections = await self.asection_documents(docs, show_progress=show_progress)
        out: List[BaseNode] = []
        for doc, secs in zip(docs, sections):
            out.extend(self._build_nodes(doc, secs))
        return out


    # -- sectioning -------------------------------------------------------------------------

    def section_documents(self, documents: Sequence[BaseNode]) -> List[List[Section]]:
        """The repaired sections of every document (line ranges over ``split_lines``).

        Args:
            documents: the documents.

        Returns:
            One list of sections a document, each a partition of its lines.
        """
        return asyncio_run(self.asection_documents(documents))

    async def asection_documents(
        self, documents: Sequence[BaseNode], show_progress: bool = False
    ) -> List[List[Section]]:
        """Async [`section_documents`][llama_index_hiqa.parsers.line_number_segment.LineNumberSegmentParser.section_documents]: the LLM's windows run concurrently.

        A document too short for the LLM (or with no LLM) is one section; a window whose answer
        failed is one section named by its line range.

        Args:
            documents: the documents.
            show_progress: whether to show a progress bar over the windows.

        Returns:
            One list of sections a document, each a partition of its lines.
        """
        llm = resolve_llm(self.llm)
        self._failed_windows = 0
        texts = [doc.get_content() for doc in documents]
        spans = [split_lines(t, self.max_line_chars) for t in texts]
        windows: List[_Window] = []
        for d, (text, sp) in enumerate(zip(texts, spans)):
            if llm is not None and len(text) >= self.min_chars_for_llm and len(sp) > 1:
                windows.extend(self._windows(d, text, sp))
        answers: List[Optional[SectionedWindow]] = []
        if windows:
            jobs = [self._asection_window(llm, w) for w in windows]
            answers = await run_jobs(
                jobs, show_progress=show_progress, workers=max(1, self.num_workers),
                desc="Sectioning windows",
            )
        per_doc: Dict[int, List[Tuple[_Window, Optional[SectionedWindow]]]] = {}
        for w, a in zip(windows, answers):
            per_doc.setdefault(w.doc_index, []).append((w, a))

        result: List[List[Section]] = []
        for d, (text, sp) in enumerate(zip(texts, spans)):
            if not sp:
                result.append([])
                continue
            if d not in per_doc:
                result.append([Section(0, len(sp), "", from_llm=False)])
                continue
            repaired = []
            for w, a in per_doc[d]:
                if a is None:
                    self._failed_windows += 1
                    secs = [Section(w.lo, w.hi, line_range_title(w.lo, w.hi), from_llm=False)]
                else:
                    secs = merge_short_sections(
                        repair_sections(a.sections, w.lo, w.hi), sp, self.min_section_chars
                    )
                repaired.append((secs, a))
            secs = merge_short_sections(join_windows(repaired), sp, self.min_section_chars)
            check_partition(secs, len(sp))  # cannot fail by construction; cheap to prove
            result.append(secs)
        return result

    def _windows(self, d: int, text: str, spans: List[Tuple[int, int]]) -> List[_Window]:
        out: List[_Window] = []
        lo = 0
        while lo < len(spans):
            hi, size = lo, 0
            while hi < len(spans) and (hi == lo or size + spans[hi][1] - spans[hi][0] + 8 <= self.window_chars):
                size += spans[hi][1] - spans[hi][0] + 8  # "[1234] " prefix and newline
                hi += 1
            preceding = NO_PRECEDING_CONTEXT
            if lo > 0:
                tail = text[max(0, spans[lo][0] - self.context_chars) : spans[lo][0]]
                preceding = "..." + tail if spans[lo][0] > self.context_chars else tail
            out.append(_Window(d, lo, hi, number_lines(text, spans, lo, hi), preceding))
            lo = hi
        return out

    async def _asection_window(self, llm: LLM, w: _Window) -> Optional[SectionedWindow]:
        """The window's validated answer, or ``None`` once every retry failed."""
        prompt = PromptTemplate(SECTIONING_PROMPT)

        async def ask() -> SectionedWindow:  # bad JSON, schema or no sections: retried
            answer = await llm.astructured_predict(
                SectionedWindow,
                prompt,
                first_line=str(w.lo),
                last_line=str(w.hi - 1),
                preceding_context=w.preceding,
                document_lines=w.prompt_lines,
            )
            if not isinstance(answer, SectionedWindow) or not answer.sections:
                raise LLMOutputError("the LLM returned no sections")
            return answer

        return await acall_llm(
            ask, what=f"sectioning lines {w.lo}-{w.hi - 1}", instead="kept as one section",
            fallback=lambda _error: None,
            policy=LLMCallPolicy.of(self),
        )

    # -- nodes ------------------------------------------------------------------------------

    def _build_nodes(self, doc: BaseNode, sections: List[Section]) -> List[TextNode]:
        text = doc.get_content()
        if not sections:
            logger.warning("document %s has no text; no nodes", doc.node_id)
            return []
        spans = split_lines(text, self.max_line_chars)
        doc_id = schema.get_document_id(doc) or doc.node_id
        # Only a real title; the context header transform asks the LLM for one when empty.
        doc_title = str(doc.metadata.get(schema.DOCUMENT_TITLE) or "")
        page_spans = schema.page_spans_of(doc.metadata)
        source = schema.source_node_info(doc)  # hashes the whole text: once per document
        nodes: List[TextNode] = []
        for sec in sections:
            title = sec.title or doc_title or line_range_title(sec.start, sec.end)
            if self.chunk_chars:
                pieces = chunk_section(spans, sec, self.chunk_chars, text)
            else:
                pieces = [(spans[sec.start][0], spans[sec.end - 1][1])]
            for start, end in pieces:
                node = TextNode(
                    text=text[start:end],
                    metadata=dict(doc.metadata) if self.include_metadata else {},
                    **schema.view_settings(doc),
                    start_char_idx=start,
                    end_char_idx=end,
                )
                node.id_ = self.id_func(len(nodes), doc)
                node.relationships[NodeRelationship.SOURCE] = source
                page_range = pages_for_span(page_spans, start, end) if page_spans else None
                schema.set_segment_facts(
                    node,
                    document_id=str(doc_id),
                    document_title=doc_title,
                    position=len(nodes),
                    char_span=(start, end),
                    heading_path=[["", title, 1]],
                    page_range=page_range,
                    parse_path="llm" if sec.from_llm else "text",
                )
                if self.keep_section_summaries and sec.summary:
                    node.metadata[schema.SECTION_SUMMARY] = _as_section_summary(sec.summary)
                    schema.apply_header_format(node)
                nodes.append(node)
        return with_figure_nodes(doc, nodes, self.id_func) if self.images_as_nodes else nodes


def _as_section_summary(summary: str) -> str:
    prefix = "This section is about: "
    return summary if summary.lower().startswith(prefix.lower()) else prefix + summary
