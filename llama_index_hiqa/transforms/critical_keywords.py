"""Critical keywords (HiQA CNED): the words that tell look-alike documents apart.

HiQA's Multi-Route Retriever ("HiQA: A Hierarchical Contextual Augmentation RAG for
Multi-Documents QA" (Chen et al.), §Multi-Route Retriever) adds a
keyword route: "Critical Named Entity Detection (CNED)", a pre-trained NER model that
extracts the pivotal keywords from documents and queries, plus keywords set by human experts.
The score bonus is ``β·log(1+|C|)`` with ``|C|`` the number of the query's critical keywords a
node contains. This module provides the extraction and the inverted index; the IIER chunk
graph reuses both for its keyword edges ("Leveraging Inter-Chunk Interactions for Enhanced Retrieval
in Large Language Model-Based Question Answering" (IIER, Guo et al.)
§3.1, optional LLM prompt of its appendix A.2).

What counts as a critical keyword (all normalised by [`normalize_keyword`][llama_index_hiqa.indexes.keyword_index.normalize_keyword]):

* named entities from the local spaCy model ([`load_ner_model`][llama_index_hiqa.models.defaults.load_ner_model])
  of the labels in ``ner_labels`` (organisations, products, people, places, laws, ...);
* identifier-like tokens the NER model misses — measured: the packaged model tags none of
  ``ADC12QJ1600-SP``, ``TPS7A4700`` or ``iPhone 15`` usefully. We match them with regular
  expressions over the raw characters rather than spaCy's entity ruler, because spaCy's
  tokenizer splits hyphenated codes (``ADC12QJ1600`` ``-`` ``SP``) and a character pattern sees
  the whole code at no cost: tokens mixing letters and digits with an upper-case letter
  (``OPT3004``, ``10-K``, ``3M``), and a mixed-case or capitalised name followed by a model
  number (``iPhone 15``, ``Pixel 8``);
* SEC form types in any case (``10-K``, ``10q``, ``8k filing``), which tell one company's
  filings of the same year apart;
* years, fiscal years and periods: ``FY2022``/``FY22``/``fiscal 2022`` give ``2022``;
  ``Q2 2023``, ``Q2 of FY2023``, ``FY2023Q2``, ``2023Q2``, ``2Q 2023`` give ``q22023`` and ``2023``;
* expert keywords a user supplies (``expert_keywords``, with ``keyword_aliases`` mapping
  alternative spellings such as ``"JnJ"`` onto one canonical keyword);
* optionally keywords from an LLM with IIER's keyword prompt (``llm=...``).

At ingestion the keywords go into ``node.metadata[schema.CRITICAL_KEYWORDS]`` (hidden from
the embedding and the LLM view); with ``include_document_keywords`` the keywords of the
node's document title are added to every node of that document, so a chunk deep inside a
filing still matches "3M" and "2018". The inverted index keyword -> node ids used at query
time, [`KeywordIndex`][llama_index_hiqa.indexes.keyword_index.KeywordIndex], and the matching form
[`normalize_keyword`][llama_index_hiqa.indexes.keyword_index.normalize_keyword] live in their own module.
"""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import re
from typing import Any, ClassVar, Dict, Iterable, List, Optional, Sequence, Tuple

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, MetadataMode, TransformComponent
from tqdm import tqdm

from llama_index_hiqa.component_dict import PartsRoundTrip
from llama_index_hiqa import schema
from llama_index_hiqa.models.defaults import load_ner_model
from llama_index_hiqa.errors import LLMOutputError
from llama_index_hiqa.transforms.keyword_settings import KeywordSettings
from llama_index_hiqa.indexes.keyword_index import normalize_keyword
from llama_index_hiqa.models.llm_calls import acall_llm, call_llm

logger = logging.getLogger(__name__)

