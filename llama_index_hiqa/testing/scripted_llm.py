"""``ScriptedLLM``: a LlamaIndex ``CustomLLM`` that answers from a script, offline."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List, Optional

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms import (
    CompletionResponse,
    CompletionResponseGen,
    CustomLLM,
    LLMMetadata,
)
from llama_index.core.llms.callbacks import llm_completion_callback

from llama_index_hiqa.testing.scripts import Script, count_tokens, next_scripted_answer


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

    def __getstate__(self) -> Dict[str, Any]:
        # LlamaIndex pickles a component as its fields and rebuilds it with __init__: the
        # script goes along as the constructor argument (a function of a module pickles by
        # name), so a worker process plays the same script.
        state = dict(super().__getstate__())
        state["__dict__"] = {**state["__dict__"], "responses": self._script}
        return state

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
