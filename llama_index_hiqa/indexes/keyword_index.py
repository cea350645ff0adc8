"""The critical-keyword index: the matching form of a keyword and the inverted index keyword
-> node ids that HiQA's keyword route ("HiQA: A Hierarchical Contextual Augmentation RAG for
Multi-Documents QA" (Chen et al.), §Multi-Route Retriever, the ``β·log(1+|C|)`` bonus) and the
IIER chunk graph's keyword edges ("Leveraging Inter-Chunk Interactions for Enhanced Retrieval in
Large Language Model-Based Question Answering" (IIER, Guo et al.) §3.1) count matches with.

The keywords themselves are extracted by
[`CriticalKeywordExtractor`][llama_index_hiqa.transforms.critical_keywords.CriticalKeywordExtractor] into
``schema.CRITICAL_KEYWORDS``; this module reads them and imports nothing but ``schema``, so
retrievers and stores use it without the transform.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, Iterable, List, Set, Union

from llama_index.core.schema import BaseNode

from llama_index_hiqa import schema

__all__ = ["KeywordIndex", "normalize_keyword"]

_LEADING_ARTICLE = re.compile(r"^(?:the|a|an)\s+", re.I)
_POSSESSIVE = re.compile(r"(?:'s|’s|'|’)$", re.I)
# A company's legal form: documents write "Best Buy Co., Inc." where questions say "Best Buy".
_LEGAL_FORM = re.compile(
    r"(?:[\s,]+(?:inc|incorporated|corp|corporation|company|co|plc|ltd|limited|llc|l\.?p|n\.?v|s\.?a|ag|se)\.?)+$",
    re.I,
)


def normalize_keyword(keyword: str) -> str:
    """The matching form of a keyword: case, hyphens, spaces and punctuation removed.

    ``"iPhone 15"``, ``"iphone-15"`` and ``"IPHONE15"`` all become ``"iphone15"``; a leading
    article, a possessive and a trailing legal form are dropped (``"the Coca-Cola Company's"``
    -> ``"cocacola"``, ``"Best Buy Co., Inc."`` -> ``"bestbuy"``), so a company matches the
    way questions name it.

    Args:
        keyword: A keyword as written in a document or a question.

    Returns:
        Its matching form; ``""`` for text with no letters or digits.
    """
    text = unicodedata.normalize("NFKC", str(keyword)).strip()
    text = _POSSESSIVE.sub("", _LEADING_ARTICLE.sub("", text))
    stripped = _LEGAL_FORM.sub("", text)
    text = stripped if re.search(r"\w", stripped) else text  # "Company" alone stays
    return re.sub(r"[\W_]+", "", text.lower())



class KeywordIndex:
    """Inverted index normalised keyword -> node ids, keyed by docstore node ids.

    ``match_counts(keywords)`` gives ``|C|`` for every node holding at least one of the
    query's keywords, without touching the others.
    """

    FILENAME = "keyword_index.json"

    def __init__(self) -> None:
        self._postings: Dict[str, Set[str]] = defaultdict(set)
        self._node_keywords: Dict[str, List[str]] = {}

    @classmethod
    def from_nodes(cls, nodes: Iterable[BaseNode]) -> "KeywordIndex":
        """Index the ``schema.CRITICAL_KEYWORDS`` of each node (run the extractor first).

        Args:
            nodes: The nodes, with their critical keywords in metadata.

        Returns:
            The index over them.
        """
        index = cls()
        for node in nodes:
            index.add(node.node_id, schema.get_critical_keywords(node))
        return index

    def add(self, node_id: str, keywords: Iterable[str]) -> None:
        """Index a node's keywords, replacing what was indexed for it before.

        Args:
            node_id: The node's id.
            keywords: Its keywords, in any form (normalised here; empty ones dropped).
        """
        self.remove(node_id)
        norm = list(dict.fromkeys(k for k in (normalize_keyword(k) for k in keywords) if k))
        self._node_keywords[node_id] = norm
        for keyword in norm:
            self._postings[keyword].add(node_id)

    def remove(self, node_id: str) -> None:
        """Forget a node (nothing happens for a node not indexed).

        Args:
            node_id: The node's id.
        """
        for keyword in self._node_keywords.pop(node_id, []):
            postings = self._postings.get(keyword)
            if postings is not None:
                postings.discard(node_id)
                if not postings:
                    del self._postings[keyword]

    def __len__(self) -> int:
        return len(self._node_keywords)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._node_keywords

    @property
    def node_ids(self) -> List[str]:
        """The indexed node ids, in the order they were added."""
        return list(self._node_keywords)

    def keywords_of(self, node_id: str) -> List[str]:
        """A node's normalised keywords.

        Args:
            node_id: The node's id.

        Returns:
            Its keywords in first-seen order; ``[]`` for a node not indexed.
        """
        return list(self._node_keywords.get(node_id, []))

    def nodes_with(self, keyword: str) -> Set[str]:
        """The nodes holding a keyword.

        Args:
            keyword: The keyword, in any form.

        Returns:
            Their ids.
        """
        return set(self._postings.get(normalize_keyword(keyword), ()))

    def holds(self, node_id: str, keyword: str) -> bool:
        """Whether a node holds a keyword.

        Args:
            node_id: The node's id.
            keyword: The keyword, already in [`normalize_keyword`][llama_index_hiqa.indexes.keyword_index.normalize_keyword] form.

        Returns:
            True when the node holds it.
        """
        return node_id in self._postings.get(keyword, ())

    def document_frequency(self, keyword: str) -> int:
        """How many nodes hold a keyword.

        Args:
            keyword: The keyword, in any form.

        Returns:
            The number of nodes.
        """
        return len(self._postings.get(normalize_keyword(keyword), ()))

    def match_counts(self, keywords: Iterable[str]) -> Dict[str, int]:
        """``|C|`` of every node holding at least one of ``keywords``.

        Args:
            keywords: The query's keywords, in any form (normalised and deduplicated here).

        Returns:
            ``{node_id: number of the keywords it holds}``; nodes holding none are left out.
        """
        counts: Counter[str] = Counter()
        for keyword in dict.fromkeys(normalize_keyword(k) for k in keywords):
            counts.update(self._postings.get(keyword, ()))
        return dict(counts)

    def persist(self, persist_dir: Union[str, Path]) -> Path:
        """Save the index as ``keyword_index.json`` (written to a temporary file, then
        renamed: a crash never leaves a half-written index).

        Args:
            persist_dir: The folder (created when missing).

        Returns:
            The file written.
        """
        path = Path(persist_dir)
        path.mkdir(parents=True, exist_ok=True)
        target = path / self.FILENAME
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps({"node_keywords": self._node_keywords}), encoding="utf-8")
        os.replace(tmp, target)
        return target

    @classmethod
    def from_persist_dir(cls, persist_dir: Union[str, Path]) -> "KeywordIndex":
        """Load an index [`persist`][llama_index_hiqa.indexes.keyword_index.KeywordIndex.persist] saved.

        Args:
            persist_dir: The folder holding ``keyword_index.json``.

        Returns:
            The index.
        """
        data = json.loads((Path(persist_dir) / cls.FILENAME).read_text(encoding="utf-8"))
        index = cls()
        for node_id, keywords in data["node_keywords"].items():
            index.add(node_id, keywords)
        return index
