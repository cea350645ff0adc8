"""ContextHeaderTransform: LLM document title, document summary and section summaries.

TextRAG Part 2, "Context Generation" (Pei Ma's TextRAG blog post (2024); dsRAG calls it
AutoContext): a chunk embedded alone ("Revenue rose 4%") does not say which document or
section it comes from; a short header does. This transform asks an LLM, once per document,
for

* a document title, from the first few thousand tokens, used only when the document has
  none (written to ``schema.DOCUMENT_TITLE``, the root of the heading cascade);
* a one-sentence document summary, "This document is about: ..." (``schema.DOCUMENT_SUMMARY``);
* optionally, once per section, "This section is about: ..." (``schema.SECTION_SUMMARY``).

The header format (shared with ``CascadingMetadataTransform``, which writes
``schema.HEADING_CASCADE``): the view keys are made visible in the embedding view (removed
from ``excluded_embed_metadata_keys``) and rendered by LlamaIndex's own
``metadata_template`` / ``metadata_separator`` as one line each, value only, in the order of
``schema.VIEW_KEYS``::

    Doc title > 2 Features > 2.3 Timing        <- heading_cascade (CascadingMetadataTransform)
    This document is about: ...                <- document_summary
    This section is about: ...                 <- section_summary

    <node.text, never rewritten>

How this differs from LlamaIndex's ``DocumentContextExtractor`` (Anthropic's "contextual
retrieval"): that extractor makes one LLM call per **chunk**, sending the whole document
each time, and writes a free-form "situate this chunk" text under its own key (``"context"``).
This transform makes one call per **document** (title, summary) and optionally one per
**section** (not per chunk: chunks of one section share it), so its cost grows with
documents and sections, not chunks. Both can run in one ``IngestionPipeline``: their keys
differ and each leaves the other's alone.

Results are cached by content hash (in memory and in ``HIQA_CACHE_DIR``/
``context_headers.sqlite``), so re-ingesting a document makes no LLM call; running the
transform twice never duplicates the header (it is metadata, written by key).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple

from llama_index.core.async_utils import asyncio_run, run_jobs
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms import LLM
from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import BaseNode, MetadataMode, TransformComponent

from llama_index_hiqa.component_dict import PartsRoundTrip
from llama_index_hiqa import schema
from llama_index_hiqa.models.defaults import resolve_llm
from llama_index_hiqa.models.embedding_cache import content_hash, default_cache_dir
from llama_index_hiqa.errors import LLMOutputError
from llama_index_hiqa.models.llm_calls import LLMCallPolicy, acall_llm, max_retries_field, retry_backoff_field, timeout_field

logger = logging.getLogger(__name__)

# Prompts of the paper (TextRAG Part 2), verbatim apart from the guidance placeholders.
DOCUMENT_TITLE_PROMPT = """\
INSTRUCTIONS
Please provide the title of the document based on the content provided below.

IMPORTANT:
- Your response must ONLY be the title of the document.
- Do NOT include any additional text, explanations, or comments.

{document_title_guidance}

{truncation_message}

DOCUMENT CONTENT:
{document_text}
"""

DOCUMENT_SUMMARIZATION_PROMPT = """\
INSTRUCTIONS
Please summarize the content of the document in a single, concise sentence.

IMPORTANT:
- Your summary should begin with: "This document is about: "
- The sentence should be clear and to the point, covering the main topic of the document.
- Do NOT add any additional information or context beyond the main topic.

Example Summaries:
- For a history book titled "A People's History of the United States," you might say: \
"This document is about: the history of the United States, covering the period from 1776 \
to the present day."
- For the 2023 Form 10-K of Apple Inc., you might say: "This document is about: the \
financial performance and operations of Apple Inc. during the fiscal year 2023."

{document_summarization_guidance}

{truncation_message}

DOCUMENT TITLE: {document_title}

DOCUMENT CONTENT:
{document_text}
"""

SECTION_SUMMARIZATION_PROMPT = """\
INSTRUCTIONS
Please summarize the content of the following section in a single, concise sentence.

IMPORTANT:
- Your summary should begin with: "This section is about: "
- The sentence should clearly describe the main topic or purpose of this section.
- Do NOT add any additional information or context beyond the main topic of the section.

