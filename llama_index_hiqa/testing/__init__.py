"""A scripted LLM and a scripted OpenAI-compatible server for tests, benchmarks and notebooks
that must run offline.

``ScriptedLLM`` is an ordinary LlamaIndex ``CustomLLM``: it answers each call from a script
(a list of answers used in order, or a function of the prompt), can raise or sleep to play a
failing or slow LLM, and counts calls and prompt tokens so benchmarks can report LLM cost.

``OpenAICompatibleServer`` answers the same scripts over real HTTP on 127.0.0.1 (chat and text
completions, SSE streaming, usage, ``/models``) and injects the faults of a real server (429
with ``Retry-After``, 500, a reply slower than the client's timeout, truncated JSON, an empty
``choices`` list), so the real ``llama-index-llms-openai`` client path can be tested; see
[`llama_index_hiqa.testing.openai_server`][llama_index_hiqa.testing.openai_server].

>>> from llama_index_hiqa.testing import ScriptedLLM
>>> llm = ScriptedLLM(responses=["# 1 Intro", TimeoutError("slow"), "not markdown"])
>>> llm.complete("window 1").text
'# 1 Intro'
>>> llm.calls
1
"""

from __future__ import annotations

from llama_index_hiqa.testing.hashing_embedding import HashingEmbedding
from llama_index_hiqa.testing.openai_server import FAULT_KINDS, Fault, OpenAICompatibleServer, ServerStats
from llama_index_hiqa.testing.page_reader import PDFPageReader
from llama_index_hiqa.testing.scripted_llm import ScriptedLLM
from llama_index_hiqa.testing.scripts import Answer, Script, count_tokens, next_scripted_answer

__all__ = [
    "Answer", "Script", "count_tokens", "next_scripted_answer", "ScriptedLLM", "HashingEmbedding",
    "PDFPageReader", "OpenAICompatibleServer", "Fault", "FAULT_KINDS", "ServerStats",
]
