"""CascadingMetadataTransform: HiQA's Hierarchical Contextual Augmentor (HCA).

HiQA paper, §"Hierarchical Contextual Augmentor", Algorithm 2 and appendices A.2 (cascading
metadata), A.4 / B.1 (tables embedded by their labels, not their numbers), A.5 (images
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
cascade, document summary, section summary, image description — a blank line, then the
body. Values are shown without key names (``metadata_template="{value}"``) unless the node
carries a template the user customised.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import re
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms import LLM
from llama_index.core.schema import (
    BaseNode,
    ImageNode,
    MetadataMode,
    TextNode,
    TransformComponent,
)

from llama_index_hiqa import schema
from llama_index_hiqa.figures import figure_bytes
from llama_index_hiqa.errors import InvalidMetadataError
from llama_index_hiqa.llm_calls import acall_llm, call_llm
from llama_index_hiqa.headings import (
    clean_inline,
    heading_from_text,
    heading_key,
    markdown_heading,
    parse_heading_number,
)
from llama_index_hiqa.schema import Heading
from llama_index_hiqa.transforms.context_header import apply_header_format
from llama_index_hiqa.parsers._token_budget import MAX_TABLE_ROWS

logger = logging.getLogger(__name__)

# The key LlamaIndex's MarkdownNodeParser writes ("/Doc/Chapter/"); read as a fallback and
# hidden from both views, because the cascade says the same thing better.
LLAMA_INDEX_HEADER_PATH = "header_path"

IMAGE_DESCRIPTION_PROMPT = (
    "Describe this image from a technical document for a search index. Say what kind of "
    "figure it is (diagram, chart, photo, schematic, table image), name every labelled "
    "component, axis, quantity or part number you can read, and what it shows. Answer in at "
    "most {max_words} words of plain text."
)

TABLE_TITLE_TEMPLATE = "{title}"
TABLE_COLUMNS_TEMPLATE = "Columns: {columns}"
TABLE_ROWS_TEMPLATE = "Rows: {rows}"

Variant = Literal["cascade", "own_heading", "none"]

_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_NUMERIC = re.compile(r"^[\s$€£%()+\-–—.,0-9]*$")


# --- small helpers -------------------------------------------------------------------


def _first_heading_line(text: str) -> Optional[Tuple[int, str]]:
    """``(level, heading text)`` of the first non-empty line when it is a ``#`` heading."""
    for line in text.splitlines():
        if line.strip():
            return markdown_heading(line)
    return None


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


