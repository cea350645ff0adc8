"""CascadingMetadataTransform: HiQA's Hierarchical Contextual Augmentor (HCA).

HiQA paper, §"Hierarchical Contextual Augmentor", Algorithm 2 and appendices A.2 (cascading
metadata), A.4 / B.1 (tables embedded by their labels, not their numbers: ``table_view="labels"``,
the default; ``"rows"`` keeps the figures, see ``transforms.table_view``), A.5 (images
embedded by caption, context and a visual-language description) and Table 2 (the ablation
variants "HCA", "No Hierarchy", "Original RAG").

Every node gets, in its *embedding view* (``node.get_content(MetadataMode.EMBED)``, which
is what LlamaIndex embeds and what ``BM25Retriever`` indexes), the path of the heading tree
from the document title down to its own heading::

    NX-2040 Datasheet > 4 Specifications > 4.2 Electrical characteristics

so that the chunks of near-identical documents stop looking alike. The cascade is written to
``schema.HEADING_CASCADE`` and shown through LlamaIndex's own metadata machinery
(``excluded_embed_metadata_keys`` / ``excluded_llm_metadata_keys`` / ``metadata_template``);
``node.text`` is never rewritten. Run it *after* splitting: the metadata then never counts
against the chunk size (LlamaIndex's "Metadata length is longer than chunk size" error).

Where the heading path comes from, in order:

1. ``schema.HEADING_PATH`` written by the pack's parsers;
2. LlamaIndex's ``MarkdownNodeParser`` ``header_path`` metadata ("/Doc/Chapter/") plus the
   node's first heading line;
3. the depth-first walk of Algorithm 2 over the nodes of one document in order: a heading
   line of level L closes every open heading of level >= L and opens itself, so a chunk
   without a heading line (a SentenceSplitter continuation) inherits its section's path and
   skipped levels (H1 then H3) nest correctly.

Embed view format (shared with ContextHeaderTransform through its
``apply_header_format``): one header line per view value, in ``schema.VIEW_KEYS`` order —
cascade, document summary, section summary, image description, table lead — a blank line,
then the body. Values are shown without key names (``metadata_template="{value}"``) unless the node
carries a template the user customised.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar, Dict, List, Literal, Optional, Sequence, Tuple

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, MetadataMode, TextNode, TransformComponent
from llama_index.core.utils import get_tqdm_iterable

from llama_index_hiqa.component_dict import PartsRoundTrip
from llama_index_hiqa import schema
from llama_index_hiqa.headings import clean_inline, heading_key, markdown_heading, parse_heading_number
from llama_index_hiqa.models.llm_calls import acall_llm, call_llm
from llama_index_hiqa.parsers._token_budget import MAX_TABLE_ROWS, TableView
from llama_index_hiqa.schema import Heading
from llama_index_hiqa.transforms.heading_walk import LLAMA_INDEX_HEADER_PATH, heading_paths
from llama_index_hiqa.transforms.image_view import description_message, image_key, image_view, is_image
from llama_index_hiqa.transforms.table_view import HCATableNode, parse_markdown_table, table_lead

logger = logging.getLogger(__name__)

Variant = Literal["cascade", "own_heading", "none"]


# --- small helpers -------------------------------------------------------------------


def _starts_with_heading(text: str, heading: Heading) -> bool:
    """Whether the node's text already opens with ``heading`` (as a ``#`` line or as a
    plain first line, as layout parsers write it)."""
    for line in text.splitlines():
        if not line.strip():
            continue
        found = markdown_heading(line)
        first = heading_key(found[1] if found else line)
        return bool(first) and first in {heading_key(heading.label()), heading_key(heading.title)}
    return False


def shorten_cascade(levels: Sequence[str], separator: str, max_chars: int) -> str:
    """Join ``levels``; over ``max_chars``, shorten the *middle* levels (to their number,
    then to an ellipsis), never the first (document title) or the last (own heading).

    Args:
        levels: Document title, ancestors, own heading (empty ones are left out).
        separator: Between the levels.
        max_chars: The budget.

    Returns:
        The cascade.
    """
    parts = [p for p in levels if p]
    text = separator.join(parts)
    if len(text) <= max_chars or len(parts) <= 2:
        return text
    middle = list(parts[1:-1])
    # Step 1: numbered middle levels keep only their number ("4 Specifications" -> "4").
    for i, part in enumerate(middle):
        number = parse_heading_number(part).number
        middle[i] = number or (part[:24].rstrip() + "…" if len(part) > 25 else part)
        text = separator.join([parts[0], *middle, parts[-1]])
        if len(text) <= max_chars:
            return text
    # Step 2: drop middle levels from the top, leaving one ellipsis where they were.
    while middle:
        middle.pop(0)
        text = separator.join([parts[0], "…", *middle, parts[-1]])
        if len(text) <= max_chars:
            return text
    return text


# --- the transform -------------------------------------------------------------------


class CascadingMetadataTransform(PartsRoundTrip, TransformComponent):
    """Adds the heading cascade (HiQA HCA) to the embedding and LLM views of every node.

    >>> from llama_index.core.ingestion import IngestionPipeline
    >>> from llama_index.core.node_parser import MarkdownNodeParser
    >>> pipeline = IngestionPipeline(
    ...     transformations=[MarkdownNodeParser(), CascadingMetadataTransform()])
    """

    part_names: ClassVar[Tuple[str, ...]] = ("multimodal_llm",)  # not serialised: component_dict

    variant: Variant = Field(
        default="cascade",
        description=(
            "HiQA Table 2 ablation: 'cascade' (HCA: document title > ancestors > own "
            "heading), 'own_heading' ('No Hierarchy': the segment's own heading only), "
            "'none' ('Original RAG': no metadata, tables and images embedded as they are)."
        ),
    )
    separator: str = Field(default=" > ", description="Between the levels of the cascade.")
    include_document_title: bool = Field(
        default=True, description="Root the cascade at the document title (paper: yes)."
    )
    title_from_first_heading: bool = Field(
        default=True,
        description=(
            "When a document has no schema.DOCUMENT_TITLE, take its opening level-1 heading "
            "as the title (Markdown convention) instead of the file name."
        ),
    )
    max_cascade_chars: int = Field(
        default=300,
        description=(
            "Budget of the rendered cascade; above it the middle levels are shortened "
            "(number only, then dropped), never the document title or the own heading."
        ),
    )
    cascade_in_llm_view: bool = Field(
        default=True,
        description="Also show the cascade to the LLM (MetadataMode.LLM), as a source line.",
    )
    augment_tables: bool = Field(
        default=True,
        description="Give tables a table view (``table_view``); False: a table is embedded as plain text.",
    )
    table_view: TableView = Field(
        default="labels",
        description=(
            "What a table's embedding view holds. 'labels' (HiQA appendix A.4, HCATableNode): cascade, "
            "title, column and row labels without the cells. 'rows': cascade, the table's title and "
            "header lines (schema.TABLE_LEAD, when its own text does not open with them) and its rows "
            "with their figures: the view BM25 reads and the one a node reloaded from a store renders."
        ),
    )
    detect_tables: bool = Field(
        default=True,
        description=(
            "Treat a node whose body is exactly one Markdown table as a table even when no "
            "parser set schema.SEGMENT_KIND (e.g. MarkdownNodeParser output)."
        ),
    )
    max_table_labels: int = Field(
        default=MAX_TABLE_ROWS, description="At most this many row labels in a table's embedding view."
    )
    image_context_chars: int = Field(
        default=300,
        description="Characters of the neighbouring nodes' text embedded with an image.",
    )
    multimodal_llm: Optional[LLM] = Field(
        default=None,
        description=(
            "Any LlamaIndex LLM that accepts ImageBlocks; describes each image once per "
            "image hash. None: caption and surrounding text only."
        ),
        exclude=True,
    )
    image_description_words: int = Field(
        default=80, description="Word budget asked of the multimodal LLM per image."
    )
    num_workers: int = Field(
        default=4, description="Concurrent multimodal LLM calls in acall."
    )
    show_progress: bool = Field(default=False, description="Show a progress bar.")

    _descriptions: Dict[str, str] = PrivateAttr(default_factory=dict)
    _warned_no_headings: bool = PrivateAttr(default=False)

    @classmethod
    def class_name(cls) -> str:
        return "CascadingMetadataTransform"

    # -- LlamaIndex entry points --------------------------------------------------------

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> List[BaseNode]:
        nodes = list(nodes)
        descriptions: Dict[int, str] = {}
        if self.multimodal_llm is not None and self.variant != "none":
            for index, node in enumerate(nodes):
                if self._is_image(node):
                    text = self._describe_image(node)
                    if text:
                        descriptions[index] = text
        return self._apply(nodes, descriptions, kwargs.get("show_progress", self.show_progress))

    async def acall(self, nodes: Sequence[BaseNode], **kwargs: Any) -> List[BaseNode]:
        """As calling the transform, with the multimodal descriptions asked concurrently
        (``num_workers`` at a time).

        Args:
            nodes: The nodes.
            **kwargs: ``show_progress`` overrides the setting.

        Returns:
            The nodes with the cascade in their views (tables as [`HCATableNode`][llama_index_hiqa.transforms.table_view.HCATableNode]).
        """
        nodes = list(nodes)
        descriptions: Dict[int, str] = {}
        if self.multimodal_llm is not None and self.variant != "none":
            indices = [i for i, node in enumerate(nodes) if self._is_image(node)]
            semaphore = asyncio.Semaphore(max(1, self.num_workers))

            async def describe(index: int) -> Tuple[int, Optional[str]]:
                async with semaphore:
                    return index, await self._adescribe_image(nodes[index])

            for index, text in await asyncio.gather(*(describe(i) for i in indices)):
                if text:
                    descriptions[index] = text
        return self._apply(nodes, descriptions, kwargs.get("show_progress", self.show_progress))

    # -- the walk (Algorithm 2) ---------------------------------------------------------

    def _apply(
        self, nodes: List[BaseNode], descriptions: Dict[int, str], show_progress: bool
    ) -> List[BaseNode]:
        paths = heading_paths(nodes, self.title_from_first_heading)
        # Nodes of the pack's segment parsers (PARSE_PATH) had their headings looked for: text
        # without any (Wikipedia passages) is no mistake of the pipeline's.
        if nodes and self.variant != "none" and not any(paths) and not any(schema.PARSE_PATH in n.metadata for n in nodes):
            self._warn_no_headings(nodes)
        out: List[BaseNode] = []
        for index, node in enumerate(
            get_tqdm_iterable(nodes, show_progress, "Cascading metadata")
        ):
            path = paths[index]
            node = self._as_view_node(node)
            if path and not schema.has_heading_path(node):
                # Record the inferred path so that other components (and a second run of
                # this transform) read the same fact instead of re-deriving it.
                schema.set_heading_path(node, path)
            schema.hide_from_views(node)
            schema.hide_from_views(node, [LLAMA_INDEX_HEADER_PATH])
            self._render(node, path, nodes, index, descriptions.get(index))
            out.append(node)
        return out

    def _warn_no_headings(self, nodes: List[BaseNode]) -> None:
        """One warning per transform (an ingestion calls it batch after batch with one cause):
        with no heading anywhere the cascade is the document title alone."""
        if self._warned_no_headings:
            return
        self._warned_no_headings = True
        logger.warning(
            "CascadingMetadataTransform: none of the %d nodes has a heading path, so each "
            "cascade is only its document title (%r). Cut the documents into segments first: "
            "LayoutMarkdownParser() in place of the splitter (it reads the PDFs the documents' "
            "file_path names), MarkdownNodeParser() for Markdown, or read the files with "
            "PDFLayoutReader().",
            len(nodes), schema.get_document_title(nodes[0]),
        )

    # -- the views ----------------------------------------------------------------------

    def _render(
        self,
        node: BaseNode,
        path: List[Heading],
        nodes: List[BaseNode],
        index: int,
        description: Optional[str],
    ) -> None:
        meta = node.metadata
        kind = self._kind(node)
        meta.pop(schema.HEADING_CASCADE, None)
        meta.pop(schema.TABLE_LEAD, None)
        if self.variant == "none":
            meta.pop(schema.IMAGE_DESCRIPTION, None)
            return
        if kind == schema.KIND_TABLE and not (isinstance(node, HCATableNode) or self._rows_view(node)):
            kind = schema.KIND_TEXT  # a subclass we must not replace, or no table view: embed it as text
        if kind == schema.KIND_TABLE:
            self._table_facts(node, path)

        title = schema.get_document_title(node) if self.include_document_title else ""
        levels = [h.label() for h in path]
        if title and levels and heading_key(levels[0]) == heading_key(title):
            levels = levels[1:]  # the top heading is the document title itself
        own = path[-1] if path else None
        # No double heading: a node whose text opens with its own heading line already
        # embeds that heading once, so the cascade stops at the parent. This keeps node.text
        # intact, works with LlamaIndex's stock templates and survives any docstore or
        # vector store round trip (a subclass or a template trick would not). Tables are
        # embedded without their text, so they keep their own heading in the cascade.
        drop_own = (
            own is not None
            and kind != schema.KIND_TABLE
            and _starts_with_heading(node.get_content(MetadataMode.NONE), own)
        )
        if self.variant == "own_heading":
            cascade = "" if (own is None or drop_own) else own.label()
        else:
            if drop_own and levels:
                levels = levels[:-1]
            elif drop_own:
                title = ""  # the own heading is the document title, already in the text
            cascade = shorten_cascade([title, *levels], self.separator, self.max_cascade_chars)
        if cascade:
            meta[schema.HEADING_CASCADE] = cascade
        if kind == schema.KIND_TABLE and self._rows_view(node):
            lead = table_lead(node.get_content(MetadataMode.NONE), meta.get(schema.TABLE_TITLE) or "",
                              schema.get_table_header(node), own.label() if own is not None else "")
            if lead:
                meta[schema.TABLE_LEAD] = lead
        if kind == schema.KIND_IMAGE:
            if description is None:
                description = self._cached_description(node)
            view = image_view(node, nodes, index, description, self.image_context_chars)
            if view:
                meta[schema.IMAGE_DESCRIPTION] = view
        # The header format shared with ContextHeaderTransform: view keys shown in the
        # embed view, last, in schema.VIEW_KEYS order (cascade, document summary, section
        # summary, image description), one value per line.
        schema.apply_header_format(node)
        self._show(node, schema.HEADING_CASCADE, embed=True, llm=self.cascade_in_llm_view)
        self._show(node, schema.IMAGE_DESCRIPTION, embed=True, llm=True)
        self._show(node, schema.TABLE_LEAD, embed=True, llm=True)

    @staticmethod
    def _show(node: BaseNode, key: str, embed: bool, llm: bool) -> None:
        for excluded, visible in (
            (node.excluded_embed_metadata_keys, embed),
            (node.excluded_llm_metadata_keys, llm),
        ):
            if visible:
                while key in excluded:
                    excluded.remove(key)
            elif key not in excluded:
                excluded.append(key)

    def _kind(self, node: BaseNode) -> str:
        kind = node.metadata.get(schema.SEGMENT_KIND)
        if kind in schema.SEGMENT_KINDS:
            return kind
        if self._is_image(node):
            return schema.KIND_IMAGE
        return schema.KIND_TEXT

    def _is_image(self, node: BaseNode) -> bool:
        return is_image(node)

    def _rows_view(self, node: BaseNode) -> bool:
        """Whether ``node`` (a table) is shown by its rows: a plain ``TextNode`` with the
        ``rows`` view on (its view is the one any store renders back)."""
        return self.augment_tables and self.table_view == "rows" and type(node) is TextNode

    def _as_view_node(self, node: BaseNode) -> BaseNode:
        """With the ``labels`` view, tables become [`HCATableNode`][llama_index_hiqa.transforms.table_view.HCATableNode] (same id, text, metadata) so their
        embed view can leave out the cells; a table stays a plain ``TextNode`` with the ``rows``
        view (its kind set when detected); everything else is returned as is."""
        labels = self.table_view == "labels"
        if type(node) is HCATableNode and (self.variant == "none" or not self.augment_tables or not labels):
            return TextNode.model_validate(node.model_dump())  # back to the plain view
        if self.variant == "none" or not self.augment_tables or type(node) not in (TextNode, HCATableNode):
            return node
        kind = node.metadata.get(schema.SEGMENT_KIND)
        if kind not in (None, schema.KIND_TEXT, schema.KIND_TABLE):
            return node
        parsed = parse_markdown_table(node.text) if (kind == schema.KIND_TABLE or self.detect_tables) else None
        if kind != schema.KIND_TABLE and parsed is None:
            return node
        if kind is None or kind == schema.KIND_TEXT:
            node.metadata[schema.SEGMENT_KIND] = schema.KIND_TABLE
        if type(node) is HCATableNode or not labels:
            return node
        return HCATableNode.model_validate(node.model_dump())

    def _table_facts(self, node: BaseNode, path: List[Heading]) -> None:
        """Title, column and row labels: the parser's when given, else read from the
        Markdown table; the title falls back to the own heading."""
        meta = node.metadata
        parsed = parse_markdown_table(node.text) or ("", [], [])
        title = meta.get(schema.TABLE_TITLE) or parsed[0] or (path[-1].label() if path else "")
        known_columns, known_rows = schema.get_table_labels(node)
        columns = known_columns or parsed[1]
        rows = known_rows or parsed[2]
        schema.set_table_facts(
            node, title=title, columns=columns, rows=list(rows)[: self.max_table_labels]
        )

    # -- multimodal descriptions, cached by image hash ------------------------------------

    def _cached_description(self, node: BaseNode) -> Optional[str]:
        key = image_key(node) if self._descriptions else None
        return self._descriptions.get(key[0]) if key else None

    def _message(self, node: BaseNode, data: bytes) -> Any:
        return description_message(node, data, self.image_description_words)

    def _describe_image(self, node: BaseNode) -> Optional[str]:
        key = image_key(node)
        if key is not None and key[0] not in self._descriptions:
            # The message is built inside the attempt: an unreadable image falls back too.
            response = call_llm(
                lambda: self.multimodal_llm.chat([self._message(node, key[1])]), **_description_call(node)
            )
            self._remember(key[0], response)
        return self._description(key)

    async def _adescribe_image(self, node: BaseNode) -> Optional[str]:
        key = image_key(node)
        if key is not None and key[0] not in self._descriptions:

            async def ask() -> Any:
                return await self.multimodal_llm.achat([self._message(node, key[1])])

            self._remember(key[0], await acall_llm(ask, **_description_call(node)))
        return self._description(key)

    def _remember(self, image_hash: str, response: Any) -> None:
        if response is not None:  # a failed call is asked again for the next node of this image
            self._descriptions[image_hash] = clean_inline(response.message.content or "")

    def _description(self, key: Optional[Tuple[str, bytes]]) -> Optional[str]:
        return (self._descriptions.get(key[0]) or None) if key is not None else None


def _description_call(node: BaseNode) -> Dict[str, Any]:
    """How an image description is asked: one attempt; the documented fallback on a failure
    is the caption and the surrounding text alone."""
    return dict(
        what=f"image description of node {node.node_id}",
        instead="caption and context only",
        fallback=lambda _error: None,
    )
