"""Every query and chat engine method the pack hands out ends, and gives the cited evidence
without an LLM and the LLM's answer with one: ``query``, ``aquery``, streaming ``query``
(``response_gen``) and ``aquery`` (``async_response_gen()``), ``chat``, ``achat``,
``stream_chat`` (``response_gen``) and ``astream_chat`` (``async_response_gen()``).

Each call runs in a daemon thread with a time limit, so an engine that never finishes its
stream (a chat UI waiting forever) fails the test instead of hanging the suite. The LLMs:
none, ``ScriptedLLM``, and the real ``OpenAILike`` client over HTTP against the loopback
OpenAI-compatible server (streamed as Server-Sent Events, a piece a word).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, List, Tuple

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse

from llama_index_hiqa import HiQAPack, schema
from llama_index_hiqa.pack.answers import NO_LLM_NOTICE
from llama_index_hiqa.demo import load_demo_documents
from llama_index_hiqa.testing import ScriptedLLM
from llama_index_hiqa.testing.openai_server import OpenAICompatibleServer
from tests.pack_helpers import HashEmbedding

QUESTION = "What is the maximum output current of the NX-2043?"
ANSWER = "The NX-2043 delivers up to 800 mA at 25 degrees."
LIMIT_SECONDS = 20.0  # each method takes well under a second; a stream that never ends hits this
LLM_KINDS = ("none", "scripted", "http")


def finishes(call: Callable[[], Any], seconds: float = LIMIT_SECONDS) -> Any:
    """``call()``'s result, failing the test if it has not returned within ``seconds``."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"did not finish within {seconds:.0f} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def finishes_async(make: Callable[[], Any], seconds: float = LIMIT_SECONDS) -> Any:
    """The coroutine ``make()`` run to its end under ``asyncio.wait_for`` (and the thread limit)."""
    return finishes(lambda: asyncio.run(asyncio.wait_for(make(), seconds)), seconds + 2)


@pytest.fixture(scope="module")
def pack():
    docs = [d for d in load_demo_documents() if d.metadata[schema.DOCUMENT_ID] in ("NX-2042", "NX-2043")]
    return HiQAPack.from_documents(docs, embed_model=HashEmbedding(), keywords={"use_ner": False}, similarity_top_k=3)


@pytest.fixture(scope="module")
def server():
    with OpenAICompatibleServer(default_response=ANSWER) as running:
        yield running


@pytest.fixture(params=LLM_KINDS)
def llm(request, server):
    """(kind, LLM or None) for each kind of LLM."""
    kind = request.param
    return kind, {"none": None, "scripted": ScriptedLLM(default_response=ANSWER), "http": server.llm()}[kind]


def _check_answer(kind: str, text: str, source_nodes: List[Any]) -> None:
    assert source_nodes, "the evidence comes with the answer"
    if kind == "none":
        assert text.startswith(NO_LLM_NOTICE) and "NX-2043" in text
    else:
        assert text.strip() == ANSWER


def _check_pieces(kind: str, pieces: List[str]) -> None:
    if kind == "http":  # the server streams a piece a word: the tokens arrive as sent
        assert len(pieces) > 3


def _check_history(engine: Any, text: str) -> None:
    history = engine.chat_history
    assert [m.role for m in history] == [MessageRole.USER, MessageRole.ASSISTANT]
    assert history[0].content == QUESTION and history[1].content.strip() == text.strip()


# --- query engines -----------------------------------------------------------------------------


def test_query_and_aquery_end_with_the_answer(pack, llm):
    kind, model = llm
    response = finishes(lambda: pack.as_query_engine(llm=model).query(QUESTION))
    _check_answer(kind, str(response), response.source_nodes)
    response = finishes_async(lambda: pack.as_query_engine(llm=model).aquery(QUESTION))
    _check_answer(kind, str(response), response.source_nodes)


def test_streaming_query_yields_the_answer_and_ends(pack, llm):
    kind, model = llm
    response = pack.as_query_engine(llm=model, streaming=True).query(QUESTION)
    assert isinstance(response, StreamingResponse)
    pieces = finishes(lambda: list(response.response_gen))
    _check_answer(kind, "".join(pieces), response.source_nodes)
    _check_pieces(kind, pieces)


def test_async_streaming_query_yields_the_answer_and_ends(pack, llm):
    """``aquery`` with ``streaming=True`` gives an ``AsyncStreamingResponse``, with or without an LLM."""
    kind, model = llm

    async def stream() -> Tuple[Any, List[str]]:
        response = await pack.as_query_engine(llm=model, streaming=True).aquery(QUESTION)
        return response, [piece async for piece in response.async_response_gen()]

    response, pieces = finishes_async(stream)
    assert isinstance(response, AsyncStreamingResponse)
    _check_answer(kind, "".join(pieces), response.source_nodes)
    _check_pieces(kind, pieces)


# --- chat engines ------------------------------------------------------------------------------


def test_chat_and_achat_end_and_write_the_turn_to_memory(pack, llm):
    kind, model = llm
    engine = pack.as_chat_engine(llm=model)
    reply = finishes(lambda: engine.chat(QUESTION))
    _check_answer(kind, str(reply), reply.source_nodes)
    _check_history(engine, str(reply))

    engine = pack.as_chat_engine(llm=model)
    reply = finishes_async(lambda: engine.achat(QUESTION))
    _check_answer(kind, str(reply), reply.source_nodes)
    _check_history(engine, str(reply))


def test_stream_chat_yields_the_answer_ends_and_writes_memory(pack, llm):
    kind, model = llm
    engine = pack.as_chat_engine(llm=model)
    response = finishes(lambda: engine.stream_chat(QUESTION))
    pieces = finishes(lambda: list(response.response_gen))
    text = "".join(pieces)
    _check_answer(kind, text, response.source_nodes)
    _check_pieces(kind, pieces)
    assert str(response) == text.strip()
    _check_history(engine, text)


def test_astream_chat_yields_the_answer_ends_and_writes_memory(pack, llm):
    kind, model = llm
    engine = pack.as_chat_engine(llm=model)

    async def stream() -> Tuple[Any, List[str]]:
        response = await engine.astream_chat(QUESTION)
        return response, [piece async for piece in response.async_response_gen()]

    response, pieces = finishes_async(stream)
    text = "".join(pieces)
    _check_answer(kind, text, response.source_nodes)
    _check_pieces(kind, pieces)
    _check_history(engine, text)


def test_without_an_llm_the_chat_engine_keeps_a_conversation_as_llamaindex_does(pack):
    engine = pack.as_chat_engine()
    first = finishes(lambda: engine.stream_chat(QUESTION))
    "".join(first.response_gen)
    second = finishes(lambda: engine.chat("And of the NX-2042?"))
    assert len(engine.chat_history) == 4 and engine.chat_history[2].content == "And of the NX-2042?"
    assert second.sources and second.sources[0].tool_name == "retriever"
    # A given history replaces the memory's, as in LlamaIndex's chat engines.
    earlier = [ChatMessage(role=MessageRole.USER, content="hello"), ChatMessage(role=MessageRole.ASSISTANT, content="hi")]
    finishes(lambda: engine.chat(QUESTION, chat_history=earlier))
    assert [m.content for m in engine.chat_history[:2]] == ["hello", "hi"] and len(engine.chat_history) == 4
    engine.reset()
    assert engine.chat_history == []
    seeded = pack.as_chat_engine(chat_history=earlier)
    assert [m.content for m in seeded.chat_history] == ["hello", "hi"]
