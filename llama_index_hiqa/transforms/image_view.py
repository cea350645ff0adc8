"""Images embedded by caption, surrounding text and a visual-language description (HiQA
appendix A.5).

"HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA" (Chen et al.): an
image node's view holds its caption, the description a multimodal LLM gives of it (asked once
per image hash, through the one LLM-call policy of [`llama_index_hiqa.models.llm_calls`][llama_index_hiqa.models.llm_calls]) and the
text of the nearest non-image nodes of its document.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from typing import Any, List, Optional, Tuple

from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock
from llama_index.core.schema import BaseNode, ImageNode, MetadataMode

from llama_index_hiqa import schema
from llama_index_hiqa.figures import figure_bytes
from llama_index_hiqa.headings import clean_inline, heading_key

logger = logging.getLogger(__name__)

IMAGE_DESCRIPTION_PROMPT = (
    "Describe this image from a technical document for a search index. Say what kind of "
    "figure it is (diagram, chart, photo, schematic, table image), name every labelled "
    "component, axis, quantity or part number you can read, and what it shows. Answer in at "
    "most {max_words} words of plain text."
)


def is_image(node: BaseNode) -> bool:
    """Whether a node is an image: a figure node of a reader or an ``ImageNode`` with an image.

    Args:
        node: The node.

    Returns:
        True for an image.
    """
    if node.metadata.get(schema.SEGMENT_KIND) == schema.KIND_IMAGE:
        return True
    return isinstance(node, ImageNode) and bool(node.image or node.image_path or node.image_url)


def image_bytes(node: BaseNode) -> Optional[bytes]:
    """The image of an image node as bytes.

    Args:
        node: An ``ImageNode`` (``image``/``image_path``), a multimodal node
            (``image_resource``) or a reader's figure node (read again from its source file
            with [`figure_bytes`][llama_index_hiqa.figures.figure_bytes]).

    Returns:
        The bytes, or ``None`` when it has none (an unreadable file is logged).
    """
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


def image_key(node: BaseNode) -> Optional[Tuple[str, bytes]]:
    """The image's content hash and bytes: descriptions are cached by the hash.

    Args:
        node: An image node.

    Returns:
        ``(sha256 hex digest, bytes)``, or ``None`` when the node has no image.
    """
    data = image_bytes(node)
    if not data:
        return None
    return hashlib.sha256(data).hexdigest(), data


def description_message(node: BaseNode, data: bytes, max_words: int) -> Any:
    """The chat message asking a multimodal LLM to describe an image.

    Args:
        node: The image node (an ``ImageNode`` with only a URL is sent by URL).
        data: The image's bytes.
        max_words: The word budget asked for.

    Returns:
        A LlamaIndex ``ChatMessage`` with an ``ImageBlock`` and the prompt.
    """
    if isinstance(node, ImageNode) and node.image_url and not (node.image or node.image_path):
        image = ImageBlock(url=node.image_url)
    else:
        image = ImageBlock(image=data)
    prompt = IMAGE_DESCRIPTION_PROMPT.format(max_words=max_words)
    return ChatMessage(role="user", blocks=[image, TextBlock(text=prompt)])


def image_view(
    node: BaseNode, nodes: List[BaseNode], index: int, description: Optional[str], context_chars: int
) -> str:
    """Caption, the multimodal description and the surrounding text (appendix A.5).

    Args:
        node: The image node.
        nodes: The nodes it came with (its neighbours give the surrounding text).
        index: Its index in ``nodes``.
        description: The multimodal LLM's description, or ``None``.
        context_chars: Characters of the neighbouring nodes' text (half before, half after).

    Returns:
        The view, one part a line.
    """
    own_text = node.get_content(MetadataMode.NONE)
    caption = str(node.metadata.get(schema.IMAGE_CAPTION) or "")
    parts = []
    if caption and heading_key(caption) not in heading_key(own_text):
        parts.append(caption)
    if description:
        parts.append(description)
    context = surrounding_text(node, nodes, index, context_chars)
    if context:
        parts.append(context)
    return "\n".join(parts)


def surrounding_text(node: BaseNode, nodes: List[BaseNode], index: int, context_chars: int) -> str:
    """The text of the nearest non-image nodes of the same document, before and after.

    Args:
        node: The image node.
        nodes: The nodes it came with.
        index: Its index in ``nodes``.
        context_chars: Characters in all (half before, half after); 0: none.

    Returns:
        ``before … after``, or ``""``.
    """
    if context_chars <= 0:
        return ""
    doc = schema.get_document_id(node)
    half = context_chars // 2

    def nearest_text(step: int) -> str:
        # The nearest non-image node of the same document: a figure next to a figure
        # says nothing about either.
        i = index + step
        while 0 <= i < len(nodes) and schema.get_document_id(nodes[i]) == doc:
            if not is_image(nodes[i]):
                return nodes[i].get_content(MetadataMode.NONE)
            i += step
        return ""

    before, after = nearest_text(-1)[-half:], nearest_text(1)[:half]
    return " … ".join(clean_inline(t) for t in (before, after) if t.strip())
