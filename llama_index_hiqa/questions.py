"""The one place where a question becomes text the pack can use.

Whatever reaches a retriever, the pack, a query engine or a chat engine (a command-line argument
with a stray byte, JSON with a lone surrogate, text pasted with NUL or terminal control
characters) is either made into plain text here or refused with one
`InvalidQuestionError`, before any tokenizer, NER model or
store sees it. The retrievers, query engines and chat engines of the pack take their questions
through the mixins below; the command line through `question_text`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, List, Optional

from llama_index.core.schema import QueryBundle

from llama_index_hiqa.errors import InvalidQuestionError
from llama_index_hiqa.text_repair import valid_unicode

# A question, even one with a pasted paragraph, is far shorter; longer text is a document
# handed over by mistake (the embedding reads a few hundred tokens of it at most).
MAX_QUESTION_CHARS = 10_000

# C0 and C1 control characters but tab, line feed and carriage return: a tokenizer, spaCy or a
# database may refuse them (NUL above all); a space keeps the words around them apart.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def question_text(question: object) -> str:
    """``question`` as text every route accepts.

    Lone surrogates become U+FFFD (`valid_unicode`), NUL
    and other control characters a space; an empty question stays empty (the retrievers answer
    it with no nodes).

    Args:
        question: what the caller gave as the question.

    Returns:
        The cleaned text (``question`` itself when it was clean).

    Raises:
        InvalidQuestionError: ``question`` is not a string, or is longer than
            `MAX_QUESTION_CHARS` characters.
    """
    if not isinstance(question, str):
        raise InvalidQuestionError(f"expected a string, got {type(question).__name__}")
    if len(question) > MAX_QUESTION_CHARS:
        raise InvalidQuestionError(
            f"{len(question):,} characters, more than the {MAX_QUESTION_CHARS:,} a question may have"
        )
    return _CONTROL.sub(" ", valid_unicode(question))


def question_bundle(query: object) -> QueryBundle:
    """A question or a ``QueryBundle`` as a ``QueryBundle`` of clean text (its embedding
    strings too).

    Args:
        query: a string or a ``QueryBundle``.

    Returns:
        The bundle (the same one when it was clean).

    Raises:
        InvalidQuestionError: as `question_text`.
    """
    if not isinstance(query, QueryBundle):
        return QueryBundle(question_text(query))
    text = question_text(query.query_str)
    custom: Optional[List[str]] = query.custom_embedding_strs
    cleaned = None if custom is None else [question_text(s) for s in custom]
    if text == query.query_str and cleaned == custom:
        return query
    return dataclasses.replace(query, query_str=text, custom_embedding_strs=cleaned)


class CleanQuestions:
    """For a LlamaIndex retriever (listed before ``BaseRetriever``): ``retrieve`` and
    ``aretrieve`` take their question through `question_bundle`."""

    def retrieve(self, str_or_query_bundle: Any) -> Any:
        """``BaseRetriever.retrieve`` of the cleaned question.

        Args:
            str_or_query_bundle: the question.

        Returns:
            The nodes.
        """
        return super().retrieve(question_bundle(str_or_query_bundle))  # type: ignore[misc]

    async def aretrieve(self, str_or_query_bundle: Any) -> Any:
        """``BaseRetriever.aretrieve`` of the cleaned question.

        Args:
            str_or_query_bundle: the question.

        Returns:
            The nodes.
        """
        return await super().aretrieve(question_bundle(str_or_query_bundle))  # type: ignore[misc]


class CleanQueries:
    """For a LlamaIndex query engine (listed before its base): ``query`` and ``aquery`` take
    their question through `question_bundle`, so the LLM sees the clean text too."""

    def query(self, str_or_query_bundle: Any) -> Any:
        """``BaseQueryEngine.query`` of the cleaned question.

        Args:
            str_or_query_bundle: the question.

        Returns:
            The response.
        """
        return super().query(question_bundle(str_or_query_bundle))  # type: ignore[misc]

    async def aquery(self, str_or_query_bundle: Any) -> Any:
        """``BaseQueryEngine.aquery`` of the cleaned question.

        Args:
            str_or_query_bundle: the question.

        Returns:
            The response.
        """
        return await super().aquery(question_bundle(str_or_query_bundle))  # type: ignore[misc]


class CleanMessages:
    """For a LlamaIndex chat engine (listed before its base): each message passes
    `question_text` before the engine condenses, retrieves or asks its LLM."""

    def chat(self, message: Any, *args: Any, **kwargs: Any) -> Any:
        """The engine's ``chat`` of the cleaned message.

        Args:
            message: the user's message.
            *args: the engine's other arguments (``chat_history``).
            **kwargs: the engine's other arguments.

        Returns:
            The engine's response.
        """
        return super().chat(question_text(message), *args, **kwargs)  # type: ignore[misc]

    def stream_chat(self, message: Any, *args: Any, **kwargs: Any) -> Any:
        """The engine's ``stream_chat`` of the cleaned message.

        Args:
            message: the user's message.
            *args: the engine's other arguments (``chat_history``).
            **kwargs: the engine's other arguments.

        Returns:
            The engine's streaming response.
        """
        return super().stream_chat(question_text(message), *args, **kwargs)  # type: ignore[misc]

    async def achat(self, message: Any, *args: Any, **kwargs: Any) -> Any:
        """The engine's ``achat`` of the cleaned message.

        Args:
            message: the user's message.
            *args: the engine's other arguments (``chat_history``).
            **kwargs: the engine's other arguments.

        Returns:
            The engine's response.
        """
        return await super().achat(question_text(message), *args, **kwargs)  # type: ignore[misc]

    async def astream_chat(self, message: Any, *args: Any, **kwargs: Any) -> Any:
        """The engine's ``astream_chat`` of the cleaned message.

        Args:
            message: the user's message.
            *args: the engine's other arguments (``chat_history``).
            **kwargs: the engine's other arguments.

        Returns:
            The engine's streaming response.
        """
        return await super().astream_chat(question_text(message), *args, **kwargs)  # type: ignore[misc]