# IIER appendix A.2 (chunks) and A.1 (questions), verbatim apart from the placeholders.
CHUNK_KEYWORD_PROMPT = (
    "Instruction: Please extract the five most representative keywords from the following "
    "text and return them as a list with the keywords separated by commas.\n\n"
    "Example:\n\n"
    "Text: John Cecil, 6th Earl of Exeter (15 May 1674 – 24 December 1721), known as Lord "
    "Burleigh from 1678 to 1700, was a British peer and Member of Parliament. He was the son "
    "of John Cecil, 5th Earl of Exeter, and Anne Cavendish.\n\n"
    "Answer:\n\n"
    "['John Cecil, 6th Earl of Exeter', 'Lord Burleigh', 'British peer', 'Member of "
    "Parliament', 'John Cecil, 5th Earl of Exeter']\n\n"
    "Text: {text} Answer:"
)
QUERY_KEYWORD_PROMPT = (
    "Instruction: Please select all the topics and keywords covered in the following query "
    "and return them as a list with the keywords separated by commas.\n"
    "Example:\n"
    "Question A: When did the people who captured Malakoff come to the region where "
    "Philipsburg is located?\nAnswer A:\n['Philipsburg', 'Malakoff']\n"
    "Question B: When was the first establishment that McDonaldization is named after, open "
    "in the country Horndean is located? Answer B: ['McDonaldization', 'Horndean']\n"
    "Question:\n{text}\nAnswer:"
)


# Letters and digits in one token (hyphens, dots and slashes allowed inside): OPT3004,
# ADC12QJ1600-SP, 10-K, 3M, TPS7A4700. Whole-token match so "ADC12QJ1600-SP" stays one.
_IDENTIFIER = re.compile(r"(?<![\w$€£])([A-Za-z0-9]+(?:[-./][A-Za-z0-9]+)*)(?![\w])")
# A product name followed by a model number: "iPhone 15", "Pixel 8a", "Galaxy S23".
# A product name or code prefix followed by a model number: "iPhone 15", "Pixel 8a",
# "OPT 3004", "ADC 12QJ1600-SP" (people type part numbers with a space in them).
_NAME_NUMBER = re.compile(
    r"(?<![\w-])([A-Za-z]*[A-Z][A-Za-z]*|[A-Z][a-z]{2,})[ -](\d[A-Za-z0-9]*(?:-[A-Za-z0-9]+)*)(?![\w-])"
)
_YEAR = re.compile(r"(?<![\w.,$])((?:19|20)\d{2})(?![\w%]|[.,]\d)")
_FISCAL_YEAR = re.compile(r"\b(?:FY|fiscal(?:\s+year)?)\s*'?((?:19|20)?\d{2})\b", re.I)
_QUARTER = re.compile(
    r"\b(?:FY\s*'?((?:19|20)?\d{2})\s*)?Q([1-4])(?:\s*(?:of\s+)?(?:FY|fiscal(?:\s+year)?)?\s*'?((?:19|20)?\d{2}))?\b",
    re.I,
)
# The same quarter written year first or number first: "2023Q2" (file names, "FY2023Q2"
# without the FY), "4Q 2023" / "4Q23" (earnings releases). All become "q{n}{year}", the form
# "Q2 of FY2023" gives, so a question's quarter matches the document's however each writes it.
_YEAR_QUARTER = re.compile(r"(?<![\w])((?:19|20)\d{2})\s*Q([1-4])(?![\w])", re.I)
_NUMBER_QUARTER = re.compile(r"(?<![\w])([1-4])Q\s*'?((?:19|20)?\d{2})(?![\w])", re.I)
_PERIOD_TOKEN = re.compile(r"^(?:FY|Q[1-4]|(?:19|20)\d{2}Q[1-4]$|[1-4]Q(?:\d{2}|\d{4})?$)", re.I)
# SEC form types, whatever the case or hyphen ("8k filing", "10-Q"): the filing type tells
# a company's 10-K from its 8-K of the same year, and people write it in lower case.
_FORM_TYPE = re.compile(r"(?<![\w-])(10-?[KQ]|8-?K|6-?K|11-?K|20-?F|40-?F)(?![\w-])", re.I)
_ORDINAL = re.compile(r"^\d+(?:st|nd|rd|th)$", re.I)
_UNIT = re.compile(r"^\d+(?:[.,]\d+)?(?:mm|bn|x|s|km|kg|g|mg|ml|l|v|mv|w|kw|mw|hz|khz|mhz|ghz|ms|us|ns|h)$", re.I)
# Capitalised words that precede numbers in every document of a collection; keywords made of
# them would match everywhere and tell nothing apart.
_NAME_STOPWORDS = {
    "item", "note", "notes", "page", "table", "part", "section", "figure", "fig", "chapter",
    "appendix", "exhibit", "schedule", "step", "level", "rule", "article", "version", "rev",
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug",
    "sep", "sept", "oct", "nov", "dec", "the", "and", "for", "with", "from", "over", "under",
}
def _two_digit_year(value: str) -> str:
    return value if len(value) == 4 else ("20" + value if int(value) < 70 else "19" + value)


