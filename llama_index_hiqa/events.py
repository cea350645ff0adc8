"""Instrumentation events of the pack, sent through LlamaIndex's dispatcher so they reach
whatever event handler the application registered (Arize Phoenix, Langfuse, a custom
``BaseEventHandler``), as LlamaIndex's own retrievers and rerankers do."""

from __future__ import annotations

from typing import Dict, List, Optional

from llama_index.core.bridge.pydantic import Field
from llama_index.core.instrumentation.events import BaseEvent


class RouteFailedEvent(BaseEvent):
    """One retrieval route of a MultiRouteRetriever query raised; the other routes answered."""

    query: str = Field(description="The question the route was asked.")
    route: str = Field(description="vector, bm25 or keywords.")
    error: str = Field(description="The exception, as type: message.")

    @classmethod
    def class_name(cls) -> str:
        return "RouteFailedEvent"


class MultiRouteRetrievalEndEvent(BaseEvent):
    """A MultiRouteRetriever query finished: how many candidates each route gave, which
    routes failed, how many nodes were returned."""

    query: str = Field(description="The question.")
    candidates: Dict[str, int] = Field(description="Route name -> number of candidates it returned.")
    failed_routes: List[str] = Field(default_factory=list, description="Routes that raised.")
    returned: int = Field(description="Nodes returned after fusion.")
    beta: Optional[float] = Field(default=None, description="The β of HiQA's fusion in use.")

    @classmethod
    def class_name(cls) -> str:
        return "MultiRouteRetrievalEndEvent"


class LLMCallFailedEvent(BaseEvent):
    """One attempt of an LLM call made under [`LLMCallPolicy`][llama_index_hiqa.models.llm_calls.LLMCallPolicy]
    failed: it is retried (``retry_in_seconds`` set) or, on the last attempt, the component
    takes its documented fallback or raises its typed error."""

    call: str = Field(description="What the call is (e.g. 'IIER keyword prompt').")
    attempt: int = Field(description="The failed attempt, from 1.")
    attempts: int = Field(description="Attempts the policy allows in all.")
    error: str = Field(description="The exception, as type: message.")
    retry_in_seconds: Optional[float] = Field(
        default=None, description="Wait before the next attempt; None: this was the last."
    )

    @classmethod
    def class_name(cls) -> str:
        return "LLMCallFailedEvent"
