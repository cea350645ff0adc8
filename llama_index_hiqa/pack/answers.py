"""What the pack answers with when no LLM is set, and how it cites: the cited-evidence query
and chat engines, and the citation of a node (document, section path, pages).

With no LLM configured, an answer is the retrieved evidence under a notice — never an error;
the chat engine answers each message the same way (there is no LLM to condense a history),
streamed or not, and every engine method ends: a stream yields the evidence as one piece.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, AsyncGenerator, Callable, Dict, Generator, List, Optional, Sequence, Union

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.base.response.schema import AsyncStreamingResponse, Response, StreamingResponse
from llama_index.core.bridge.pydantic import Field
from llama_index.core.chat_engine import CondensePlusContextChatEngine
from llama_index.core.chat_engine.types import (
    AgentChatResponse,
    BaseChatEngine,
    StreamingAgentChatResponse,
)
from llama_index.core.chat_engine.utils import aresponse_gen_from_query_engine, response_gen_from_query_engine
from llama_index.core.llms import LLM
from llama_index.core.memory import BaseMemory, Memory
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import CustomQueryEngine, RetrieverQueryEngine
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.tools import ToolOutput

from llama_index_hiqa import schema
from llama_index_hiqa.pack.arguments import check_pack_arguments
from llama_index_hiqa.questions import CleanMessages, CleanQueries, question_bundle, question_text

NO_LLM_NOTICE = (
    "No LLM is configured, so this answer is the retrieved evidence with its citations. "
    "Set Settings.llm (or pass llm=, or `hiqa ask --llm openai:gpt-4o-mini`) for a written answer."
)
EVIDENCE_SNIPPET_CHARS = 400



# --------------------------------------------------------------------------- citations
def citation(node: BaseNode) -> Dict[str, Any]:
    """Where a node comes from: document id and title, section path, pages.

    Args:
        node: a retrieved node.

    Returns:
        A dict with ``"document_id"``, ``"document_title"``, ``"section"`` (``"4 Specs >
            4.2 Electrical"``), ``"pages"`` (``[first, last]`` from 1; ``None`` for HTML and DOCX,
            which have no pages: their section path is the citation) and ``"file_name"``.
    """
    path = schema.get_heading_path(node)
    section = " > ".join(" ".join(p for p in (h.number, h.title) if p) for h in path)
    page_range = schema.get_page_range(node) if schema.has_pages(node) else None
    pages = [page_range[0] + 1, page_range[1] + 1] if page_range else None
    return {
        "document_id": schema.get_document_id(node),
        "document_title": schema.get_document_title(node),
        "section": section or node.metadata.get(schema.SECTION_TITLE) or "",
        "pages": pages,
        "file_name": node.metadata.get(schema.FILE_NAME),
    }


def format_citation(node: BaseNode) -> str:
    """One line citing a node.

    ``"NX-2043 Datasheet · 4 Specifications > 4.2 Electrical characteristics · p.2"``.

    Args:
        node: a retrieved node.

    Returns:
        Title, section and pages joined by ``" · "`` (no pages for HTML and DOCX).
    """
    c = citation(node)
    pages = c["pages"]
    page = "p.?" if not pages else (f"p.{pages[0]}" if pages[0] == pages[1] else f"pp.{pages[0]}-{pages[1]}")
    parts = [c["document_title"] or c["document_id"] or "?"]
    if c["section"]:
        parts.append(c["section"])
    if schema.has_pages(node):
        parts.append(page)
    return " · ".join(parts)


def evidence_answer(nodes: Sequence[NodeWithScore], notice: str = NO_LLM_NOTICE) -> str:
    """The no-LLM answer: a notice, then each piece of evidence with its citation.

    Args:
        nodes: the retrieved nodes, best first.
        notice: the first line, saying no LLM wrote the answer.

    Returns:
        The answer text: one numbered citation and snippet a node.
    """
    if not nodes:
        return notice + "\n\nNo evidence was retrieved for this question."
    lines = [notice, ""]
    for i, hit in enumerate(nodes, 1):
        text = " ".join(hit.node.get_content().split())
        if len(text) > EVIDENCE_SNIPPET_CHARS:
            text = text[:EVIDENCE_SNIPPET_CHARS] + " …"
        lines.append(f"[{i}] {format_citation(hit.node)}")
        lines.append(f"    {text}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- engines
async def _one_piece(text: str) -> AsyncGenerator[str, None]:
    """``text`` as an async token stream of one piece (the evidence answer is ready at once)."""
    yield text


def _one_piece_sync(text: str) -> Generator[str, None, None]:
    """``text`` as a token stream of one piece."""
    yield text


class EvidenceQueryEngine(CleanQueries, CustomQueryEngine):
    """Query engine used when no LLM is set: retrieve, post-process, answer with cited evidence.

    Answers as LlamaIndex's ``RetrieverQueryEngine`` does with ``streaming``: ``query`` gives a
    ``StreamingResponse`` and ``aquery`` an ``AsyncStreamingResponse``, the evidence as one piece.
    """

    retriever: BaseRetriever
    node_postprocessors: List[BaseNodePostprocessor] = Field(default_factory=list)
    streaming: bool = Field(
        default=False, description="Answer with a StreamingResponse (the evidence as one chunk), like LLM engines."
    )

    def retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        """The evidence for a question: retrieved, then post-processed.

        Args:
            query_bundle: the question.

        Returns:
            The nodes, best first.
        """
        nodes = self.retriever.retrieve(query_bundle)
        for post in self.node_postprocessors:
            nodes = post.postprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes

    async def aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        """Async `retrieve` (the retriever's and post-processors' async paths).

        Args:
            query_bundle: the question.

        Returns:
            The nodes, best first.
        """
        nodes = await self.retriever.aretrieve(query_bundle)
        for post in self.node_postprocessors:
            nodes = await post.apostprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes

    def custom_query(self, query_str: str) -> Union[Response, StreamingResponse]:
        """Retrieve, post-process and answer with the cited evidence.

        Args:
            query_str: the question.

        Returns:
            A ``Response`` (a ``StreamingResponse`` when ``streaming``) with the evidence as
                ``source_nodes``.
        """
        nodes = self.retrieve(QueryBundle(query_str))
        if self.streaming:
            return StreamingResponse(_one_piece_sync(evidence_answer(nodes)), source_nodes=nodes, metadata={"llm": None})
        return Response(response=evidence_answer(nodes), source_nodes=nodes, metadata={"llm": None})

    async def acustom_query(self, query_str: str) -> Union[Response, AsyncStreamingResponse]:
        """Async `custom_query`.

        Args:
            query_str: the question.

        Returns:
            A ``Response`` (an ``AsyncStreamingResponse`` when ``streaming``, as LlamaIndex's
                engines give from ``aquery``) with the evidence as ``source_nodes``.
        """
        nodes = await self.aretrieve(QueryBundle(query_str))
        answer = evidence_answer(nodes)
        if self.streaming:
            return AsyncStreamingResponse(_one_piece(answer), source_nodes=nodes, metadata={"llm": None})
        return Response(response=answer, source_nodes=nodes, metadata={"llm": None})


class PackQueryEngine(CleanQueries, RetrieverQueryEngine):
    """LlamaIndex's ``RetrieverQueryEngine`` whose questions are cleaned first
    (`questions`), so the LLM reads the text the retriever searched."""


class PackChatEngine(CleanMessages, CondensePlusContextChatEngine):
    """LlamaIndex's ``CondensePlusContextChatEngine`` whose messages are cleaned first
    (`questions`)."""


class EvidenceChatEngine(CleanMessages, BaseChatEngine):
    """Chat engine used when no LLM is set: every turn answers with the cited evidence for the
    latest message (there is no LLM to condense the history into a question).

    The history is a LlamaIndex ``Memory`` written as ``CondensePlusContextChatEngine`` writes
    it (the user's message, then the answer); the streamed turns finish their
    ``StreamingAgentChatResponse`` through its own ``write_response_to_history`` before it is
    returned (the answer is ready at once), so ``response_gen`` / ``async_response_gen()`` yield
    the evidence and end.

    Args:
        query_engine: the evidence query engine that retrieves each turn's evidence.
        memory: the chat memory (a new ``Memory`` when ``None``).
        chat_history: the messages a new memory starts with.
    """

    def __init__(
        self,
        query_engine: EvidenceQueryEngine,
        memory: Optional[BaseMemory] = None,
        chat_history: Optional[List[ChatMessage]] = None,
    ) -> None:
        self._query_engine = query_engine
        self._memory = memory or Memory.from_defaults(chat_history=chat_history or [])

    def _turn(self, message: str, chat_history: Optional[List[ChatMessage]]) -> QueryBundle:
        if chat_history is not None:  # as LlamaIndex's chat engines: a given history replaces the memory's
            self._memory.set(chat_history)
        return QueryBundle(message)

    @staticmethod
    def _reply(message: str, nodes: List[NodeWithScore]) -> AgentChatResponse:
        """The turn's answer, with the retrieval as its source (as LlamaIndex's context engines cite it)."""
        answer = evidence_answer(nodes)
        source = ToolOutput(tool_name="retriever", content=answer, raw_input={"message": message}, raw_output=answer)
        return AgentChatResponse(response=answer, sources=[source], source_nodes=nodes)

    def chat(self, message: str, chat_history: Optional[List[ChatMessage]] = None) -> AgentChatResponse:
        """Answer the latest message with cited evidence.

        Args:
            message: the user's message (the question).
            chat_history: replaces the memory's history (as in LlamaIndex's chat engines); with
                no LLM to condense it, the latest message is the question.

        Returns:
            The answer and its source nodes.
        """
        reply = self._reply(message, self._query_engine.retrieve(self._turn(message, chat_history)))
        self._memory.put_messages([
            ChatMessage(role=MessageRole.USER, content=message),
            ChatMessage(role=MessageRole.ASSISTANT, content=reply.response),
        ])
        return reply

    async def achat(self, message: str, chat_history: Optional[List[ChatMessage]] = None) -> AgentChatResponse:
        """Async `chat`.

        Args:
            message: the user's message (the question).
            chat_history: replaces the memory's history; the latest message is the question.

        Returns:
            The answer and its source nodes.
        """
        reply = self._reply(message, await self._query_engine.aretrieve(self._turn(message, chat_history)))
        await self._memory.aput_messages([
            ChatMessage(role=MessageRole.USER, content=message),
            ChatMessage(role=MessageRole.ASSISTANT, content=reply.response),
        ])
        return reply

    def stream_chat(
        self, message: str, chat_history: Optional[List[ChatMessage]] = None
    ) -> StreamingAgentChatResponse:
        """Answer the latest message with cited evidence, streamed as one piece.

        Args:
            message: the user's message (the question).
            chat_history: replaces the memory's history; the latest message is the question.

        Returns:
            A finished ``StreamingAgentChatResponse``: ``response_gen`` yields the answer and
                ends; the memory holds the message and the answer.
        """
        reply = self._reply(message, self._query_engine.retrieve(self._turn(message, chat_history)))
        self._memory.put(ChatMessage(role=MessageRole.USER, content=message))
        response = StreamingAgentChatResponse(
            chat_stream=response_gen_from_query_engine(_one_piece_sync(reply.response)),
            sources=reply.sources, source_nodes=reply.source_nodes,
        )
        response.write_response_to_history(self._memory)  # queues the piece, writes the memory, marks it done
        return response

    async def astream_chat(
        self, message: str, chat_history: Optional[List[ChatMessage]] = None
    ) -> StreamingAgentChatResponse:
        """Async [`stream_chat`][llama_index_hiqa.pack.answers.EvidenceChatEngine.stream_chat].

        Args:
            message: the user's message (the question).
            chat_history: replaces the memory's history; the latest message is the question.

        Returns:
            A finished ``StreamingAgentChatResponse``: ``async_response_gen()`` yields the
                answer and ends; the memory holds the message and the answer.
        """
        reply = self._reply(message, await self._query_engine.aretrieve(self._turn(message, chat_history)))
        await self._memory.aput(ChatMessage(role=MessageRole.USER, content=message))
        response = StreamingAgentChatResponse(
            achat_stream=aresponse_gen_from_query_engine(_one_piece(reply.response)),
            sources=reply.sources, source_nodes=reply.source_nodes,
        )
        await response.awrite_response_to_history(self._memory)
        return response

    def reset(self) -> None:
        """Forget the conversation."""
        self._memory.reset()

    @property
    def chat_history(self) -> List[ChatMessage]:
        """The conversation so far (each turn: the user's message, then the answer)."""
        return self._memory.get_all()


__all__ = [
    "EVIDENCE_SNIPPET_CHARS", "NO_LLM_NOTICE", "EvidenceChatEngine", "EvidenceQueryEngine", "PackChatEngine",
    "PackQueryEngine", "citation", "evidence_answer", "format_citation",
]