def _split_row(line: str) -> List[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse_markdown_table(text: str) -> Optional[Tuple[str, List[str], List[str]]]:
    """``(title, column labels, row labels)`` when the body of ``text`` is one Markdown
    table (optionally preceded by a heading and one title line); ``None`` otherwise.

    Strict on purpose: only then is "embed the labels, not the cells" guaranteed to drop
    nothing but numbers from the embedding view.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    title_lines: List[str] = []
    index = 0
    while index < len(lines) and not _TABLE_ROW.match(lines[index]):
        title_lines.append(lines[index])
        index += 1
    rows = lines[index:]
    heading_lines = [found[1] for found in map(markdown_heading, title_lines) if found]
    other = [line for line in title_lines if not markdown_heading(line)]
    if len(rows) < 2 or len(other) > 1 or not all(_TABLE_ROW.match(r) for r in rows):
        return None
    body = [r for r in rows if not _TABLE_SEPARATOR.match(r)]
    if not body:
        return None
    columns = [clean_inline(c) for c in _split_row(body[0]) if clean_inline(c)]
    data = [_split_row(row) for row in body[1:]]
    # Row labels are the first column (paper, Figure 8); when it holds only numbers
    # (a "Pin 1, 2, 3" column), the first column that holds words names the rows instead.
    width = max((len(cells) for cells in data), default=0)
    label_column = 0
    for column in range(width):
        cells = [clean_inline(c[column]) for c in data if column < len(c) and clean_inline(c[column])]
        if cells and sum(not _NUMERIC.match(c) for c in cells) * 2 >= len(cells):
            label_column = column
            break
    labels: List[str] = []
    for cells in data:
        label = clean_inline(cells[label_column]) if label_column < len(cells) else ""
        # A numeric cell is data, not a label.
        if label and not _NUMERIC.match(label) and label not in labels:
            labels.append(label)
    title = clean_inline(other[0]) if other else ""
    if not title and heading_lines:
        title = clean_inline(heading_lines[-1])
    return title, columns, labels


def shorten_cascade(levels: Sequence[str], separator: str, max_chars: int) -> str:
    """Join ``levels``; over ``max_chars``, shorten the *middle* levels (to their number,
    then to an ellipsis), never the first (document title) or the last (own heading)."""
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


def _image_bytes(node: BaseNode) -> Optional[bytes]:
    """The image of an image node as bytes (ImageNode ``image``/``image_path``, a multimodal
    ``Node.image_resource``, or a reader's figure node read again from its source file with
    :func:`~llama_index_hiqa.figures.figure_bytes`); ``None`` when it has none."""
    if not isinstance(node, ImageNode) and getattr(node, "image_resource", None) is None:
        return figure_bytes(node)
    resource = getattr(node, "image_resource", None)
    sources = [(node.image, node.image_path, node.image_url)] if isinstance(node, ImageNode) else []
    if resource is not None:
        sources.append((resource.data, resource.path, resource.url))
    try:
        for data, path, url in sources:
            if data:
                return base64.b64decode(data)
            if path:
                with open(path, "rb") as handle:
                    return handle.read()
            if url:
                return str(url).encode("utf-8")
    except (OSError, ValueError) as exc:
        logger.warning("image of node %s unreadable (%s): no description", node.node_id, exc)
    return None


class HCATableNode(TextNode):
    """A ``TextNode`` whose embedding view holds the table's cascade, title, column and row
    labels but not its data cells (HiQA appendix A.4, B.1); every other view (LLM, ALL,
    NONE) is the whole table, and ``text`` is the whole table.

    Why a subclass: LlamaIndex renders ``text_template`` the same for every metadata mode,
    so "labels in the embed view, cells in the LLM view" cannot be said with templates
    alone. It serialises as a plain ``TextNode`` (same class name and fields), so stores and
    caches keep working; a node reloaded from a store embeds its whole table until it passes
    through the transform again (idempotent).
    """

    def get_content(self, metadata_mode: MetadataMode = MetadataMode.NONE) -> str:
        if metadata_mode in (MetadataMode.LLM, MetadataMode.ALL):
            # A later part of a table split by rows reads with its header lines again.
            header = schema.get_table_header(self)
            if header and not self.text.lstrip().startswith(header):
                metadata_str = self.get_metadata_str(metadata_mode).strip()
                body = f"{header}\n{self.text}"
                return self.text_template.format(content=body, metadata_str=metadata_str).strip() if metadata_str else body
            return super().get_content(metadata_mode)
        if metadata_mode != MetadataMode.EMBED:
            return super().get_content(metadata_mode)
        meta = self.metadata
        lines = []
        if meta.get(schema.TABLE_TITLE):
            lines.append(TABLE_TITLE_TEMPLATE.format(title=meta[schema.TABLE_TITLE]))
        columns, rows = schema.get_table_labels(self)
        if columns:
            lines.append(TABLE_COLUMNS_TEMPLATE.format(columns="; ".join(columns)))
        if rows:
            lines.append(TABLE_ROWS_TEMPLATE.format(rows="; ".join(rows)))
        body = "\n".join(lines)
        metadata_str = self.get_metadata_str(metadata_mode).strip()
        if not metadata_str:
            return body
        return self.text_template.format(content=body, metadata_str=metadata_str).strip()


# --- the transform -------------------------------------------------------------------


class CascadingMetadataTransform(TransformComponent):
    """Adds the heading cascade (HiQA HCA) to the embedding and LLM views of every node.

    >>> from llama_index.core.ingestion import IngestionPipeline
    >>> from llama_index.core.node_parser import MarkdownNodeParser
    >>> pipeline = IngestionPipeline(
    ...     transformations=[MarkdownNodeParser(), CascadingMetadataTransform()])
    """

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
        description="Embed tables by cascade, title, column and row labels, not their cells.",
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
        from llama_index.core.utils import get_tqdm_iterable

        paths = self._heading_paths(nodes)
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

    def _heading_paths(self, nodes: List[BaseNode]) -> List[List[Heading]]:
        """The heading path of every node, walking each document's nodes in order."""
        by_doc: Dict[str, List[int]] = {}
        for index, node in enumerate(nodes):
            by_doc.setdefault(schema.get_document_id(node) or "", []).append(index)
        paths: List[List[Heading]] = [[] for _ in nodes]
        for indices in by_doc.values():
            positions = [schema.get_position(nodes[i]) for i in indices]
            if all(p is not None for p in positions):
                indices = [i for _, i in sorted(zip(positions, indices))]
            stack: List[Heading] = []
            for index in indices:
                stack = self._path_for(nodes[index], stack)
                paths[index] = list(stack)
            self._infer_title([nodes[i] for i in indices], paths[indices[0]])
        return paths

    def _infer_title(self, doc_nodes: List[BaseNode], first_path: List[Heading]) -> None:
        """A document without a title whose first node opens with an H1: that H1 is its
        title. Written to schema.DOCUMENT_TITLE so every node (and a re-run) agrees."""
        if not self.title_from_first_heading or not first_path or first_path[0].level != 1:
            return
        if any(n.metadata.get(schema.DOCUMENT_TITLE) for n in doc_nodes):
            return
        first = _first_heading_line(doc_nodes[0].get_content(MetadataMode.NONE))
        if first is None or first[0] != 1 or heading_key(first[1]) != heading_key(first_path[0].label()):
            return
        for node in doc_nodes:
            node.metadata[schema.DOCUMENT_TITLE] = first_path[0].label()

    def _path_for(self, node: BaseNode, stack: List[Heading]) -> List[Heading]:
        if schema.has_heading_path(node):
            try:
                return schema.get_heading_path(node)
            except InvalidMetadataError:
                raise
            except (TypeError, ValueError) as exc:
                raise InvalidMetadataError(
                    node.node_id,
                    schema.HEADING_PATH,
                    f"expected [[number, title, level], ...], got "
                    f"{node.metadata.get(schema.HEADING_PATH)!r} ({exc})",
                ) from exc
        text = node.get_content(MetadataMode.NONE)
        first = _first_heading_line(text)
        own = heading_from_text(first[1], first[0]) if first else None
        header_path = node.metadata.get(LLAMA_INDEX_HEADER_PATH)
        if isinstance(header_path, str):
            # Prefer the running path when it spells header_path: a heading that contains
            # the separator ("Input/Output") would be cut in two by splitting on "/".
            wanted = heading_key(header_path)
            known_prefix = next(
                (stack[:k] for k in range(len(stack), -1, -1)
                 if heading_key(" ".join(h.label() for h in stack[:k])) == wanted),
                None,
            )
            if known_prefix is not None:
                ancestors = list(known_prefix)
            else:
                names = [n for n in header_path.split("/") if clean_inline(n)]
                ancestors = []
                for depth, name in enumerate(names):
                    known = next((h for h in stack if heading_key(h.label()) == heading_key(name)), None)
                    ancestors.append(known or heading_from_text(name, depth + 1))
            if own is not None:
                return ancestors + [own]
            # A continuation chunk of a split section: same ancestors as the running
            # path means it still belongs to the section the walk is in.
            if stack and [heading_key(h.label()) for h in stack[:-1]] == [
                heading_key(h.label()) for h in ancestors
            ]:
                return list(stack)
            return ancestors
        if own is None:
            return list(stack)  # no heading line: still inside the current section
        # Algorithm 2: a heading of level L closes every open heading of level >= L.
        kept = [h for h in stack if h.level < own.level]
        return kept + [own]

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
        if self.variant == "none":
            meta.pop(schema.IMAGE_DESCRIPTION, None)
            return
        if kind == schema.KIND_TABLE and not isinstance(node, HCATableNode):
            kind = schema.KIND_TEXT  # a subclass we must not replace: embed it as text
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
        if kind == schema.KIND_IMAGE:
            view = self._image_view(node, nodes, index, description)
            if view:
                meta[schema.IMAGE_DESCRIPTION] = view
        # The header format shared with ContextHeaderTransform: view keys shown in the
        # embed view, last, in schema.VIEW_KEYS order (cascade, document summary, section
        # summary, image description), one value per line.
        apply_header_format(node)
        self._show(node, schema.HEADING_CASCADE, embed=True, llm=self.cascade_in_llm_view)
        self._show(node, schema.IMAGE_DESCRIPTION, embed=True, llm=True)

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
        if node.metadata.get(schema.SEGMENT_KIND) == schema.KIND_IMAGE:
            return True
        return isinstance(node, ImageNode) and bool(node.image or node.image_path or node.image_url)

    def _as_view_node(self, node: BaseNode) -> BaseNode:
        """Tables become :class:`HCATableNode` (same id, text, metadata) so their embed view
        can leave out the cells; everything else is returned as is."""
        if type(node) is HCATableNode and (self.variant == "none" or not self.augment_tables):
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
        if type(node) is HCATableNode:
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

    def _image_view(
        self, node: BaseNode, nodes: List[BaseNode], index: int, description: Optional[str]
    ) -> str:
        """Caption, the multimodal description and the surrounding text (appendix A.5)."""
        if description is None:
            description = self._cached_description(node)
        own_text = node.get_content(MetadataMode.NONE)
        caption = str(node.metadata.get(schema.IMAGE_CAPTION) or "")
        parts = []
        if caption and heading_key(caption) not in heading_key(own_text):
            parts.append(caption)
        if description:
            parts.append(description)
        context = self._surrounding_text(node, nodes, index)
        if context:
            parts.append(context)
        return "\n".join(parts)

    def _surrounding_text(self, node: BaseNode, nodes: List[BaseNode], index: int) -> str:
        if self.image_context_chars <= 0:
            return ""
        doc = schema.get_document_id(node)
        half = self.image_context_chars // 2

        def nearest_text(step: int) -> str:
            # The nearest non-image node of the same document: a figure next to a figure
            # says nothing about either.
            i = index + step
            while 0 <= i < len(nodes) and schema.get_document_id(nodes[i]) == doc:
                if not self._is_image(nodes[i]):
                    return nodes[i].get_content(MetadataMode.NONE)
                i += step
            return ""

        before, after = nearest_text(-1)[-half:], nearest_text(1)[:half]
        return " … ".join(clean_inline(t) for t in (before, after) if t.strip())

    # -- multimodal descriptions, cached by image hash ------------------------------------

    def _image_key(self, node: BaseNode) -> Optional[Tuple[str, bytes]]:
        data = _image_bytes(node)
        if not data:
            return None
        return hashlib.sha256(data).hexdigest(), data

    def _cached_description(self, node: BaseNode) -> Optional[str]:
        key = self._image_key(node) if self._descriptions else None
        return self._descriptions.get(key[0]) if key else None

    def _message(self, node: BaseNode, data: bytes) -> Any:
        from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock

        if isinstance(node, ImageNode) and node.image_url and not (node.image or node.image_path):
            image = ImageBlock(url=node.image_url)
        else:
            image = ImageBlock(image=data)
        prompt = IMAGE_DESCRIPTION_PROMPT.format(max_words=self.image_description_words)
        return ChatMessage(role="user", blocks=[image, TextBlock(text=prompt)])

    def _describe_image(self, node: BaseNode) -> Optional[str]:
        key = self._image_key(node)
        if key is not None and key[0] not in self._descriptions:
            # The message is built inside the attempt: an unreadable image falls back too.
            response = call_llm(
                lambda: self.multimodal_llm.chat([self._message(node, key[1])]), **_description_call(node)
            )
            self._remember(key[0], response)
        return self._description(key)

    async def _adescribe_image(self, node: BaseNode) -> Optional[str]:
        key = self._image_key(node)
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
