"""A scripted LLM and a scripted OpenAI-compatible server for tests, benchmarks and notebooks
that must run offline.

``ScriptedLLM`` is an ordinary LlamaIndex ``CustomLLM``: it answers each call from a script
(a list of answers used in order, or a function of the prompt), can raise or sleep to play a
failing or slow LLM, and counts calls and prompt tokens so benchmarks can report LLM cost.

``OpenAICompatibleServer`` answers the same scripts over real HTTP on 127.0.0.1 (chat and text
completions, SSE streaming, usage, ``/models``) and injects the faults of a real server (429
with ``Retry-After``, 500, a reply slower than the client's timeout, truncated JSON, an empty
``choices`` list), so the real ``llama-index-llms-openai`` client path can be tested; see
:mod:`llama_index_hiqa.openai_test_server`.

>>> from llama_index_hiqa.testing import ScriptedLLM
>>> llm = ScriptedLLM(responses=["# 1 Intro", TimeoutError("slow"), "not markdown"])
>>> llm.complete("window 1").text
'# 1 Intro'
>>> llm.calls
1
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import threading
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms import (
    CompletionResponse,
    CompletionResponseGen,
    CustomLLM,
    LLMMetadata,
)
from llama_index.core.llms.callbacks import llm_completion_callback

Answer = Union[str, BaseException]
Script = Union[Sequence[Answer], Callable[[str], Answer]]


def count_tokens(text: str) -> int:
    """A model-free token estimate: words plus punctuation runs (≈ tiktoken within ~20%)."""
    import re

    return len(re.findall(r"\w+|[^\w\s]+", text))


def next_scripted_answer(script: Script, index: int, default: Optional[str], prompt: str) -> Tuple[Any, int]:
    """The next answer of a script (a list of answers or a function of the prompt) and the new
    position in it; ``(None, index)`` once a list is used up and there is no default."""
    if callable(script):
        return script(prompt), index
    if index < len(script):
        return script[index], index + 1
    return default, index


class ScriptedLLM(CustomLLM):
    """Answers from a script; records prompts, calls and token counts."""

    latency_seconds: float = Field(default=0.0, description="Sleep before each answer.")
    default_response: Optional[str] = Field(
        default=None, description="Answer once a list script is used up (None: raise)."
    )
    context_window: int = Field(default=128_000, description="Reported context window.")

    _script: Script = PrivateAttr()
    _lock: threading.Lock = PrivateAttr()
    _index: int = PrivateAttr(default=0)
    prompts: List[str] = Field(default_factory=list, exclude=True)
    prompt_tokens: int = Field(default=0, exclude=True)
    completion_tokens: int = Field(default=0, exclude=True)

    def __init__(self, responses: Script = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._script = responses if callable(responses) else list(responses)
        self._lock = threading.Lock()

    @classmethod
    def class_name(cls) -> str:
        return "ScriptedLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=self.context_window, num_output=4096, model_name="scripted")

    @property
    def calls(self) -> int:
        return len(self.prompts)

    def _next_answer(self, prompt: str) -> str:
        with self._lock:
            self.prompts.append(prompt)
            self.prompt_tokens += count_tokens(prompt)
            answer, self._index = next_scripted_answer(self._script, self._index, self.default_response, prompt)
            if answer is None:
                raise RuntimeError(f"ScriptedLLM script exhausted after {self._index} answers")
        if isinstance(answer, BaseException):
            raise answer
        self.completion_tokens += count_tokens(answer)
        return answer

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        if self.latency_seconds:
            time.sleep(self.latency_seconds)
        return CompletionResponse(text=self._next_answer(prompt))

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        if self.latency_seconds:
            await asyncio.sleep(self.latency_seconds)
        return CompletionResponse(text=self._next_answer(prompt))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        text = self.complete(prompt, formatted=formatted).text

        def gen() -> CompletionResponseGen:
            yield CompletionResponse(text=text, delta=text)

        return gen()


class HashingEmbedding(BaseEmbedding):
    """A deterministic offline embedding for tests and notebooks: a bag of words hashed into
    ``dim`` dimensions (feature hashing, md5 of each lower-cased token), so texts sharing
    words are similar, nothing is downloaded, and two processes compute identical vectors.

    ``signed`` adds each token with a hash-chosen sign (collisions cancel instead of piling
    up); ``token_pattern`` decides what a word is (``[a-z]+``: blind to part numbers, for a
    vector route that must be confused by look-alike products). A text without a token gets
    the uniform unit vector (never a zero vector, whose cosine is undefined). ``calls`` counts
    the texts embedded (not the queries).

    >>> from llama_index_hiqa.testing import HashingEmbedding
    >>> model = HashingEmbedding(dim=8)
    >>> model.get_text_embedding("supply voltage") == model.get_query_embedding("Supply voltage")
    True
    """

    model_name: str = "hashing-bow"
    dim: int = Field(default=256, gt=0, description="Vector size.")
    token_pattern: str = Field(default=r"[a-z0-9][a-z0-9\-\.]*", description="Regex of a token (lower case).")
    signed: bool = Field(default=True, description="Add each token with a hash-chosen sign.")
    calls: int = Field(default=0, description="Texts embedded so far.")

    @classmethod
    def class_name(cls) -> str:
        return "HashingEmbedding"

    def vector(self, text: str) -> List[float]:
        vec = np.zeros(self.dim, dtype=np.float32)
        for token in re.findall(self.token_pattern, text.lower()):
            digest = hashlib.md5(token.encode("utf-8")).digest()
            sign = (1.0 if digest[4] % 2 else -1.0) if self.signed else 1.0
            vec[int.from_bytes(digest[:4], "little") % self.dim] += sign
        norm = float(np.linalg.norm(vec))
        if not norm:
            return [1.0 / math.sqrt(self.dim)] * self.dim
        return (vec / norm).tolist()

    def _get_query_embedding(self, query: str) -> List[float]:
        return self.vector(query)

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self.vector(query)

    def _get_text_embedding(self, text: str) -> List[float]:
        self.calls += 1
        return self.vector(text)


def __getattr__(name: str) -> Any:
    # The server module imports nothing heavy, but keep `import testing` as light as before.
    if name in ("OpenAICompatibleServer", "Fault", "FAULT_KINDS"):
        from llama_index_hiqa import openai_test_server

        return getattr(openai_test_server, name)
    raise AttributeError(name)
