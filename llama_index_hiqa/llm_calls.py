"""How the pack calls an LLM: a time limit per call, and retries with exponential backoff that
wait as long as the server asks (``Retry-After``).

Shared by the LLM components (TextRAG sectioning and context headers, the HiQA Markdown
formatter) so that every one of them treats a slow, rate-limited or failing LLM the same way.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from typing import Any, Awaitable, Callable, Optional, Tuple, TypeVar

from llama_index.core.bridge.pydantic import Field

T = TypeVar("T")

# A server asking for longer than this is not waited for longer (a misbehaving gateway
# must not stall an ingestion for hours); the retry still happens.
MAX_RETRY_AFTER_SECONDS = 60.0


async def with_timeout(call: Awaitable[T], timeout_seconds: Optional[float]) -> T:
    """Await ``call``, bounded by ``timeout_seconds`` (``None`` or 0: no bound)."""
    return await (asyncio.wait_for(call, timeout_seconds) if timeout_seconds else call)


# The retry settings every LLM component has, as pydantic fields with one wording.


def max_retries_field(retried: str = "a failing LLM call") -> Any:
    return Field(default=2, ge=0, description=f"Retries of {retried}.")


def retry_backoff_field() -> Any:
    return Field(default=1.0, ge=0, description="First wait before a retry after an LLM error; doubles on every further retry.")


def timeout_field(default: float) -> Any:
    return Field(default=default, gt=0, description="Time limit of one LLM call (None: no limit).")


def retry_after_seconds(error: BaseException) -> Optional[float]:
    """The wait a server asked for with the error: ``Retry-After`` (seconds or an HTTP date)
    or ``retry-after-ms`` on the error's HTTP response (the ``openai`` client's
    ``RateLimitError``/``APIStatusError`` carry one, as do ``httpx.HTTPStatusError``);
    ``None`` when it asked for nothing."""
    response: Any = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except (TypeError, ValueError):
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except (TypeError, ValueError):
        pass
    try:
        when = email.utils.parsedate_to_datetime(str(raw))
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def retry_delay(error: BaseException, attempt: int, backoff_seconds: float) -> float:
    """Seconds to wait before retry ``attempt + 1``: ``backoff_seconds · 2^attempt``, or the
    server's ``Retry-After`` when it asks for longer (capped at
    :data:`MAX_RETRY_AFTER_SECONDS`)."""
    delay = backoff_seconds * (2**attempt)
    asked = retry_after_seconds(error)
    if asked is not None:
        delay = max(delay, min(asked, MAX_RETRY_AFTER_SECONDS))
    return delay


async def call_with_retries(
    make_call: Callable[[], Awaitable[T]],
    *,
    max_retries: int,
    backoff_seconds: float,
    timeout_seconds: Optional[float],
) -> Tuple[Optional[T], Optional[BaseException]]:
    """``(answer, None)`` from the first attempt that succeeds, else ``(None, last error)``.

    ``make_call`` makes one fresh attempt (the LLM call and any validation of its answer:
    raising retries). Waits :func:`retry_delay` between attempts.
    """
    last_error: Optional[BaseException] = None
    for attempt in range(max_retries + 1):
        try:
            return await with_timeout(make_call(), timeout_seconds), None
        except Exception as exc:  # network, timeout, malformed answer: retry, then report
            last_error = exc
            if attempt < max_retries:
                delay = retry_delay(exc, attempt, backoff_seconds)
                if delay:
                    await asyncio.sleep(delay)
    return None, last_error
