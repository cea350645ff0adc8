"""Text every tokenizer accepts: lone surrogates (a command-line argument's stray bytes)
repaired, so one bad byte never sinks a question or a batch."""

from __future__ import annotations


def valid_unicode(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, the replacement character.

    Python keeps the bytes of a command-line argument that are not UTF-8 as lone surrogates
    (PEP 383, "Non-decodable Bytes in System Character Interfaces"); tokenizers written in Rust
    refuse such a string with a ``TypeError``. A question with one stray byte is still a
    question: the byte becomes U+FFFD and the rest is answered.

    Args:
        text: any string.

    Returns:
        ``text`` itself when it is valid, else the repaired copy.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        # surrogateescape gives back the original bytes of an argument (then decoded with
        # replacement); surrogatepass covers any other lone surrogate.
        try:
            raw = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raw = text.encode("utf-8", "surrogatepass")
        return raw.decode("utf-8", "replace")
