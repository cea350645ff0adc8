"""Status lines: what a step that takes seconds is doing, said before it starts.

Loading the packaged embedding model (exporting it to ONNX on the first run), loading spaCy's
NER model and reading a folder take seconds to tens of seconds before anything else happens;
a user who sees nothing for that long assumes a hang. Each such step first writes one line
to stderr (``llama_index_hiqa: loading the embedding model ...``) through the standard
``logging`` logger `STATUS_LOGGER` at ``INFO``, which has its own stderr handler (so the
lines show without any logging setup, as ``transformers`` does for its own) and does not
propagate (an application's root handler does not print them twice).

Progress *bars* are LlamaIndex's convention, ``show_progress`` (off by default); status lines
are on by default. Silence them with the standard call
``logging.getLogger("llama_index_hiqa.progress").setLevel(logging.WARNING)`` (``hiqa ... --quiet``
does).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from typing import Iterator, TextIO

STATUS_LOGGER = "llama_index_hiqa.progress"
STATUS_PREFIX = "llama_index_hiqa: "

_logger = logging.getLogger(STATUS_LOGGER)
_configured = threading.Lock()


class _StderrHandler(logging.StreamHandler):
    """A stream handler on the ``sys.stderr`` of the moment (a test's captured stderr, a
    notebook's), not the one there was when the handler was made."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:  # noqa: D401 - the property logging.StreamHandler reads
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:  # StreamHandler.__init__ assigns it; the property decides
        pass


def _configure() -> None:
    """Give the status logger its stderr handler once (the level stays the user's if set)."""
    with _configured:
        if any(isinstance(h, _StderrHandler) for h in _logger.handlers):
            return
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter(STATUS_PREFIX + "%(message)s"))
        _logger.addHandler(handler)
        _logger.propagate = False
        if _logger.level == logging.NOTSET:
            _logger.setLevel(logging.INFO)


def status(message: str) -> None:
    """Say on stderr what a slow step is about to do (one line, flushed).

    Args:
        message: the step, e.g. ``"loading the spaCy NER model en_core_web_sm ..."``.
    """
    _configure()
    _logger.info(message)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No status lines inside the block (``hiqa ingest --quiet``); the level is restored after.

    Yields:
        ``None``, while the block runs.
    """
    _configure()
    level = _logger.level
    _logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        _logger.setLevel(level)


__all__ = ["STATUS_LOGGER", "quiet", "status"]
