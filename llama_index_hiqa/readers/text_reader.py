"""Markdown and plain-text files: kept as they are, one page, ``#`` lines as the headings.

HiQA's segment parsers ("HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents
QA", §Markdown Formatter) read Markdown chapters by their ``#`` headings; a ``.md`` file
already is that shape, so its ``#`` lines are recorded as layout headings (size unknown,
bold) and nothing is rewritten. Bytes are decoded by [`decode_text`][llama_index_hiqa.readers._text_decode.decode_text].
"""

from __future__ import annotations

import re
from pathlib import Path

from llama_index_hiqa import schema
from llama_index_hiqa.errors import DocumentReadError, EmptyDocumentError
from llama_index_hiqa.readers._markdown_builder import Parsed
from llama_index_hiqa.readers._pdf_integrity import one_line
from llama_index_hiqa.readers._text_decode import decode_text

TEXT_SUFFIXES = (".md", ".markdown", ".txt")


def read_text_file(path: Path) -> Parsed:
    """One Markdown or plain-text file as it is, one page, ``#`` lines as its headings.

    Args:
        path: the ``.md``/``.markdown``/``.txt`` file.

    Returns:
        The [`Parsed`][llama_index_hiqa.readers._markdown_builder.Parsed] document (source
            format Markdown or text).

    Raises:
        DocumentReadError: the file cannot be read.
        UndecodableTextError: its bytes are not text.
        EmptyDocumentError: the file has no text.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DocumentReadError(path, f"cannot read the file ({one_line(exc)})") from exc
    text = decode_text(path, raw)
    if not text.strip():
        raise EmptyDocumentError(path, "the file has no text")
    headings = []
    if path.suffix.lower() in (".md", ".markdown"):
        offset = 0
        for line in text.split("\n"):
            if re.match(r"^#{1,6}\s", line):
                headings.append([offset, offset + len(line.rstrip("\r")), 0.0, True])
            offset += len(line) + 1
    fmt = schema.FORMAT_MARKDOWN if path.suffix.lower() in (".md", ".markdown") else schema.FORMAT_TEXT
    return Parsed(text, [[0, 0, len(text)]], headings, 0.0, [], "", fmt)
