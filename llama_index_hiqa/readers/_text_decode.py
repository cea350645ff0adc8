"""Decode a ``.txt``/``.md`` file, refusing binary data instead of indexing it as mojibake.

A text file is read as UTF-8 (a UTF-8 byte-order mark is dropped), as UTF-16 when it starts
with a UTF-16 byte-order mark, else as Windows-1252 (Latin-1 for the five bytes Windows-1252
leaves undefined), which keeps every byte of legacy Western European text. A UTF-8 file with
a few stray legacy bytes (more valid multi-byte UTF-8 sequences than invalid bytes, as after
pasting from an old file) stays UTF-8, only the stray bytes read as Windows-1252: decoding the
whole file as Windows-1252 would turn each of its UTF-8 characters into mojibake ("CafÃ©").
What is refused, with [`UndecodableTextError`][llama_index_hiqa.errors.UndecodableTextError]:

* the signature of a known binary format (a PNG renamed ``.txt``, a PDF renamed ``.md``);
* NUL bytes (no text encoding other than UTF-16/32 has them, and those need a byte-order mark);
* more than 1 character in 100 being a control character other than tab, newline, carriage
  return, form feed, vertical tab or escape (ANSI colour codes in logs are text);
* a file that is not UTF-8 and whose non-blank characters are more than 30% non-ASCII: random
  bytes, or text in a legacy encoding (Windows-1251, Shift-JIS, ...) that a single-byte
  Western decoding would turn into mojibake. The user converts it to UTF-8.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path
from typing import Optional, Tuple

from llama_index_hiqa.errors import UndecodableTextError

# Leading bytes of binary formats users plausibly rename or mislabel: named in the error.
_SIGNATURES: Tuple[Tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"%PDF-", "a PDF (give it the .pdf suffix)"),
    (b"PK\x03\x04", "a ZIP archive (or a .docx/.xlsx/.pptx file)"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an old Microsoft Office file (.doc/.xls)"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"\x7fELF", "an executable (ELF)"),
    (b"SQLite format 3\x00", "an SQLite database"),
)
# Unicode category Cc minus tab, newline, vertical tab, form feed, carriage return and escape.
_CONTROL_RE = re.compile("[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f-\x9f]")
_HIGH_BYTES = bytes(range(128, 256))
_UTF8_MULTIBYTE_RE = re.compile(rb"[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}")
_ERROR_HANDLER = "llama_index_hiqa.utf8_with_legacy_bytes"
_SPACE_BYTES = b" \t\n\r\f\v"
MAX_CONTROL_SHARE = 0.01
MAX_NON_ASCII_SHARE_LEGACY = 0.30


def decode_text(path: Path, raw: bytes) -> str:
    """The text of a ``.txt``/``.md`` file's bytes.

    Args:
        path: the file, named in errors.
        raw: its bytes.

    Returns:
        The decoded text.

    Raises:
        UndecodableTextError: the bytes are binary data (a known file type, a NUL byte) or a
            UTF-16 byte-order mark over bytes that are not UTF-16 (names ``path``).
    """
    for signature, kind in _SIGNATURES:
        if raw.startswith(signature):
            raise UndecodableTextError(path, f"binary data, not text: the file is {kind}")
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) and not raw.startswith(codecs.BOM_UTF32_LE):
        try:
            text = raw.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise UndecodableTextError(path, f"starts with a UTF-16 byte-order mark but is not UTF-16 ({exc.reason} at byte {exc.start})") from exc
        _check_controls(path, text)
        return text
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise UndecodableTextError(path, f"binary data, not text: NUL byte at offset {nul}")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = _decode_mostly_utf8(raw)
        if text is None:
            text = _decode_legacy(path, raw)
    _check_controls(path, text)
    return text


def _decode_mostly_utf8(raw: bytes) -> Optional[str]:
    """UTF-8 with its invalid bytes read as Windows-1252, when UTF-8 explains most of the file."""
    sequences = _UTF8_MULTIBYTE_RE.findall(raw)
    high_bytes = len(raw) - len(raw.translate(None, _HIGH_BYTES))
    stray = high_bytes - sum(map(len, sequences))  # non-ASCII bytes no UTF-8 sequence explains
    if len(sequences) <= stray:
        return None
    return raw.decode("utf-8-sig", errors=_ERROR_HANDLER)


def _legacy_bytes(exc: UnicodeError) -> Tuple[str, int]:
    """Codec error handler: the invalid bytes as Windows-1252 (Latin-1 where it has none)."""
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    chars = []
    for byte in exc.object[exc.start:exc.end]:
        try:
            chars.append(bytes([byte]).decode("cp1252"))
        except UnicodeDecodeError:
            chars.append(chr(byte))
    return "".join(chars), exc.end


codecs.register_error(_ERROR_HANDLER, _legacy_bytes)


def _decode_legacy(path: Path, raw: bytes) -> str:
    try:
        text = raw.decode("cp1252")
    except UnicodeDecodeError:  # 0x81, 0x8D, 0x8F, 0x90, 0x9D: Latin-1 keeps them as they are
        text = raw.decode("latin-1")
    # Counted on the bytes: in a single-byte decoding one byte is one character.
    visible = len(raw.translate(None, _SPACE_BYTES))
    share = (len(raw) - len(raw.translate(None, _HIGH_BYTES))) / max(1, visible)
    if share > MAX_NON_ASCII_SHARE_LEGACY:
        raise UndecodableTextError(
            path,
            f"not UTF-8, and {share:.0%} of its characters are non-ASCII bytes: binary data or text "
            "in a legacy encoding other than Windows-1252/Latin-1; convert it to UTF-8",
        )
    return text


def _check_controls(path: Path, text: str) -> None:
    controls = len(_CONTROL_RE.findall(text))
    if controls and controls > MAX_CONTROL_SHARE * len(text):
        raise UndecodableTextError(
            path, f"binary data, not text: {controls} of {len(text)} characters are control characters"
        )