def _rule_keywords(text: str) -> List[str]:
    """Identifiers, product numbers, years and fiscal periods found by character patterns."""
    found: List[str] = []
    for match in _IDENTIFIER.finditer(text):
        token = match.group(1)
        has_digit = any(c.isdigit() for c in token)
        has_alpha = any(c.isalpha() for c in token)
        # An upper-case letter tells a code ("3M", "10-K") from a unit ("5m", "12th").
        if not (has_digit and has_alpha) or not any(c.isupper() for c in token):
            continue
        if _FORM_TYPE.fullmatch(token):
            continue  # form types (below, in any case)
        if _ORDINAL.match(token) or _UNIT.match(token) or _PERIOD_TOKEN.match(token):
            continue  # ordinals, quantities and fiscal periods (handled below)
        found.append(token)
    found.extend(match.group(1).upper() for match in _FORM_TYPE.finditer(text))
    for match in _NAME_NUMBER.finditer(text):
        name, number = match.group(1), match.group(2)
        if name.lower() in _NAME_STOPWORDS or _YEAR.fullmatch(number) or _ORDINAL.match(number):
            continue
        if _UNIT.match(number) or _FORM_TYPE.fullmatch(number) or _PERIOD_TOKEN.match(number):
            continue  # "AMCOR 8k" names a filing and "AMCOR 2023Q2" a period, not a product
        found.append(f"{name} {number}")
    for match in _QUARTER.finditer(text):
        year = match.group(1) or match.group(3)
        if year:
            year = _two_digit_year(year)
            found.append(f"Q{match.group(2)} {year}")
            found.append(year)
    # The quarter only: a title's "2023Q2" must not also claim the fiscal year, or a 10-Q would
    # match an annual question ("FY2023") as well as the 10-K of that year does.
    for match in _YEAR_QUARTER.finditer(text):
        found.append(f"Q{match.group(2)} {match.group(1)}")
    for match in _NUMBER_QUARTER.finditer(text):
        found.append(f"Q{match.group(1)} {_two_digit_year(match.group(2))}")
    for match in _FISCAL_YEAR.finditer(text):
        found.append(_two_digit_year(match.group(1)))
    found.extend(match.group(1) for match in _YEAR.finditer(text))
    return found


# A failing LLM must not lose the NER/rule keywords: one attempt, then those alone.
_KEYWORD_LLM_CALL: Dict[str, Any] = dict(
    what="keyword LLM call", instead="using NER/rule keywords only", fallback=lambda _error: None
)

MAX_LLM_KEYWORDS = 50  # more "keywords" than this is prose, not a list
MAX_LLM_KEYWORD_CHARS = 100  # a longer "keyword" is a sentence


