"""Scripts of answers: what a scripted LLM or the scripted OpenAI-compatible server says next.

A script is a list of answers used in order (an exception in the list is raised in its turn),
or a function of the prompt. Shared by [`ScriptedLLM`][llama_index_hiqa.testing.ScriptedLLM] and
[`OpenAICompatibleServer`][llama_index_hiqa.testing.OpenAICompatibleServer], so both play a script the same way.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional, Sequence, Tuple, Union


Answer = Union[str, BaseException]
Script = Union[Sequence[Answer], Callable[[str], Answer]]


def count_tokens(text: str) -> int:
    """A model-free token estimate: words plus punctuation runs (≈ tiktoken within ~20%)."""
    return len(re.findall(r"\w+|[^\w\s]+", text))


def next_scripted_answer(script: Script, index: int, default: Optional[str], prompt: str) -> Tuple[Any, int]:
    """The next answer of a script (a list of answers or a function of the prompt) and the new
    position in it; ``(None, index)`` once a list is used up and there is no default."""
    if callable(script):
        return script(prompt), index
    if index < len(script):
        return script[index], index + 1
    return default, index
