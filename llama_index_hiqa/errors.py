"""Typed errors of the pack: every failure a user can cause has a class and names its input."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Iterable, Mapping, Optional, Union


class HiQAError(Exception):
    """Base class of every error the pack raises on purpose."""


class DocumentReadError(HiQAError):
    """A file could not be read. ``path`` names the file, ``reason`` says why."""

    def __init__(self, path: Union[str, Path], reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class EncryptedDocumentError(DocumentReadError):
    """The PDF is password protected."""


class CorruptDocumentError(DocumentReadError):
    """The file is not a readable document of its type."""


class EmptyDocumentError(DocumentReadError):
    """The file has no pages or no text."""


class UnsupportedDocumentError(DocumentReadError):
    """The file type is not one the reader handles."""


class OfflineModelError(HiQAError):
    """A default model that should ship inside a PyPI package could not be loaded."""


class UnknownEmbedBackendError(HiQAError, ValueError):
    """An embedding backend name the pack does not know; ``backend`` is the name given."""

    def __init__(self, backend: object, known: Iterable[str]) -> None:
        self.backend = backend
        super().__init__(f"embed backend {backend!r} is unknown; choose one of {list(known)}")


class UnserializedPartError(HiQAError, ValueError):
    """``from_dict`` was given a component's dictionary without a part that ``to_dict`` does
    not serialise (an LLM client, an embedding model, a reranker, a tokenizer); ``component``
    and ``part`` name them, and the message says how to pass the part back."""

    def __init__(self, component: str, part: str, kind: str) -> None:
        self.component = component
        self.part = part
        super().__init__(
            f"{component}.from_dict: {part!r} (a {kind}) is not serialised by to_dict; "
            f"pass it back: {component}.from_dict(data, {part}=...)"
        )


class LLMOutputError(HiQAError):
    """An LLM answer could not be used even after retries (malformed, truncated, empty)."""


class UnknownNodeError(HiQAError, KeyError):
    """A node id that the index, docstore or graph does not hold."""


class GraphBuildError(HiQAError):
    """A chunk graph could not be built, extended or loaded (no nodes, duplicate ids,
    embeddings of different dimensions, unreadable persist folder)."""


class RetrievalRouteError(HiQAError):
    """Every route of a multi-route retriever failed. ``errors`` maps route name -> exception."""

    def __init__(self, errors: Mapping[str, BaseException]) -> None:
        self.errors = dict(errors)
        detail = "; ".join(f"{name}: {type(exc).__name__}: {exc}" for name, exc in self.errors.items())
        super().__init__(f"every retrieval route failed ({detail})")


class InvalidMetadataError(HiQAError, ValueError):
    """A node's metadata value has the wrong shape. Names the node, the key and the value."""

    def __init__(self, node_id: str, key: str, reason: str) -> None:
        self.node_id = node_id
        self.key = key
        self.reason = reason
        super().__init__(f"node {node_id}: metadata {key!r}: {reason}")


class RerankerError(HiQAError):
    """A reranker (a LlamaIndex reranker postprocessor) failed. ``source`` names
    which one, ``reason`` says why."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"{source} reranking failed: {reason}")


class EvaluationInputError(HiQAError, ValueError):
    """An evaluator or benchmark got unusable input (empty answer, no context, no questions,
    gold evidence that names nothing); the message says which input and why."""


class PackStoreError(HiQAError, FileNotFoundError):
    """A HiQAPack persist folder is missing, incomplete or was written by another version.
    ``path`` names the folder."""

    def __init__(self, path: Union[str, Path], reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class StoreConflictError(PackStoreError):
    """Another writer saved the folder store after this pack was loaded from it; saving now
    would drop that writer's documents. ``expected`` is the snapshot the pack was loaded from,
    ``found`` the one ``CURRENT`` names now."""

    def __init__(self, path: Union[str, Path], expected: Optional[str], found: Optional[str]) -> None:
        self.expected = expected
        self.found = found
        super().__init__(
            path,
            f"another writer saved this store after it was loaded (loaded {expected}, now {found}); "
            "nothing was saved: load the store again and repeat the change (the `hiqa` command "
            "holds the store's lock from load to save, so two `hiqa ingest --add` runs never conflict)",
        )


class InvalidSettingError(HiQAError, ValueError):
    """A setting or argument of the pack has the wrong type or lies outside its range.
    ``setting`` names it, ``reason`` says what is expected."""

    def __init__(self, setting: str, reason: str) -> None:
        self.setting = setting
        self.reason = reason
        super().__init__(f"{setting}: {reason}")


class VocabularyFileError(HiQAError, ValueError):
    """An expert vocabulary that cannot be used: ``path`` names the file (or the name given),
    ``entry`` where in it the problem lies (``groups[2].entries[0] ('quick ratio')``; empty for
    the whole file), ``reason`` what is wrong."""

    def __init__(self, path: str, entry: str, reason: str) -> None:
        self.path = path
        self.entry = entry
        self.reason = reason
        super().__init__(f"expert vocabulary {path}" + (f", {entry}" if entry else "") + f": {reason}")


class InvalidQuestionError(HiQAError, ValueError):
    """A question the pack cannot use: not a string, or longer than the stated limit
    (``questions.MAX_QUESTION_CHARS``). ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"question: {reason}")


