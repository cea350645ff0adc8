"""Expert vocabularies: the words a question's concept goes by in the documents that answer it.

HiQA ("HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA" (Chen et al.),
§Multi-Route Retriever) lets human experts add critical keywords to what its named-entity
detection finds. A question often names a concept whose evidence names only its parts: "Does
Verizon have a healthy quick ratio?" is answered by a balance sheet whose lines say "Cash and
cash equivalents", "Accounts receivable" and "Total current liabilities", never "quick ratio";
"legal battles" by the section a filing calls "Legal Proceedings". An
[`ExpertVocabulary`][llama_index_hiqa.vocabularies.ExpertVocabulary] writes such knowledge down
as data: each entry maps a concept (and its other spellings) to the terms its evidence uses,
and says where the mapping comes from (a public definition).

Two vocabularies ship with the package as YAML files users can read and copy:
``finance`` (ratios and metrics -> statement lines, topics -> filing sections, SEC form item
names) and ``datasheets`` (parameter names <-> letter symbols). A user's own YAML or JSON file
of the same shape is loaded by its path. [`load_vocabulary`][llama_index_hiqa.vocabularies.load_vocabulary]
reads and validates one; [`ExpertVocabulary.expand`][llama_index_hiqa.vocabularies.ExpertVocabulary.expand]
finds a question's concepts and returns a
[`VocabularyExpansion`][llama_index_hiqa.vocabularies.VocabularyExpansion], which the
multi-route retriever applies on the question side (the BM25 and keyword routes, the document
focus's heading words) through LlamaIndex's ``QueryBundle`` convention: the expanded text is
the bundle's ``query_str``, the question alone stays its embedding string.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from llama_index_hiqa.errors import VocabularyFileError

__all__ = [
    "SHIPPED_VOCABULARIES",
    "ExpertVocabulary",
    "VocabularyEntry",
    "VocabularyExpansion",
    "VocabularyGroup",
    "load_vocabulary",
    "vocabulary_setting",
]

# The vocabularies shipped as package data (llama_index_hiqa/vocabularies/<name>.yaml).
SHIPPED_VOCABULARIES = ("finance", "datasheets")
# An abbreviation or a letter symbol ("EPS", "PP&E", "VS"): at most this many letters, all
# capitals. It matches in capitals only, so the symbol VS is not the word "vs".
MAX_CASED_LETTERS = 4
MAX_VOCABULARY_BYTES = 5_000_000  # a vocabulary is a list of phrases, not a corpus


def _phrase(text: str) -> str:
    return " ".join(str(text).split())


class VocabularyEntry(BaseModel):
    """One concept: the phrases a question may name it by, and the terms its evidence uses."""

    model_config = ConfigDict(extra="forbid")

    concept: str = Field(min_length=1, description="The concept as a question names it ('quick ratio').")
    aliases: List[str] = Field(default_factory=list, description="Other names of the concept ('acid-test ratio').")
    terms: List[str] = Field(min_length=1, description="The words its evidence uses ('total current liabilities').")
    source: Optional[str] = Field(default=None, description="Where the mapping comes from (else the group's source).")

    @field_validator("concept", "aliases", "terms", mode="after")
    @classmethod
    def _no_blank_phrase(cls, value: Any) -> Any:
        phrases = [value] if isinstance(value, str) else value
        if any(not _phrase(p) or not re.search(r"\w", p) for p in phrases):
            raise ValueError("a phrase must hold a letter or digit")
        return value

    def names(self) -> List[str]:
        """The concept and its aliases, once each."""
        return list(dict.fromkeys(_phrase(p) for p in [self.concept, *self.aliases]))


class VocabularyGroup(BaseModel):
    """Entries that share a source (a definition, a standard, a form's item list)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="What the entries are ('liquidity ratios').")
    source: Optional[str] = Field(default=None, description="The public definition the entries come from.")
    entries: List[VocabularyEntry] = Field(min_length=1, description="The concepts.")


class VocabularyExpansion(NamedTuple):
    """What a vocabulary found in one question: each matched concept with the terms it adds
    (terms the question already says are left out)."""

    question: str
    concepts: Tuple[Tuple[str, Tuple[str, ...]], ...]

    @property
    def terms(self) -> List[str]:
        """The added terms, once each, in the order of the concepts."""
        return list(dict.fromkeys(t for _, terms in self.concepts for t in terms))

    def text(self) -> str:
        """The question followed by the added terms: what the lexical routes search."""
        terms = self.terms
        return self.question if not terms else f"{self.question} {'; '.join(terms)}"

    def explained(self) -> Dict[str, List[str]]:
        """``{concept: [added terms]}``: what a result's ``route_scores["vocabulary"]`` shows."""
        return {concept: list(terms) for concept, terms in self.concepts}

    def __bool__(self) -> bool:
        return bool(self.terms)


class ExpertVocabulary(BaseModel):
    """A domain's expert vocabulary (HiQA's expert keywords, as data): groups of entries, each
    group or entry naming its source. Build it with
    [`load_vocabulary`][llama_index_hiqa.vocabularies.load_vocabulary] (a shipped name or a file)
    or directly from a mapping of the same shape.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="The vocabulary's name.")
    description: str = Field(default="", description="What it covers.")
    groups: List[VocabularyGroup] = Field(min_length=1, description="The entries, grouped by source.")

    def entries(self) -> List[VocabularyEntry]:
        """Every entry, in file order."""
        return [entry for group in self.groups for entry in group.entries]

    def source_of(self, entry: VocabularyEntry) -> Optional[str]:
        """The entry's source, or its group's.

        Args:
            entry: an entry of this vocabulary.

        Returns:
            The source text, ``None`` when neither says one.
        """
        if entry.source:
            return entry.source
        return next((g.source for g in self.groups if any(e is entry for e in g.entries)), None)

    def expand(self, question: str) -> VocabularyExpansion:
        """The concepts ``question`` names (a concept or alias matches whatever its case,
        spacing or hyphens, and with a plural "s"; an abbreviation of at most four capitals in
        capitals only) and the terms each adds.

        Args:
            question: the question.

        Returns:
            The expansion (empty when no concept is named).
        """
        text = question or ""
        said = _squeezed(text)
        found: Dict[str, Tuple[str, ...]] = {}
        for entry, pattern in _patterns(self):
            if entry.concept in found or not pattern.search(text):
                continue
            found[entry.concept] = tuple(t for t in map(_phrase, entry.terms) if _squeezed(t) not in said)
        return VocabularyExpansion(text, tuple((c, t) for c, t in found.items() if t))


def _squeezed(text: str) -> str:
    return re.sub(r"[^\w]+", " ", text.lower()).strip().join("  ")


def _names_pattern(names: List[str]) -> re.Pattern[str]:
    cased: List[str] = []
    uncased: List[str] = []
    for name in sorted(names, key=len, reverse=True):
        parts = [re.escape(p) for p in re.findall(r"[^\W_]+|[^\w\s\-]", name)]
        body = r"[\s\-]*".join(parts) + r"(?:e?s)?"
        letters = [c for c in name if c.isalpha()]
        (cased if 0 < len(letters) <= MAX_CASED_LETTERS and all(c.isupper() for c in letters) else uncased).append(body)
    alternatives = [f"(?-i:{body})" for body in cased] + uncased
    return re.compile(r"(?<![^\W_])(?:" + "|".join(alternatives) + r")(?![^\W_])", re.I)


@lru_cache(maxsize=16)
def _compiled(vocabulary_json: str) -> Tuple[Tuple[VocabularyEntry, re.Pattern[str]], ...]:
    vocabulary = ExpertVocabulary.model_validate_json(vocabulary_json)
    return tuple((entry, _names_pattern(entry.names())) for entry in vocabulary.entries())


def _patterns(vocabulary: ExpertVocabulary) -> Tuple[Tuple[VocabularyEntry, re.Pattern[str]], ...]:
    # Compiled once per vocabulary content (a vocabulary is immutable in practice).
    return _compiled(vocabulary.model_dump_json())


def _read(path: Path, label: str) -> Any:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise VocabularyFileError(label, "", f"cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_VOCABULARY_BYTES:
        raise VocabularyFileError(label, "", f"is larger than {MAX_VOCABULARY_BYTES:,} bytes")
    text = raw.decode("utf-8", errors="replace")
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        import yaml  # type: ignore[import-untyped]  # llama-index-core's dependency; no stubs installed

        return yaml.safe_load(text)
    except (ValueError, ImportError) as exc:  # json.JSONDecodeError is a ValueError
        raise VocabularyFileError(label, "", f"is not valid {path.suffix.lstrip('.').upper() or 'YAML'}: {exc}") from None
    except Exception as exc:  # yaml.YAMLError (imported lazily)
        raise VocabularyFileError(label, "", f"is not valid YAML: {' '.join(str(exc).split())}") from None


def _entry_name(data: Any, loc: Tuple[Any, ...]) -> str:
    """``groups[1].entries[3] ('quick ratio')``: where a validation error lies, with the
    concept it concerns when the file says one."""
    where: List[str] = []
    node, concept = data, None
    for key in loc:
        if isinstance(key, int):
            where[-1:] = [f"{where[-1]}[{key}]" if where else f"[{key}]"]
        else:
            where.append(str(key))
        node = node[key] if isinstance(node, (dict, list)) and _has(node, key) else None
        if isinstance(node, dict) and isinstance(node.get("concept"), str) and node["concept"].strip():
            concept = node["concept"]
    path = ".".join(where)
    return f"{path} ({concept!r})" if concept else path


def _has(node: Any, key: Any) -> bool:
    if isinstance(node, dict):
        return key in node
    return isinstance(key, int) and 0 <= key < len(node)


def _validated(data: Any, label: str) -> ExpertVocabulary:
    if not isinstance(data, dict):
        raise VocabularyFileError(label, "", f"must hold a mapping with 'name' and 'groups', not {type(data).__name__}")
    try:
        return ExpertVocabulary.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise VocabularyFileError(label, _entry_name(data, tuple(error["loc"])), error["msg"]) from None


@lru_cache(maxsize=8)
def _load_file(path: str, mtime_ns: int, label: str) -> ExpertVocabulary:
    return _validated(_read(Path(path), label), label)


def load_vocabulary(vocabulary: Union[str, Path, ExpertVocabulary]) -> ExpertVocabulary:
    """A vocabulary by shipped name (``"finance"``, ``"datasheets"``) or by the path of a YAML
    (``.yaml``/``.yml``) or JSON (``.json``) file of the same shape as the shipped ones.

    Args:
        vocabulary: the name, the path, or a vocabulary (returned as it is).

    Returns:
        The validated vocabulary (cached per file and modification time).

    Raises:
        VocabularyFileError: the name is not shipped and no such file exists, or the file is
            unreadable, not YAML/JSON, or has an unknown key or a bad shape (the error names
            the file and the entry).
    """
    if isinstance(vocabulary, ExpertVocabulary):
        return vocabulary
    if isinstance(vocabulary, str) and vocabulary in SHIPPED_VOCABULARIES:
        resource = resources.files(__name__).joinpath(f"{vocabulary}.yaml")
        with resources.as_file(resource) as path:
            return _load_file(str(path), path.stat().st_mtime_ns, f"{vocabulary} (shipped)")
    path = Path(vocabulary).expanduser()
    if path.suffix.lower() not in (".yaml", ".yml", ".json"):
        raise VocabularyFileError(
            str(vocabulary), "", f"is neither a shipped vocabulary ({', '.join(SHIPPED_VOCABULARIES)}) nor a .yaml/.yml/.json path"
        )
    if not path.is_file():
        raise VocabularyFileError(str(vocabulary), "", "does not exist")
    return _load_file(str(path.resolve()), path.stat().st_mtime_ns, str(vocabulary))


def vocabulary_setting(value: Optional[str]) -> Optional[str]:
    """A settings field's check: ``value`` when it loads (a shipped name or a valid file).

    Args:
        value: the ``expert_vocabulary`` setting.

    Returns:
        ``value``.

    Raises:
        ValueError: it does not load; the message says why (pydantic turns it into the
            settings error naming the field).
    """
    if value is not None:
        try:
            load_vocabulary(value)
        except VocabularyFileError as exc:
            raise ValueError(str(exc)) from None
    return value