def parse_keyword_list(answer: str, *, strict: bool = False) -> List[str]:
    """The keywords of an LLM's answer to a keyword prompt (IIER's prompts, "Empowering Large
    Language Models to Set up a Knowledge Retrieval Indexer via Self-Learning" §A.1).

    Read, in order: a Python/JSON list anywhere in the answer (``Answer: ["x", "y"]``); the
    quoted strings between its brackets; the comma- or line-separated text between its
    brackets, or of the whole answer (``Philipsburg, Malakoff``). An answer with no keyword,
    more than ``MAX_LLM_KEYWORDS`` of them, or one longer than ``MAX_LLM_KEYWORD_CHARS``
    characters is not a keyword list.

    ``strict`` says what happens then: ``False`` (the extractor at ingestion) returns ``[]``
    so the NER/rule keywords stand alone; ``True`` (the chunk graph's question prompt, which
    has a fallback of its own) raises [`LLMOutputError`][llama_index_hiqa.errors.LLMOutputError].

    Args:
        answer: The LLM's answer.
        strict: Raise on an answer that is not a keyword list (else log and return ``[]``).

    Returns:
        The keywords, as written in the answer.

    Raises:
        LLMOutputError: With ``strict``, when the answer is not a keyword list.
    """
    text = (answer or "").strip()
    start, end = text.find("["), text.rfind("]")
    if start != -1 and end > start:
        for loader in (json.loads, ast.literal_eval):
            try:
                value = loader(text[start : end + 1])
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(value, (list, tuple)):
                words = [str(v).strip() for v in value if str(v).strip()]
                if words:
                    return words
        body = text[start + 1 : end]
        quoted = [a or b for a, b in re.findall(r"'([^']*)'|\"([^\"]*)\"", body) if (a or b).strip()]
        if quoted:
            return quoted
        text = body
    parts = [p.strip(" '\"\n") for p in re.split(r"[,\n]", text)]
    parts = [p for p in parts if normalize_keyword(p)]
    if parts and len(parts) <= MAX_LLM_KEYWORDS and all(len(p) <= MAX_LLM_KEYWORD_CHARS for p in parts):
        return parts
    if strict:
        raise LLMOutputError(f"no keyword list in the LLM answer: {text[:200]!r}")
    logger.warning("no keyword list in the LLM answer, ignored: %r", text[:200])
    return []


