"""An optional LLM rewrite of the question: the words its concepts' evidence uses.

A question names a concept ("Does 3M have a healthy quick ratio?"); the page that answers it
holds the concept's parts ("cash and cash equivalents", "accounts receivable", "total current
liabilities") and never the concept's name. The expert vocabulary (``expert_vocabulary``,
``llama_index_hiqa.vocabularies``) adds those parts for the concepts it lists;
with an LLM, [`QuestionRewriter`][llama_index_hiqa.retrievers.question_rewrite.QuestionRewriter]
asks for them for any concept, in the spirit of HyDE ("Precise Zero-Shot Dense Retrieval
without Relevance Labels", §3: let a generator write what the evidence would say). Unlike HyDE
the answer is not embedded: its terms are added, as the vocabulary's are, to the lexical routes
and the heading words inside the documents the question is about (the document focus), and
the question's embedding stays its own. Each result's ``route_scores["vocabulary"]["rewrite"]``
shows the terms.

The call goes through the pack's LLM-call policy ([`call_llm`][llama_index_hiqa.models.llm_calls.call_llm]:
time limit, retries with backoff); an answer without a usable term counts as a failed attempt,
and when every attempt failed the documented fallback is the question unrewritten (one
warning in the log). No LLM, or ``enabled=False``: no call at all.
"""

from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple

from llama_index.core.llms import LLM
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_hiqa.models.llm_calls import LLMCallPolicy, acall_llm, call_llm
from llama_index_hiqa.retrievers.settings import QuestionRewriteSettings
from llama_index_hiqa.vocabularies import VocabularyExpansion

__all__ = [
    "QUESTION_REWRITE_PROMPT", "REWRITE", "FocusRewrite", "QuestionRewriter", "parse_rewrite_terms", "rewritten_question",
    "with_rewrite",
]

REWRITE = "rewrite"  # the rewrite's key among route_scores["vocabulary"]'s concepts

QUESTION_REWRITE_PROMPT = (
    "Here is a question about a document. List the words and line items that the document's "
    "text and tables use for what the question asks about: the parts of each concept it names "
    "(for 'quick ratio': cash and cash equivalents, marketable securities, accounts receivable, "
    "total current liabilities). Write one term per line, at most {max_terms} terms, without "
    "numbers, explanations or the question's own words.\n\nQuestion: {question}\nTerms:\n"
)

_SEPARATORS = re.compile(r"[\n;,]+")
_BULLET = re.compile(r"^\s*(?:[-*•]+|\d+[.)])\s*")
_MAX_TERM_WORDS = 6  # a line item, not a sentence