Example Summary:
- For a balance sheet section of a financial report on Apple, you might say: "This section \
is about: the financial position of Apple as of the end of the fiscal year."
- For a chapter on the Civil War in a history book, you might say: "This section is about: \
the causes and consequences of the American Civil War."

{section_summarization_guidance}

SECTION TITLE: {section_title}

DOCUMENT TITLE: {document_title}

SECTION CONTENT:
{section_text}
"""

TRUNCATION_MESSAGE = (
    "Also note that the document text provided below is just the first ~{n} characters of "
    "the document. That should be plenty for this task. Your response should still pertain "
    "to the entire document, not just the text provided below."
)

DOCUMENT_SUMMARY_PREFIX = "This document is about: "
SECTION_SUMMARY_PREFIX = "This section is about: "


def _one_line(text: str, prefix: Optional[str] = None, max_chars: int = 600) -> str:
    """First non-empty line of an LLM answer, unquoted; ``prefix`` enforced if given."""
    lines = [ln.strip() for ln in str(text or "").strip().splitlines() if ln.strip()]
    if not lines:
        raise LLMOutputError("the LLM returned an empty answer")
    line = lines[0]
    if prefix:
        # Models often answer with the prefix on its own line, or with a quoted sentence.
        joined = " ".join(lines) if line.rstrip(":").lower() == prefix.strip().rstrip(":").lower() else line
        line = _unquote(joined)
        body = line[len(prefix) :] if line.lower().startswith(prefix.lower()) else line
        body = body.strip()
        if not body:
            raise LLMOutputError("the LLM returned a summary prefix without a summary")
        line = prefix + body
    else:
        line = _unquote(line.strip("*# "))
        if line.lower().startswith("title:"):
            line = line[len("title:") :].strip()
        if not line:
            raise LLMOutputError("the LLM returned an empty title")
    return line[:max_chars]


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    return text


class _HeaderCache:
    """Answers by key, in memory and in one SQLite file shared by processes."""

    def __init__(self, path: Optional[Path]) -> None:
        self._mem: Dict[str, str] = {}
        self._lock = threading.Lock()
        self._conn: Optional[sqlite3.Connection] = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS headers (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            self._conn.commit()

    def get(self, key: str) -> Optional[str]:
        with self._lock:
            if key in self._mem:
                return self._mem[key]
            if self._conn is not None:
                row = self._conn.execute("SELECT value FROM headers WHERE key=?", (key,)).fetchone()
                if row:
                    self._mem[key] = row[0]
                    return row[0]
        return None

    def put(self, key: str, value: str) -> None:
        with self._lock:
            self._mem[key] = value
            if self._conn is not None:
                self._conn.execute(
                    "INSERT OR REPLACE INTO headers (key, value) VALUES (?, ?)", (key, value)
                )
                self._conn.commit()


class ContextHeaderTransform(PartsRoundTrip, TransformComponent):
    """Adds an LLM document title/summary and section summaries to the embedding view.

    >>> pipeline = IngestionPipeline(transformations=[
    ...     LineNumberSegmentParser(llm=llm), ContextHeaderTransform(llm=llm), embed_model])
    """

    part_names: ClassVar[Tuple[str, ...]] = ("llm",)  # not serialised: component_dict

    llm: Optional[LLM] = Field(
        default=None, exclude=True, description="LLM that writes the header; None: Settings.llm."
    )
    generate_title: bool = Field(
        default=True, description="Ask the LLM for a title when the document has none."
    )
    document_summary: bool = Field(
        default=True, description='Add "This document is about: ..." to every node.'
    )
    section_summaries: bool = Field(
        default=False, description='Add "This section is about: ..." (one LLM call per section).'
    )
    max_document_chars: int = Field(
        default=16_000,
        description="Characters of the document start sent for title and summary "
        "(paper: the first few thousand tokens).",
    )
    max_section_chars: int = Field(
        default=12_000, description="Characters of a section sent for its summary."
    )
    document_title_guidance: str = Field(default="", description="Extra title instructions.")
    document_summarization_guidance: str = Field(
        default="", description="Extra instructions for the document summary."
    )
    section_summarization_guidance: str = Field(
        default="", description="Extra instructions for section summaries."
    )
    show_to_llm: bool = Field(
        default=True, description="Also show the header in the LLM view (MetadataMode.LLM)."
    )
    num_workers: int = Field(default=4, description="LLM calls run concurrently.")
    max_retries: int = max_retries_field()
    retry_backoff_seconds: float = retry_backoff_field()
    timeout_seconds: Optional[float] = timeout_field(60.0)
    use_cache: bool = Field(
        default=True, description="Cache answers by content hash on disk (HIQA_CACHE_DIR)."
    )
    cache_path: Optional[str] = Field(
        default=None, description="SQLite cache file; None: HIQA_CACHE_DIR/context_headers.sqlite."
    )

    _cache: Optional[_HeaderCache] = PrivateAttr(default=None)
    _failures: int = PrivateAttr(default=0)

    @classmethod
    def class_name(cls) -> str:
        return "ContextHeaderTransform"

    @property
    def failures(self) -> int:
        """LLM calls of the last run that failed after all retries (that header left out)."""
        return self._failures

    # -- entry points -----------------------------------------------------------------------

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> List[BaseNode]:
        return asyncio_run(self.acall(nodes, **kwargs))

    async def acall(self, nodes: Sequence[BaseNode], **kwargs: Any) -> List[BaseNode]:
        """Add the document title, document summary and section summaries to every node.

        Per document first (its title when missing, then the summary that names it), then per
        section, the LLM calls running concurrently. A call that fails after all retries leaves
        its header out (counted in [`failures`][llama_index_hiqa.transforms.context_header.ContextHeaderTransform.failures]). Without an LLM the nodes are returned
        unchanged, with a warning.

        Args:
            nodes: the segment nodes (changed in place).
            **kwargs: ``show_progress`` (bool) shows progress bars; other keys are ignored.

        Returns:
            The nodes, in order.
        """
        nodes = list(nodes)
        llm = resolve_llm(self.llm)
        if llm is None:
            logger.warning("ContextHeaderTransform has no LLM (llm= or Settings.llm); nodes unchanged")
            return nodes
        self._failures = 0
        show_progress = bool(kwargs.get("show_progress", False))
        docs = self._group_by_document(nodes)

        # Phase 1, per document: title (when missing), then the summary that names it.
        doc_jobs = [self._adocument_header(llm, doc_nodes) for doc_nodes in docs.values()]
        doc_headers = await run_jobs(
            doc_jobs, show_progress=show_progress, workers=max(1, self.num_workers),
            desc="Document headers",
        )
        # Phase 2, per section of every document, concurrently.
        section_jobs, section_targets = [], []
        if self.section_summaries:
            for doc_nodes, (title, _) in zip(docs.values(), doc_headers):
                for section_nodes in self._group_by_section(doc_nodes):
                    section_jobs.append(self._asection_summary(llm, title, section_nodes))
                    section_targets.append(section_nodes)
        section_summaries = await run_jobs(
            section_jobs, show_progress=show_progress, workers=max(1, self.num_workers),
            desc="Section summaries",
        ) if section_jobs else []

        for doc_nodes, (title, summary) in zip(docs.values(), doc_headers):
            for node in doc_nodes:
                if title and not node.metadata.get(schema.DOCUMENT_TITLE):
                    node.metadata[schema.DOCUMENT_TITLE] = title
                    schema.hide_from_views(node, [schema.DOCUMENT_TITLE])
                if summary:
                    node.metadata[schema.DOCUMENT_SUMMARY] = summary
        for section_nodes, summary in zip(section_targets, section_summaries):
            for node in section_nodes:
                if summary:
                    node.metadata[schema.SECTION_SUMMARY] = summary
        for node in nodes:
            schema.apply_header_format(node)
            if not self.show_to_llm:
                schema.hide_from_views(node, [schema.DOCUMENT_SUMMARY, schema.SECTION_SUMMARY])
                # hide_from_views hides from both views; give the embedding view back.
                node.excluded_embed_metadata_keys[:] = [
                    k for k in node.excluded_embed_metadata_keys
                    if k not in (schema.DOCUMENT_SUMMARY, schema.SECTION_SUMMARY)
                ]
        return nodes

    # -- grouping ---------------------------------------------------------------------------

    @staticmethod
    def _group_by_document(nodes: Sequence[BaseNode]) -> Dict[str, List[BaseNode]]:
        groups: Dict[str, List[BaseNode]] = {}
        for node in nodes:
            groups.setdefault(str(schema.get_document_id(node) or node.node_id), []).append(node)
        for key, members in groups.items():
            if all(schema.get_position(n) is not None for n in members):
                members.sort(key=lambda n: schema.get_position(n))
        return groups

    @staticmethod
    def _group_by_section(doc_nodes: Sequence[BaseNode]) -> List[List[BaseNode]]:
        """Consecutive nodes with the same heading path are one section (chunks of it);
        nodes without a heading path are a section each."""
        sections: List[List[BaseNode]] = []
        last_path: Any = None
        for node in doc_nodes:
            path = schema.get_heading_path(node)
            if sections and path and path == last_path:
                sections[-1].append(node)
            else:
                sections.append([node])
            last_path = path
        return sections

    # -- LLM calls --------------------------------------------------------------------------

    def _get_cache(self) -> _HeaderCache:
        if self._cache is None:
            path = None
            if self.use_cache:
                path = Path(self.cache_path) if self.cache_path else default_cache_dir() / "context_headers.sqlite"
            self._cache = _HeaderCache(path)
        return self._cache

    @staticmethod
    def _model_id(llm: LLM) -> str:
        try:
            name = llm.metadata.model_name
        # Safe: only the cache key's model name is lost (wrappers whose metadata raises, of
        # any type); the key still holds the class name, and the summaries are computed.
        except Exception as exc:  # pragma: no cover - exotic LLM wrappers
            logger.debug("no model name from %s (%s)", type(llm).__name__, exc)
            name = ""
        return f"{type(llm).__name__}:{name}"

    async def _acached(
        self, llm: LLM, kind: str, template: str, prefix: Optional[str], **args: str
    ) -> Optional[str]:
        """One LLM answer, from the cache when this exact prompt was answered before."""
        key = content_hash(kind, self._model_id(llm), template, *[f"{k}={v}" for k, v in sorted(args.items())])
        cache = self._get_cache()
        cached = cache.get(key)
        if cached is not None:
            return cached
        prompt = PromptTemplate(template)

        async def ask() -> str:  # an empty answer raises, so it is retried too
            return _one_line(await llm.apredict(prompt, **args), prefix)

        answer = await acall_llm(
            ask, what=f"context header {kind}", instead="left out", fallback=self._left_out,
            policy=LLMCallPolicy.of(self),
        )
        if answer is not None:
            cache.put(key, answer)
        return answer

    def _left_out(self, _error: BaseException) -> None:
        self._failures += 1

    def _document_text(self, doc_nodes: Sequence[BaseNode]) -> Tuple[str, str]:
        text = "".join(n.get_content(metadata_mode=MetadataMode.NONE) for n in doc_nodes)
        if len(text) <= self.max_document_chars:
            return text, ""
        return text[: self.max_document_chars], TRUNCATION_MESSAGE.format(n=self.max_document_chars)

    async def _adocument_header(
        self, llm: LLM, doc_nodes: Sequence[BaseNode]
    ) -> Tuple[Optional[str], Optional[str]]:
        """(title, summary) of one document; title is the existing one when it has one."""
        text, truncation = self._document_text(doc_nodes)
        title = str(doc_nodes[0].metadata.get(schema.DOCUMENT_TITLE) or "")
        if not title and self.generate_title:
            title = await self._acached(
                llm, "title", DOCUMENT_TITLE_PROMPT, None,
                document_title_guidance=self.document_title_guidance,
                truncation_message=truncation,
                document_text=text,
            ) or ""
        summary = None
        if self.document_summary:
            summary = await self._acached(
                llm, "document_summary", DOCUMENT_SUMMARIZATION_PROMPT, DOCUMENT_SUMMARY_PREFIX,
                document_summarization_guidance=self.document_summarization_guidance,
                truncation_message=truncation,
                document_title=title or schema.get_document_title(doc_nodes[0]),
                document_text=text,
            )
        return title or None, summary

    async def _asection_summary(
        self, llm: LLM, document_title: Optional[str], section_nodes: Sequence[BaseNode]
    ) -> Optional[str]:
        text = "".join(n.get_content(metadata_mode=MetadataMode.NONE) for n in section_nodes)
        first = section_nodes[0]
        return await self._acached(
            llm, "section_summary", SECTION_SUMMARIZATION_PROMPT, SECTION_SUMMARY_PREFIX,
            section_summarization_guidance=self.section_summarization_guidance,
            section_title=str(first.metadata.get(schema.SECTION_TITLE) or ""),
            document_title=document_title or schema.get_document_title(first),
            section_text=text[: self.max_section_chars],
        )
