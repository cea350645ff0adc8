"""How the pack calls an LLM: a time limit per call, and retries with exponential backoff.

Shared by the LLM components (TextRAG sectioning and context headers, the HiQA Markdown
formatter) so that every one of them treats a slow or failing LLM the same way.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Optional, Tuple, TypeVar

T = TypeVar("T")


async def with_timeout(call: Awaitable[T], timeout_seconds: Optional[float]) -> T:
    """Await ``call``, bounded by ``timeout_seconds`` (``None`` or 0: no bound)."""
    return await (asyncio.wait_for(call, timeout_seconds) if timeout_seconds else call)


async def call_with_retries(
    make_call: Callable[[], Awaitable[T]],
    *,
    max_retries: int,
    backoff_seconds: float,
    timeout_seconds: Optional[float],
) -> Tuple[Optional[T], Optional[BaseException]]:
    """``(answer, None)`` from the first attempt that succeeds, else ``(None, last error)``.

    ``make_call`` makes one fresh attempt (the LLM call and any validation of its answer:
    raising retries). Waits ``backoff_seconds · 2^attempt`` between attempts.
    """
    last_error: Optional[BaseException] = None
    for attempt in range(max_retries + 1):
        try:
            return await with_timeout(make_call(), timeout_seconds), None
        except Exception as exc:  # network, timeout, malformed answer: retry, then report
            last_error = exc
            if attempt < max_retries:
                await asyncio.sleep(backoff_seconds * (2**attempt))
    return None, last_error
