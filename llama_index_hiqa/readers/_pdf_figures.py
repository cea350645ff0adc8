"""The figures of a PDF for [`PDFLayoutReader`][llama_index_hiqa.readers.pdf.PDFLayoutReader]: where each
image is, its caption, where in the text it sits and the file it is saved under.
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import AbstractSet, Any, Dict, List, Optional, Tuple

from llama_index_hiqa.readers._page_layout import _offset_below, _PageLines
from llama_index_hiqa.readers.ocr import is_scan_image

logger = logging.getLogger(__name__)

# Captions of figures: the nearest line that starts like one wins over merely near text.
_CAPTION_RE = re.compile(r"^\s*(fig(ure)?\.?|image|photo|diagram|chart|plate)\s*\d*", re.I)


def pdf_images(
    settings: Any, pdf: Any, pages: List["_PageLines"], text: str, spans: List[List[int]], scanned: AbstractSet[int] = frozenset()
) -> List[Dict[str, Any]]:
    """The figures of a PDF: page, bounding box, caption, where in the text they sit, file name.

    Args:
        settings: The reader (its layout settings).
        pdf: The open ``pymupdf`` document.
        pages: The pages' lines.
        text: The document's Markdown.
        spans: ``[page, start, end]`` of each page in ``text``.
        scanned: Page numbers read by OCR (their own scan is not a figure).

    Returns:
        One dict per figure (``page``, ``bbox``, ``caption``, ``char_offset``, ``xref``, ``file``).
    """
    images: List[Dict[str, Any]] = []
    for (page_no, start, end), page in zip(spans, pages):
        try:
            # digest: MuPDF's MD5 of the image, its content hash (the file name it is saved
            # under, see llama_index_hiqa.figures); xref: where to read its bytes again.
            infos = pdf[page_no].get_image_info(hashes=True, xrefs=True)
        # Safe: images are extras (figures); the page's text is read all the same.
        except Exception as exc:
            logger.debug("no image info on page %s (%s)", page_no + 1, exc)
            continue
        for info in infos:
            bbox = [round(float(v), 1) for v in info.get("bbox", (0, 0, 0, 0))]
            if bbox[2] - bbox[0] < 2 or bbox[3] - bbox[1] < 2:
                continue
            if page_no in scanned and is_scan_image(bbox, page):
                continue  # the page's own scan, read by OCR: not a figure
            xref = int(info.get("xref") or 0)
            digest = info.get("digest") or b""
            caption = image_caption(settings, bbox, page)
            offset = start
            if caption:
                idx = text.find(caption, start, end)
                offset = idx if idx >= 0 else start
            else:
                offset = _offset_below(bbox, page, text, start, end)
            images.append(
                {"page": page_no, "bbox": bbox, "caption": caption, "char_offset": offset,
                 "xref": xref, "file": image_file_name(pdf, xref, digest, page_no, bbox)}
            )
    return images

def image_caption(settings: Any, bbox: List[float], page: "_PageLines") -> str:
    """The nearest line below (else above) the image; lines that read like captions first.

    Args:
        settings: The reader (its layout settings).
        bbox: The image's bounding box.
        page: Its page's lines.

    Returns:
        The caption, or ``""``.
    """
    best: Optional[Tuple[int, float, str]] = None
    for line in page.lines:
        text = line.text.strip()
        if not text:
            continue
        x0, y0, x1, y1 = line.bbox
        if x1 < bbox[0] - 5 or x0 > bbox[2] + 5:
            continue
        if y0 >= bbox[3] - 2:
            distance = y0 - bbox[3]
        elif y1 <= bbox[1] + 2:
            distance = (bbox[1] - y1) * 1.5  # captions sit below images more often
        else:
            continue
        if distance > settings.caption_distance:
            continue
        rank = (0 if _CAPTION_RE.match(text) else 1, distance, text)
        if best is None or rank < best:
            best = rank
    return best[2] if best else ""




def image_file_name(pdf: Any, xref: int, digest: bytes, page_no: int, bbox: List[float]) -> str:
    """``<content hash>.<ext>``: JPEG images are kept as they are stored, others become PNG.

    Without MuPDF's digest the hash is taken over where the image is (file-stable, not global).

    Args:
        pdf: The open ``pymupdf`` document.
        xref: The image's cross-reference number (0: unknown).
        digest: MuPDF's MD5 of the image (may be empty).
        page_no: Its page, from 0.
        bbox: Its bounding box.

    Returns:
        The file name.
    """
    content = digest.hex() if digest else hashlib.md5(f"{page_no}:{xref}:{bbox}".encode()).hexdigest()
    ext = "png"
    if xref:
        try:
            if "DCTDecode" in str(pdf.xref_get_key(xref, "Filter")[1]):
                ext = "jpg"
        # Safe: an odd xref only changes the file suffix (saved as PNG).
        except Exception as exc:
            logger.debug("no image filter for xref %s (%s); saved as PNG", xref, exc)
    return f"{content}.{ext}"