def _squeezed(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def parse_rewrite_terms(answer: str, question: str, max_terms: int) -> List[str]:
    """The terms of an LLM's answer: one per line (or comma/semicolon), bullets and numbering
    and quotes taken off, each once (whatever its case), without terms the question already
    says and without sentences (more than six words).

    Args:
        answer: the LLM's answer.
        question: the question.
        max_terms: the most terms kept.

    Returns:
        The terms, in the answer's order (``[]``: nothing usable).
    """
    said = f" {_squeezed(question)} "
    terms: dict[str, str] = {}
    for part in _SEPARATORS.split(answer or ""):
        term = _BULLET.sub("", part).strip().strip("\"'`.:").strip()
        key = _squeezed(term)
        if not key or len(key.split()) > _MAX_TERM_WORDS or key in terms or f" {key} " in said:
            continue
        if key.lower().startswith(("terms", "here are", "question")):  # the prompt echoed
            continue
        terms[key] = term
        if len(terms) == max_terms:
            break
    return list(terms.values())


def with_rewrite(expansion: Optional[VocabularyExpansion], question: str, terms: List[str]) -> Optional[VocabularyExpansion]:
    """The vocabulary's expansion with the rewrite's terms as one more concept, ``REWRITE``
    (terms the vocabulary already added left out).

    Args:
        expansion: what the expert vocabulary added (``None``: nothing).
        question: the question.
        terms: the rewrite's terms.

    Returns:
        The expansion; ``expansion`` itself when no term is new.
    """
    known = {_squeezed(t) for t in (expansion.terms if expansion is not None else [])}
    new = tuple(t for t in terms if _squeezed(t) not in known)
    if not new:
        return expansion
    concepts = expansion.concepts if expansion is not None else ()
    return VocabularyExpansion(expansion.question if expansion is not None else question, (*concepts, (REWRITE, new)))


def rewritten_question(
    query: QueryBundle, expansion: Optional[VocabularyExpansion], terms: Sequence[str]
) -> Tuple[QueryBundle, Optional[VocabularyExpansion]]:
    """The question as the routes inside the focused documents search it: the rewrite's
    ``terms`` appended to its text (its embedding stays the question's), and the expansion
    that lists them as ``REWRITE`` ([`with_rewrite`][llama_index_hiqa.retrievers.question_rewrite.with_rewrite]).

    Args:
        query: the question, embedded.
        expansion: what the expert vocabulary added (``None``: nothing).
        terms: the rewrite's terms.

    Returns:
        ``(bundle, expansion)``; both unchanged when no term is new.
    """
    rewritten = with_rewrite(expansion, query.query_str or "", list(terms)) if terms else expansion
    if rewritten is expansion:
        return query, expansion
    bundle = QueryBundle(
        f"{query.query_str} {'; '.join(terms)}", image_path=query.image_path,
        custom_embedding_strs=query.embedding_strs, embedding=query.embedding,
    )
    return bundle, rewritten


class MalformedRewriteError(ValueError):
    """The LLM's answer held no usable term (a failed attempt: retried, then the fallback)."""


class QuestionRewriter:
    """Asks an LLM for the words a question's evidence uses (the module docstring says why).

    Args:
        llm: the LLM.
        config: [`QuestionRewriteSettings`][llama_index_hiqa.retrievers.settings.QuestionRewriteSettings]
            (its limits are the call's policy).
    """

    def __init__(self, llm: LLM, config: Optional[QuestionRewriteSettings] = None) -> None:
        self.llm = llm
        self.config = config or QuestionRewriteSettings(enabled=True)
        self._policy = LLMCallPolicy.of(self.config)

    def _prompt(self, question: str) -> str:
        return QUESTION_REWRITE_PROMPT.format(question=question, max_terms=self.config.max_terms)

    def _terms(self, question: str, answer: str) -> List[str]:
        terms = parse_rewrite_terms(answer, question, self.config.max_terms)
        if not terms:
            raise MalformedRewriteError(f"no usable term in the answer {answer[:80]!r}")
        return terms

    def rewrite(self, question: str) -> List[str]:
        """The terms the LLM gives for ``question``.

        Args:
            question: the question.

        Returns:
            The terms; ``[]`` when every attempt failed or answered nothing usable (the
                question is then searched unrewritten).
        """
        prompt = self._prompt(question)
        return call_llm(
            lambda: self._terms(question, self.llm.complete(prompt).text),
            what="question rewrite", instead="searching the question unrewritten",
            fallback=lambda _error: [], policy=self._policy,
        )

    async def arewrite(self, question: str) -> List[str]:
        """[`rewrite`][llama_index_hiqa.retrievers.question_rewrite.QuestionRewriter.rewrite] without blocking the event loop.

        Args:
            question: the question.

        Returns:
            The terms (``[]``: the fallback).
        """
        prompt = self._prompt(question)

        async def ask() -> List[str]:
            return self._terms(question, (await self.llm.acomplete(prompt)).text)

        return await acall_llm(
            ask, what="question rewrite", instead="searching the question unrewritten",
            fallback=lambda _error: [], policy=self._policy,
        )


class FocusRewrite:
    """When the document focus asks for a rewrite: with an LLM and ``enabled``, once for each
    question the ranking below found something for (the one place that says so, for the
    synchronous and the asynchronous path alike).

    Args:
        llm: the LLM (``None``: never asked).
        config: [`QuestionRewriteSettings`][llama_index_hiqa.retrievers.settings.QuestionRewriteSettings].
    """

    def __init__(self, llm: Optional[LLM], config: QuestionRewriteSettings) -> None:
        self.rewriter = QuestionRewriter(llm, config) if llm is not None and config.enabled else None

    def asks(self, results: Sequence[NodeWithScore]) -> bool:
        """Whether the LLM is asked for a question whose ranking found ``results``.

        Args:
            results: the ranking's results.

        Returns:
            True with a rewriter and at least one result.
        """
        return self.rewriter is not None and bool(results)

    def terms(self, question: str, results: Sequence[NodeWithScore]) -> List[str]:
        """The rewrite's terms for ``question`` (``[]`` when not asked or every attempt failed).

        Args:
            question: the question.
            results: the ranking's results.

        Returns:
            The terms.
        """
        return self.rewriter.rewrite(question) if self.rewriter is not None and self.asks(results) else []

    async def aterms(self, question: str, results: Sequence[NodeWithScore]) -> List[str]:
        """[`terms`][llama_index_hiqa.retrievers.question_rewrite.FocusRewrite.terms] without blocking the event loop.

        Args:
            question: the question.
            results: the ranking's results.

        Returns:
            The terms.
        """
        return await self.rewriter.arewrite(question) if self.rewriter is not None and self.asks(results) else []
