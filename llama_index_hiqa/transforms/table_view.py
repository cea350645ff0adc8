"""A table's embedding view: its rows with their figures, or its labels alone.

Two views, chosen by ``CascadingMetadataTransform.table_view``:

* ``"rows"``: the cascade, then [`table_lead`][llama_index_hiqa.transforms.table_view.table_lead] (the table's title and
  Markdown header lines, when the part's own text does not open with them), then the part's
  rows with their figures. The parser cuts a long table between rows until that whole view
  fits the embedding model's window, so every part is embedded by its statement's name, its
  year columns and its own figures. The lead is a metadata view key (``schema.TABLE_LEAD``),
  so a node read back from any store renders the same view, and BM25 (which reads the embed
  view) indexes what the vector holds.
* ``"labels"`` (the default): [`HCATableNode`][llama_index_hiqa.transforms.table_view.HCATableNode], as "HiQA: A Hierarchical Contextual Augmentation RAG for
  Multi-Documents QA" (Chen et al., appendices A.4 and B.1) embeds a table: cascade, title,
  column and row labels but not the data cells, whose numbers would make every table of a
  collection look alike. On yearly filings of one company the labels are the same in every
  year's filing, so the labels view cannot tell look-alike documents' tables apart; their
  figures can.

The LLM view and ``node.text`` stay the whole table in both.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

from llama_index.core.schema import MetadataMode, TextNode

from llama_index_hiqa import schema
from llama_index_hiqa.headings import clean_inline, markdown_heading

TABLE_TITLE_TEMPLATE = "{title}"
TABLE_COLUMNS_TEMPLATE = "Columns: {columns}"
TABLE_ROWS_TEMPLATE = "Rows: {rows}"

_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_NUMERIC = re.compile(r"^[\s$€£%()+\-–—.,0-9]*$")


def _split_row(line: str) -> List[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse_markdown_table(text: str) -> Optional[Tuple[str, List[str], List[str]]]:
    """The labels of a node whose body is one Markdown table (optionally preceded by a
    heading and one title line).

    Strict on purpose: only then is "embed the labels, not the cells" guaranteed to drop
    nothing but numbers from the embedding view.

    Args:
        text: The node's text.

    Returns:
        ``(title, column labels, row labels)``, or ``None`` when the body is not one table.
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


def table_lead(text: str, title: str, header: str, own_heading: str = "") -> str:
    """What a table part's views show before its own text: the table's title unless the
    part's first lines or its own heading (the cascade's last level) already name it, then its
    Markdown header lines unless the part's text holds them.

    Args:
        text: the part's text.
        title: the table's title (``schema.TABLE_TITLE``; ``""`` for none).
        header: the table's Markdown header lines (``schema.TABLE_HEADER`` of a later part;
            ``""`` for none).
        own_heading: the label of the part's own heading (``""`` for none).

    Returns:
        The lead lines joined by newlines; ``""`` when the text holds them all.
    """
    opening = [clean_inline(line).casefold() for line in text.splitlines()[:6] if line.strip()]
    lines: List[str] = []
    name = clean_inline(title)
    if name and name.casefold() != clean_inline(own_heading).casefold() and not any(name.casefold() in o for o in opening):
        lines.append(name)
    header_lines = [line.strip() for line in header.splitlines() if line.strip()]
    text_lines = {line.strip() for line in text.splitlines()[:8]}
    if header_lines and header_lines[0] not in text_lines:
        lines.extend(header_lines)
    return "\n".join(lines)


class HCATableNode(TextNode):
    """A ``TextNode`` whose embedding view holds the table's cascade, title, column and row
    labels but not its data cells (HiQA appendix A.4, B.1; ``table_view="labels"``); every other view (LLM, ALL,
    NONE) is the whole table, and ``text`` is the whole table.

    Why a subclass: LlamaIndex renders ``text_template`` the same for every metadata mode,
    so "labels in the embed view, cells in the LLM view" cannot be said with templates
    alone. It serialises as a plain ``TextNode`` (same class name and fields), so stores and
    caches keep working; a node reloaded from a store embeds its whole table until it passes
    through the transform again (idempotent).
    """

    def get_content(self, metadata_mode: MetadataMode = MetadataMode.NONE) -> str:
        """The node's content in a metadata mode.

        Args:
            metadata_mode: ``EMBED``: cascade, title, column and row labels; any other mode:
                the whole table (a later part of a table split by rows with its header
                lines again).

        Returns:
            The content.
        """
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
