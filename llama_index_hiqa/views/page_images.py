"""Pages of the stored documents as PNG images, at a bounded size, from a bounded cache.

The notebook view and ``hiqa serve`` both show a node on its page: the page is rendered once
with PyMuPDF (no highlight burnt in, so every node of a page shares the image) and the node's
rectangles (``schema.PAGE_BOXES``, PDF points) are drawn over it as boxes placed in shares of
the image's width and height ([`PageGeometry.fractions`][llama_index_hiqa.views.page_images.PageGeometry.fractions]).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence, Tuple

from llama_index_hiqa.errors import HiQAError

Rect = Tuple[float, float, float, float]
# A page is drawn at most this wide and tall, in pixels: a US Letter page at 900 px wide is
# legible (about 110 dpi) and its PNG is 100-300 KB.
MAX_PAGE_PIXELS = 900
MAX_ZOOM = 2.0  # small pages are not blown up beyond twice their size in points
CACHE_BYTES = 64 * 1024 * 1024  # rendered PNGs kept, least recently used dropped first


class PageImageError(HiQAError, ValueError):
    """A page cannot be shown: its file is gone, is not a PDF, or has no such page. Names the
    file and the page."""

    def __init__(self, path: str, page: int, reason: str) -> None:
        self.path, self.page, self.reason = path, page, reason
        super().__init__(f"{path}: page {page + 1}: {reason}")


class PageGeometry(NamedTuple):
    """A page as displayed: its size in points after its ``/Rotate`` and the matrix taking
    the text layer's coordinates (unrotated) to the displayed page."""

    width: float
    height: float
    matrix: Tuple[float, float, float, float, float, float]

    def fractions(self, rect: Sequence[float]) -> Rect:
        """Where ``rect`` lies on the displayed page, in shares of its width and height.

        Args:
            rect: ``(x0, y0, x1, y1)`` in PDF points, as the text layer gives them.

        Returns:
            ``(left, top, width, height)``, each between 0 and 1.
        """
        a, b, c, d, e, f = self.matrix
        xs = [a * x + c * y + e for x in (rect[0], rect[2]) for y in (rect[1], rect[3])]
        ys = [b * x + d * y + f for x in (rect[0], rect[2]) for y in (rect[1], rect[3])]
        left, top = max(min(xs), 0.0) / self.width, max(min(ys), 0.0) / self.height
        right, bottom = min(max(xs), self.width) / self.width, min(max(ys), self.height) / self.height
        return (left, top, max(right - left, 0.0), max(bottom - top, 0.0))


class PageImage(NamedTuple):
    """A rendered page: the PNG's bytes and pixel size, and the page's geometry."""

    png: bytes
    width: int
    height: int
    geometry: PageGeometry


class PageRenderer:
    """Renders pages of PDF files to PNG (bounded size) and keeps the latest in memory (bounded bytes).

    Thread-safe: the web app renders for several clients at once; MuPDF documents are opened
    per call (opening a PDF takes about a millisecond) so no document is shared between threads.

    Args:
        max_pixels: the longest side of a rendered page, in pixels.
        cache_bytes: the PNG bytes kept; the least recently shown page is dropped first.
    """

    def __init__(self, max_pixels: int = MAX_PAGE_PIXELS, cache_bytes: int = CACHE_BYTES) -> None:
        if max_pixels < 50 or cache_bytes < 0:
            raise ValueError(f"max_pixels must be at least 50 and cache_bytes not negative, got {max_pixels}, {cache_bytes}")
        self.max_pixels, self.cache_bytes = int(max_pixels), int(cache_bytes)
        self._images: "OrderedDict[Tuple[str, int, int], PageImage]" = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def cached_bytes(self) -> int:
        """The PNG bytes held now (never more than ``cache_bytes``)."""
        return self._bytes

    def render(self, path: str, page: int) -> PageImage:
        """The page as PNG, its longest side at most ``max_pixels`` pixels (cached).

        Args:
            path: the PDF file.
            page: the page, from 0.

        Returns:
            The [`PageImage`][llama_index_hiqa.views.page_images.PageImage].

        Raises:
            PageImageError: the file or the page cannot be read.
        """
        key = self._key(path, page)
        with self._lock:
            image = self._images.get(key)
            if image is not None:
                self._images.move_to_end(key)
                return image
        import pymupdf

        with self._open(path, page) as (pdf_page, _):
            geometry = _geometry_of(pdf_page)
            zoom = min(self.max_pixels / max(geometry.width, geometry.height, 1.0), MAX_ZOOM)
            pixmap = pdf_page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), alpha=False)
            image = PageImage(pixmap.tobytes("png"), pixmap.width, pixmap.height, geometry)
        with self._lock:
            if key not in self._images and len(image.png) <= self.cache_bytes:
                self._images[key] = image
                self._bytes += len(image.png)
                while self._bytes > self.cache_bytes:
                    _, dropped = self._images.popitem(last=False)
                    self._bytes -= len(dropped.png)
        return image

    @staticmethod
    def _key(path: str, page: int) -> Tuple[str, int, int]:
        # The file's modification time is part of the key: a file re-written is rendered again.
        try:
            mtime = Path(path).stat().st_mtime_ns
        except OSError as exc:
            raise PageImageError(str(path), page, f"the file cannot be read ({exc.strerror or exc})") from exc
        return (str(path), int(page), mtime)

    @staticmethod
    def _open(path: str, page: int) -> "_OpenPage":
        return _OpenPage(str(path), int(page))


class _OpenPage:
    """``with`` an open page of a PDF: the document closes on leaving, whatever happens."""

    def __init__(self, path: str, page: int) -> None:
        self.path, self.page = path, page
        self._pdf: Optional[Any] = None

    def __enter__(self) -> Tuple[Any, Any]:
        import pymupdf

        try:
            pdf = pymupdf.open(self.path)
        # pymupdf raises FileDataError and friends: one typed error naming the file.
        except Exception as exc:
            raise PageImageError(self.path, self.page, f"not a readable PDF ({exc})") from exc
        self._pdf = pdf
        count = pdf.page_count
        if not 0 <= self.page < count:
            pdf.close()
            raise PageImageError(self.path, self.page, f"no such page (the file has {count})")
        return pdf[self.page], pdf

    def __exit__(self, *exc: object) -> None:
        if self._pdf is not None:
            self._pdf.close()


def _geometry_of(page: Any) -> PageGeometry:
    rect = page.rect
    m = page.rotation_matrix
    return PageGeometry(float(rect.width), float(rect.height), (m.a, m.b, m.c, m.d, m.e, m.f))
