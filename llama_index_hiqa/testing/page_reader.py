"""``PDFPageReader``: one ``Document`` per PDF page, as ``llama-index-readers-file`` gives them.

With ``llama-index-readers-file`` installed, LlamaIndex's ``SimpleDirectoryReader`` reads a PDF
with that package's ``PDFReader``: one ``Document`` per page, the page's plain text,
``page_label`` and ``file_name`` plus the reader's file metadata. Tests and benchmarks use this
reader in its place (``SimpleDirectoryReader(..., file_extractor={".pdf": PDFPageReader()})``)
where that package cannot be installed next to the pack's dependencies (it pins an older
pandas); the text is PyMuPDF's rather than pypdf's.

>>> from llama_index.core import SimpleDirectoryReader
>>> from llama_index_hiqa.testing import PDFPageReader
>>> docs = SimpleDirectoryReader("manuals/", file_extractor={".pdf": PDFPageReader()}).load_data()
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from llama_index.core.readers.base import BaseReader
from llama_index.core.schema import Document


class PDFPageReader(BaseReader):
    """One ``Document`` per page of a PDF: its plain text, ``page_label`` (from 1) and ``file_name``."""

    def load_data(self, file: Path, extra_info: Optional[Dict[str, Any]] = None, **kwargs: Any) -> List[Document]:
        """The pages of one PDF.

        Args:
            file: the PDF.
            extra_info: metadata every page gets (``SimpleDirectoryReader``'s file metadata).
            **kwargs: accepted for ``SimpleDirectoryReader`` (``fs``), unused.

        Returns:
            One document per page, in order.
        """
        # pymupdf (~1.5 s to import) loads when a PDF is read, not with the package.
        import pymupdf

        path = Path(file)
        with pymupdf.open(str(path)) as pdf:
            texts = [page.get_text() for page in pdf]
        return [
            Document(text=text, metadata={"page_label": str(number), "file_name": path.name, **(extra_info or {})})
            for number, text in enumerate(texts, start=1)
        ]