class CriticalKeywordExtractor(PartsRoundTrip, TransformComponent, KeywordSettings):
    """Extracts HiQA's critical keywords (NER + identifier rules + expert keywords [+ LLM]).

    Use it in an ``IngestionPipeline`` (writes ``schema.CRITICAL_KEYWORDS``), call
    [`extract`][llama_index_hiqa.transforms.critical_keywords.CriticalKeywordExtractor.extract] on any text and [`extract_query`][llama_index_hiqa.transforms.critical_keywords.CriticalKeywordExtractor.extract_query] on a question. Every keyword is
    returned in its [`normalize_keyword`][llama_index_hiqa.indexes.keyword_index.normalize_keyword] form, unique, in order of first appearance.
    Its settings are the [`KeywordSettings`][llama_index_hiqa.transforms.keyword_settings.KeywordSettings] fields (validated, an
    unknown one refused), plus an optional ``llm`` and ``show_progress``.
    """

    part_names: ClassVar[Tuple[str, ...]] = ("llm",)  # not serialised: component_dict

    llm: Optional[LLM] = Field(
        default=None,
        description="Optional LLM asked with IIER's keyword prompts; None: no LLM calls.",
        exclude=True,
    )
    show_progress: bool = Field(default=False, description="Show a progress bar.")

    _expert_pattern: Optional[re.Pattern[str]] = PrivateAttr(default=None)
    _expert_canonical: Dict[str, str] = PrivateAttr(default_factory=dict)
    # Title -> its keywords. A store's routes are rebuilt after every write and read every
    # document's title again (seconds at 20,000 titles); what a title gives depends only on
    # the settings, fixed at construction as the expert pattern is.
    _title_memo: Dict[str, List[str]] = PrivateAttr(default_factory=dict)

    def __init__(self, **data: Any) -> None:
        data.pop("class_name", None)  # LlamaIndex's serialisation marker, in saved settings
        super().__init__(**data)
        self._build_expert_pattern()

    @classmethod
    def class_name(cls) -> str:
        return "CriticalKeywordExtractor"

    # -- expert keywords -------------------------------------------------------------------
    def _build_expert_pattern(self) -> None:
        phrases: Dict[str, str] = {}
        for keyword in self.expert_keywords:
            if normalize_keyword(keyword):
                phrases[keyword] = keyword
        for alias, canonical in self.keyword_aliases.items():
            if normalize_keyword(alias) and normalize_keyword(canonical):
                phrases[alias] = canonical
        self._expert_canonical = {normalize_keyword(k): v for k, v in phrases.items()}
        if not phrases:
            self._expert_pattern = None
            return
        # Each phrase matches with any case and any run of spaces, hyphens or nothing between
        # its parts, so "Coca Cola" finds "Coca-Cola" and "COCACOLA".
        alternatives = []
        for phrase in sorted(phrases, key=len, reverse=True):
            parts = [re.escape(p) for p in re.findall(r"[^\W_]+|[^\w\s\-]", phrase)]
            alternatives.append(r"[\s\-_]*".join(parts))
        self._expert_pattern = re.compile(
            r"(?<![^\W_])(?:" + "|".join(alternatives) + r")(?![^\W_])", re.I
        )

    def _expert_keywords_in(self, text: str) -> List[str]:
        if self._expert_pattern is None:
            return []
        found = []
        for match in self._expert_pattern.finditer(text):
            canonical = self._expert_canonical.get(normalize_keyword(match.group(0)))
            if canonical:
                found.append(canonical)
        return found

    # -- extraction ------------------------------------------------------------------------
    def _finish(self, raw: Iterable[str]) -> List[str]:
        out: Dict[str, None] = {}
        for keyword in raw:
            canonical = self._expert_canonical.get(normalize_keyword(keyword), keyword)
            norm = normalize_keyword(canonical)
            if len(norm) >= self.min_length:
                out.setdefault(norm, None)
        return list(out)

    def _ner_keywords(self, doc: Any) -> List[str]:
        labels = set(self.ner_labels)
        return [ent.text for ent in doc.ents if ent.label_ in labels]

    def _nlp(self) -> Any:
        return load_ner_model() if self.use_ner else None

    def _extract_many(self, texts: Sequence[str], ner: bool = True) -> List[List[str]]:
        """Keywords of each text (no LLM); NER (when ``ner`` and ``use_ner``) runs batched."""
        raw: List[List[str]] = [[] for _ in texts]
        if self.use_ner and ner and texts:
            nlp = self._nlp()
            disable = _pipes_not_needed_for_ner(nlp)
            docs = nlp.pipe(texts, batch_size=self.ner_batch_size, disable=disable)
            if self.show_progress:
                docs = tqdm(docs, total=len(texts), desc="critical keywords (NER)")
            for i, doc in enumerate(docs):
                raw[i].extend(self._ner_keywords(doc))
        for i, text in enumerate(texts):
            raw[i].extend(self._expert_keywords_in(text))
            if self.use_rules:
                raw[i].extend(_rule_keywords(text))
        return [self._finish(keywords) for keywords in raw]

    def extract(self, text: str) -> List[str]:
        """Normalised critical keywords of ``text`` (NER, rules, expert keywords; LLM if set).

        Args:
            text: Any text.

        Returns:
            Its keywords in [`normalize_keyword`][llama_index_hiqa.indexes.keyword_index.normalize_keyword] form, unique, in order of first appearance.
        """
        keywords = self._extract_many([text or ""])[0]
        if self.llm is not None and (text or "").strip():
            keywords = self._finish(keywords + self._llm_keywords(CHUNK_KEYWORD_PROMPT, text))
        return keywords

    def extract_query(self, question: str) -> List[str]:
        """Normalised critical keywords of a question (IIER's question prompt when an LLM is set).

        Args:
            question: The question.

        Returns:
            Its keywords in [`normalize_keyword`][llama_index_hiqa.indexes.keyword_index.normalize_keyword] form, unique, in order of first appearance.
        """
        keywords = self._extract_many([question or ""])[0]
        if self.llm is not None and (question or "").strip():
            keywords = self._finish(keywords + self._llm_keywords(QUERY_KEYWORD_PROMPT, question))
        return keywords

    def _llm_keywords(self, prompt: str, text: str) -> List[str]:
        answer = call_llm(lambda: self.llm.complete(prompt.format(text=text)).text, **_KEYWORD_LLM_CALL)
        return [] if answer is None else parse_keyword_list(answer)

    async def _allm_keywords(self, prompt: str, text: str) -> List[str]:
        async def ask() -> str:
            return (await self.llm.acomplete(prompt.format(text=text))).text

        answer = await acall_llm(ask, **_KEYWORD_LLM_CALL)
        return [] if answer is None else parse_keyword_list(answer)

    # -- ingestion -------------------------------------------------------------------------
    def _node_text(self, node: BaseNode) -> str:
        # The node's own text, without any metadata view: keywords describe the content.
        return node.get_content(metadata_mode=MetadataMode.NONE)

    def title_keywords(self, titles: Sequence[str]) -> List[List[str]]:
        """The keywords of each document title (what ``include_document_keywords`` copies
        onto the document's nodes).

        File-style ids ("3M_2018_10K") carry their facts between underscores, so those count
        as spaces.

        Args:
            titles: The document titles.

        Returns:
            The keywords of each title, in the order of ``titles``.
        """
        memo = self._title_memo  # bound once: a private attribute read costs microseconds each
        spaced = [t.replace("_", " ") for t in titles]
        new = [t for t in dict.fromkeys(spaced) if t not in memo]
        if new:
            memo.update(zip(new, self._extract_many(new)))
        return [list(memo[t]) for t in spaced]

    def _document_keywords(self, nodes: Sequence[BaseNode]) -> List[List[str]]:
        if not self.include_document_keywords:
            return [[] for _ in nodes]
        return self.title_keywords([schema.get_document_title(n) for n in nodes])

    def _write(self, nodes: Sequence[BaseNode], per_node: Sequence[List[str]]) -> None:
        for node, doc_keywords, keywords in zip(nodes, self._document_keywords(nodes), per_node):
            schema.set_critical_keywords(node, self._finish(doc_keywords + keywords))
            schema.hide_from_views(node, (schema.CRITICAL_KEYWORDS,))

    def _ner_on_text(self, n_nodes: int) -> bool:
        if self.ner_max_nodes is None or n_nodes <= self.ner_max_nodes:
            return True
        if self.use_ner:
            logger.info(
                "critical keywords: %d nodes > ner_max_nodes=%d, NER reads titles and questions only",
                n_nodes, self.ner_max_nodes,
            )
        return False

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        """Write ``schema.CRITICAL_KEYWORDS`` on every node (hidden from both views)."""
        texts = [self._node_text(n) for n in nodes]
        per_node = self._extract_many(texts, ner=self._ner_on_text(len(texts)))
        if self.llm is not None:
            per_node = [
                kws + self._llm_keywords(CHUNK_KEYWORD_PROMPT, t) if t.strip() else kws
                for kws, t in zip(per_node, texts)
            ]
        self._write(nodes, per_node)
        return nodes

    async def acall(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        """As `__call__`, with the LLM calls (if any) run concurrently.

        Args:
            nodes: The nodes.
            **kwargs: Ignored (LlamaIndex's transform interface).

        Returns:
            The same nodes, with ``schema.CRITICAL_KEYWORDS`` written.
        """
        if self.llm is None:
            return self.__call__(nodes, **kwargs)
        texts = [self._node_text(n) for n in nodes]
        per_node = self._extract_many(texts, ner=self._ner_on_text(len(texts)))
        semaphore = asyncio.Semaphore(max(1, self.llm_num_workers))

        async def one(text: str) -> List[str]:
            if not text.strip():
                return []
            async with semaphore:
                return await self._allm_keywords(CHUNK_KEYWORD_PROMPT, text)

        llm_keywords = await asyncio.gather(*(one(t) for t in texts))
        self._write(nodes, [a + b for a, b in zip(per_node, llm_keywords)])
        return nodes


def _pipes_not_needed_for_ner(nlp: Any) -> List[str]:
    """Every pipe but ``ner`` and what it listens to. The parser and lemmatizer triple the
    cost; in the small English models ``ner`` has its own embedding layer, and the shared
    ``tok2vec`` (a third of the remaining time) feeds only the tagger and parser."""
    needed = {"ner"}
    for name in nlp.pipe_names:
        listeners = getattr(nlp.get_pipe(name), "listening_components", None) or []
        if "ner" in listeners:
            needed.add(name)
    return [p for p in nlp.pipe_names if p not in needed]