class PathAccessError(HiQAError):
    """The operating system refused a file or folder the pack needs (not writable, full disk,
    not a folder, unreadable). ``path`` names it, ``reason`` says what the system said and what
    to do."""

    def __init__(self, path: Union[str, Path], reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class EmptyCorpusError(HiQAError, ValueError):
    """HiQAPack was given no readable document (an empty folder, or every file failed);
    ``failures`` lists the files that could not be read."""

    def __init__(self, source: Union[str, Path], failures: Iterable[object] = ()) -> None:
        self.source = source
        self.failures = list(failures)
        detail = f"; {len(self.failures)} file(s) unreadable: " + "; ".join(map(str, self.failures[:3])) if self.failures else ""
        super().__init__(f"{source}: no readable .pdf/.html/.docx/.md/.txt document{detail}")


class UndecodableTextError(UnsupportedDocumentError):
    """A ``.txt``/``.md`` file whose bytes are not text the reader can decode: binary data
    (NUL or control bytes, the signature of an image, PDF or archive) or mostly non-ASCII bytes
    in an encoding other than UTF-8, UTF-16 or Windows-1252/Latin-1. The reason says which."""


class SkippedDocumentError(DocumentReadError):
    """A path a folder load deliberately did not read: a symlink whose target lies outside the
    folder (not followed unless asked) or a broken symlink. The reason says which."""


class LLMConfigError(HiQAError, ValueError):
    """An LLM named on the command line (``openai:MODEL``, ``openai-compatible:MODEL``) cannot
    be used: malformed name, missing key or URL, refused connection, rejected key, unknown
    model. ``spec`` names the LLM, ``reason`` says what is wrong in one line."""

    def __init__(self, spec: str, reason: str) -> None:
        self.spec = spec
        self.reason = reason
        super().__init__(f"--llm {spec}: {reason}")


class VectorStoreFeatureError(HiQAError, ValueError):
    """A vector store cannot serve what a component needs of it (for instance listing its
    nodes for the BM25 and keyword routes). Names the store, the feature and the fix; raised
    when the component is built, never at the first question."""

    def __init__(self, store: str, feature: str, fix: str) -> None:
        self.store = store
        self.feature = feature
        self.fix = fix
        super().__init__(f"{store}: {feature}; fix: {fix}")


class IngestionWorkerError(HiQAError):
    """An ingestion worker process ended before returning its batch (killed, out of memory).
    Names the batch's files; nothing of that batch was written, and batches written before it
    are kept (re-ingesting the folder resumes from there)."""

    def __init__(self, files: Iterable[str], reason: str) -> None:
        self.files = list(files)
        super().__init__(
            f"an ingestion worker ended while processing {self.files}: {reason}; nothing of that batch was "
            "written (re-ingest to resume, or use fewer workers / a smaller ingest_batch_size)"
        )


class ExtraNotInstalledError(HiQAError, ImportError):
    """A feature needs an optional part of the pack that is not installed: ``extra`` is the pip
    extra (``ray``), ``package`` the missing module; the message says the install command."""

    def __init__(self, feature: str, extra: str, package: str) -> None:
        self.feature = feature
        self.extra = extra
        self.package = package
        super().__init__(
            f"{feature} needs the {extra!r} extra ({package} is not installed): pip install 'llama-index-hiqa[{extra}]'"
        )


class UnserializableComponentError(HiQAError, TypeError):
    """A component cannot be sent to another process or machine (a Ray worker): it does not
    pickle, or pickling drops a part it needs. Names the component and the reason; raised
    before any work is sent."""

    def __init__(self, component: str, reason: str) -> None:
        self.component = component
        super().__init__(f"{component} cannot be sent to a worker: {reason}")


class MissingExtraError(DocumentReadError):
    """A file needs an optional part of the pack that is not installed: ``extra`` is the
    pip extra (``ocr``, ``html``, ``docx``), ``package`` the missing module; the message says
    the install command. It is a read error of that file, so a folder load records it in
    ``PDFLayoutReader.failures`` and reads the other files."""

    def __init__(self, path: Union[str, Path], extra: str, package: str, need: str) -> None:
        self.extra = extra
        self.package = package
        super().__init__(
            path, f"{need} needs the {extra!r} extra ({package} is not installed): "
            f"pip install 'llama-index-hiqa[{extra}]'"
        )


# What the user can do about the system errors a path meets (one wording for every store and reader).
_FIXES = {
    errno.EACCES: "permission denied; give this user access to it or choose another path",
    errno.EPERM: "operation not permitted; give this user access to it or choose another path",
    errno.EROFS: "the file system is read-only; choose a path on a writable disk",
    errno.ENOSPC: "the disk is full; free some space or choose a path on another disk",
    errno.EDQUOT: "the disk quota is exhausted; free some space or choose a path on another disk",
    errno.ENOTDIR: "a part of the path is a file, not a folder; choose another path",
    errno.EISDIR: "is a folder where a file was expected",
    errno.ENOENT: "does not exist",
    errno.EIO: "input/output error (a failing disk or a network mount); check the disk",
}


def describe_os_error(exc: OSError) -> str:
    """What the system said and what the user can do about it, in one clause.

    Args:
        exc: the system's error.

    Returns:
        The fix for a known ``errno`` (no space, read-only, no rights), else the system's
            message with a hint to check the path.
    """
    fix = _FIXES.get(exc.errno or -1)
    said = exc.strerror or type(exc).__name__
    return fix if fix else f"{said}; check the path and its permissions"
