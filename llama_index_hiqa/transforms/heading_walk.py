"""The heading path of every node: HiQA's Hierarchical Contextual Augmentor, Algorithm 2.

"HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA" (Chen et al.),
§"Hierarchical Contextual Augmentor", Algorithm 2: the nodes of one document are walked in
order; a heading line of level L closes every open heading of level >= L and opens itself, so
a chunk without a heading line (a SentenceSplitter continuation) inherits its section's path
and skipped levels (H1 then H3) nest correctly. A path written by the pack's parsers
(``schema.HEADING_PATH``) or LlamaIndex's ``MarkdownNodeParser`` (``header_path``) is read first.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from llama_index.core.schema import BaseNode, MetadataMode

from llama_index_hiqa import schema
from llama_index_hiqa.errors import InvalidMetadataError
from llama_index_hiqa.headings import clean_inline, heading_from_text, heading_key, markdown_heading
from llama_index_hiqa.schema import Heading

# The key LlamaIndex's MarkdownNodeParser writes ("/Doc/Chapter/"); read as a fallback and
# hidden from both views, because the cascade says the same thing better.
LLAMA_INDEX_HEADER_PATH = "header_path"


def first_heading_line(text: str) -> Optional[Tuple[int, str]]:
    """The first non-empty line when it is a ``#`` heading.

    Args:
        text: A node's text.

    Returns:
        ``(level, heading text)``, or ``None``.
    """
    for line in text.splitlines():
        if line.strip():
            return markdown_heading(line)
    return None


def heading_paths(nodes: List[BaseNode], title_from_first_heading: bool = True) -> List[List[Heading]]:
    """The heading path of every node, walking each document's nodes in order (Algorithm 2).

    Args:
        nodes: The nodes of one or more documents (each document's in any order: they are
            sorted by ``schema.POSITION`` when every one has it).
        title_from_first_heading: A document without ``schema.DOCUMENT_TITLE`` whose first
            node opens with an H1 takes that H1 as its title (written to its nodes).

    Returns:
        One heading path per node, in the order of ``nodes``.

    Raises:
        InvalidMetadataError: A node's ``schema.HEADING_PATH`` is not a heading path.
    """
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
            stack = path_for(nodes[index], stack)
            paths[index] = list(stack)
        if title_from_first_heading:
                infer_title([nodes[i] for i in indices], paths[indices[0]])
    return paths

def infer_title(doc_nodes: List[BaseNode], first_path: List[Heading]) -> None:
    """A document without a title whose first node opens with an H1: that H1 is its title.

    Written to ``schema.DOCUMENT_TITLE`` so every node (and a re-run) agrees.

    Args:
        doc_nodes: The nodes of one document, in order.
        first_path: The heading path of its first node.
    """
    if not first_path or first_path[0].level != 1:
        return
    if any(n.metadata.get(schema.DOCUMENT_TITLE) for n in doc_nodes):
        return
    first = first_heading_line(doc_nodes[0].get_content(MetadataMode.NONE))
    if first is None or first[0] != 1 or heading_key(first[1]) != heading_key(first_path[0].label()):
        return
    for node in doc_nodes:
        node.metadata[schema.DOCUMENT_TITLE] = first_path[0].label()

def path_for(node: BaseNode, stack: List[Heading]) -> List[Heading]:
    """One step of the walk: the heading path of ``node`` given the running path.

    Args:
        node: The next node of the document.
        stack: The heading path of the node before it.

    Returns:
        The node's heading path: its own ``schema.HEADING_PATH``; else from LlamaIndex's
            ``header_path`` and its first heading line; else the running path, with a heading
            line of level L closing every open heading of level >= L.

    Raises:
        InvalidMetadataError: The node's ``schema.HEADING_PATH`` is not a heading path.
    """
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
    first = first_heading_line(text)
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
