"""How the pack calls an LLM: one policy for every component that does.

A call has a time limit, is retried with exponential backoff that waits as long as the server
asks (``Retry-After``), and when every attempt failed takes the component's documented fallback
(or raises the component's typed error), with one warning in the log and a
[`LLMCallFailedEvent`][llama_index_hiqa.events.LLMCallFailedEvent] per failed attempt through LlamaIndex's
instrumentation dispatcher. Sync and async callers go through the same rules:

* [`LLMCallPolicy`][llama_index_hiqa.models.llm_calls.LLMCallPolicy] holds the limits (retries, first backoff, time limit);
* [`call_llm`][llama_index_hiqa.models.llm_calls.call_llm] / [`acall_llm`][llama_index_hiqa.models.llm_calls.acall_llm] make one guarded call: ``make_call`` makes one attempt
  (the LLM call and any check of its answer: raising retries), ``fallback`` answers when every
  attempt failed;
* [`call_with_retries`][llama_index_hiqa.models.llm_calls.call_with_retries] is the bare async retry loop (an answer or the last error) for
  callers that keep their own bookkeeping.

Used by the TextRAG sectioning and context headers, the HiQA Markdown formatter, the
multimodal image descriptions of the cascade, the keyword prompts (extractor and chunk graph),
the reranker of segment integration and the document focus's optional question rewrite, so every one of them treats a slow, rate-limited or
failing LLM the same way.
"""

from __future__ import annotations

import asyncio
import contextvars
import email.utils
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any, Awaitable, Callable, Optional, Tuple, TypeVar, Union

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field
from llama_index.core.instrumentation import get_dispatcher

from llama_index_hiqa.events import LLMCallFailedEvent

T = TypeVar("T")
F = TypeVar("F")

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

# A server asking for longer than this is not waited for longer (a misbehaving gateway
# must not stall an ingestion for hours); the retry still happens.
MAX_RETRY_AFTER_SECONDS = 60.0


# --- the retry settings every LLM component has, as pydantic fields with one wording -------


def max_retries_field(retried: str = "a failing LLM call") -> Any:
    """The ``max_retries`` field of an LLM component.

    Args:
        retried: What is retried, as the field's description says it.

    Returns:
        A pydantic ``Field`` (default 2, 0 to 10: a larger count is a typo, not a policy).
    """
    return Field(default=2, ge=0, le=10, description=f"Retries of {retried} (0 to 10).")


def retry_backoff_field() -> Any:
    """The ``retry_backoff_seconds`` field of an LLM component.

    Returns:
        A pydantic ``Field`` (default 1.0 s, 0 to 60 s).
    """
    return Field(
        default=1.0, ge=0, le=60,
        description="First wait before a retry after an LLM error, 0 to 60 seconds; doubles on every further retry.",
    )


def timeout_field(default: float) -> Any:
    """The ``timeout_seconds`` field of an LLM component.

    Args:
        default: The component's time limit of one call, in seconds.

    Returns:
        A pydantic ``Field`` (positive up to an hour, or None for no limit).
    """
    return Field(default=default, gt=0, le=3600, description="Time limit of one LLM call, up to 3,600 seconds (None: no limit).")


# --- waiting ----------------------------------------------------------------------------------


async def with_timeout(call: Awaitable[T], timeout_seconds: Optional[float]) -> T:
    """Await ``call`` within a time limit.

    Args:
        call: The awaitable (an LLM call).
        timeout_seconds: The limit; ``None`` or 0 means none.

    Returns:
        What ``call`` returns.

    Raises:
        asyncio.TimeoutError: When the limit passes first.
    """
    return await (asyncio.wait_for(call, timeout_seconds) if timeout_seconds else call)


def run_with_timeout(call: Callable[[], T], timeout_seconds: Optional[float]) -> T:
    """Run the blocking ``call`` within a time limit.

    With a limit the call runs in a worker thread (with the caller's context variables, so
    LlamaIndex's instrumentation spans nest); a call past its limit is abandoned to finish in
    the background, as a blocking client call cannot be interrupted.

    Args:
        call: The blocking call (an LLM call).
        timeout_seconds: The limit; ``None`` or 0 means none (the call runs in this thread).

    Returns:
        What ``call`` returns.

    Raises:
        TimeoutError: When the limit passes first.
    """
    if not timeout_seconds:
        return call()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hiqa-llm-call")
    try:
        future = pool.submit(contextvars.copy_context().run, call)
        try:
            return future.result(timeout=timeout_seconds)
        except FutureTimeoutError:
            raise TimeoutError(f"LLM call took longer than {timeout_seconds:g} s") from None
    finally:
        pool.shutdown(wait=False)


def retry_after_seconds(error: BaseException) -> Optional[float]:
    """The wait a server asked for with an error.

    Reads ``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms`` on the error's HTTP
    response (the ``openai`` client's ``RateLimitError``/``APIStatusError`` carry one, as do
    ``httpx.HTTPStatusError``).

    Args:
        error: The exception an LLM call raised.

    Returns:
        Seconds to wait (at least 0), or ``None`` when the server asked for nothing.
    """
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
    """Seconds to wait before retry ``attempt + 1``.

    Args:
        error: The exception the failed attempt raised.
        attempt: The failed attempt, from 0.
        backoff_seconds: The first wait; it doubles on every further retry.

    Returns:
        ``backoff_seconds · 2^attempt``, or the server's ``Retry-After`` when it asks for
            longer (capped at [`MAX_RETRY_AFTER_SECONDS`][llama_index_hiqa.models.llm_calls.MAX_RETRY_AFTER_SECONDS]).
    """
    delay = backoff_seconds * (2**attempt)
    asked = retry_after_seconds(error)
    if asked is not None:
        delay = max(delay, min(asked, MAX_RETRY_AFTER_SECONDS))
    return delay


# --- the policy -------------------------------------------------------------------------------


class LLMCallPolicy(BaseModel):
    """How a component calls an LLM: time limit, retries and backoff.

    The default is one attempt without a time limit: what the components whose fallback is
    cheap and exact use (keyword prompts, image descriptions, reranking), so a failure costs
    one call. Components whose answer is worth waiting for (sectioning, context headers, the
    Markdown formatter) build theirs from their ``max_retries``, ``retry_backoff_seconds`` and
    ``timeout_seconds`` settings.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_retries: int = Field(default=0, ge=0, description="Retries after a failed attempt.")
    retry_backoff_seconds: float = Field(
        default=1.0, ge=0,
        description="First wait before a retry; doubles on every further retry; a longer "
        "Retry-After of the server wins (capped at MAX_RETRY_AFTER_SECONDS).",
    )
    timeout_seconds: Optional[float] = Field(
        default=None, gt=0, description="Time limit of one attempt (None: no limit)."
    )

    @classmethod
    def of(cls, component: Any) -> "LLMCallPolicy":
        """The policy a component's own settings say.

        Args:
            component: Anything with ``max_retries``, ``retry_backoff_seconds`` and
                ``timeout_seconds`` (the fields `max_retries_field`,
                `retry_backoff_field` and `timeout_field` make).

        Returns:
            The policy with those limits.
        """
        return cls(
            max_retries=component.max_retries,
            retry_backoff_seconds=component.retry_backoff_seconds,
            timeout_seconds=component.timeout_seconds or None,
        )

    @property
    def attempts(self) -> int:
        """Attempts in all: the first and the retries."""
        return self.max_retries + 1

    def delay_after(self, error: BaseException, attempt: int) -> Optional[float]:
        """The wait before the next attempt, or ``None`` when ``attempt`` was the last.

        Args:
            error: The exception the failed attempt raised.
            attempt: The failed attempt, from 0.

        Returns:
            Seconds to wait, or ``None`` when no attempt is left.
        """
        if attempt >= self.max_retries:
            return None
        return retry_delay(error, attempt, self.retry_backoff_seconds)


# The policy of a component that does not say otherwise: one attempt, no time limit.
SINGLE_ATTEMPT = LLMCallPolicy()

Fallback = Optional[Callable[[BaseException], F]]
ErrorType = Optional[Callable[[BaseException], BaseException]]


_NO_ANSWER: Any = object()


def report_failed_attempt(what: str, policy: LLMCallPolicy, attempt: int, error: BaseException) -> Optional[float]:
    """Report a failed attempt: an [`LLMCallFailedEvent`][llama_index_hiqa.events.LLMCallFailedEvent] and a
    debug line; for callers that run their own attempt loop (the Markdown formatter changes
    its prompt between attempts).

    Args:
        what: What the call is.
        policy: The policy the attempts run under.
        attempt: The failed attempt, from 0.
        error: The exception it raised.

    Returns:
        Seconds to wait before the next attempt, or ``None`` when it was the last.
    """
    delay = policy.delay_after(error, attempt)
    dispatcher.event(
        LLMCallFailedEvent(
            call=what, attempt=attempt + 1, attempts=policy.attempts,
            error=f"{type(error).__name__}: {error}", retry_in_seconds=delay,
        )
    )
    if delay is not None:
        logger.debug("%s: attempt %d failed (%s); retrying in %.2f s", what, attempt + 1, error, delay)
    return delay


def _attempts(make_call: Callable[[], T], what: str, policy: LLMCallPolicy) -> Tuple[Any, Optional[BaseException]]:
    """The blocking retry loop: ``(answer, None)`` or ``(_NO_ANSWER, last error)``."""
    for attempt in range(policy.attempts):
        try:
            return run_with_timeout(make_call, policy.timeout_seconds), None
        # Safe: network, quota, timeout, malformed answer of any client's error type; every
        # failure is reported and ends in the caller's fallback or typed error.
        except Exception as exc:  # noqa: BLE001
            delay = report_failed_attempt(what, policy, attempt, exc)
            if delay is None:
                return _NO_ANSWER, exc
            if delay:
                time.sleep(delay)
    raise AssertionError("unreachable: the last attempt returns")  # pragma: no cover


async def _aattempts(
    make_call: Callable[[], Awaitable[T]], what: str, policy: LLMCallPolicy
) -> Tuple[Any, Optional[BaseException]]:
    """The async retry loop: ``(answer, None)`` or ``(_NO_ANSWER, last error)``."""
    for attempt in range(policy.attempts):
        try:
            return await with_timeout(make_call(), policy.timeout_seconds), None
        except Exception as exc:  # noqa: BLE001 - safe as in _attempts: reported, the caller decides
            delay = report_failed_attempt(what, policy, attempt, exc)
            if delay is None:
                return _NO_ANSWER, exc
            if delay:
                await asyncio.sleep(delay)
    raise AssertionError("unreachable: the last attempt returns")  # pragma: no cover


def _give_up(
    what: str,
    instead: str,
    policy: LLMCallPolicy,
    error: BaseException,
    fallback: Fallback[F],
    error_type: ErrorType,
) -> Any:
    if fallback is None:
        typed = error if error_type is None else error_type(error)
        if typed is error:
            raise error
        raise typed from error
    tries = f" after {policy.attempts} attempts" if policy.attempts > 1 else ""
    logger.warning("%s failed%s (%s: %s); %s", what, tries, type(error).__name__, error, instead)
    return fallback(error)


def call_llm(
    make_call: Callable[[], T],
    *,
    what: str,
    fallback: Fallback[F] = None,
    instead: str = "falling back",
    policy: LLMCallPolicy = SINGLE_ATTEMPT,
    error_type: ErrorType = None,
) -> Union[T, F]:
    """One guarded blocking LLM call under ``policy``.

    Args:
        make_call: Makes one attempt: the LLM call and any check of its answer (raising
            retries).
        what: What the call is, for the log and the event ("IIER keyword prompt").
        fallback: Answers from the last error when every attempt failed (after one warning
            in the log); ``None``: raise.
        instead: What the fallback does, for the warning ("using the keyword extractor").
        policy: Time limit, retries and backoff.
        error_type: Without a fallback, turns the last error into the component's typed
            error; ``None``: the last error is raised as it is.

    Returns:
        The first successful attempt's answer, else the fallback's.

    Raises:
        Exception: Without a fallback, the last error (or ``error_type`` of it).
    """
    answer, error = _attempts(make_call, what, policy)
    if error is None:
        return answer
    return _give_up(what, instead, policy, error, fallback, error_type)


async def acall_llm(
    make_call: Callable[[], Awaitable[T]],
    *,
    what: str,
    fallback: Fallback[F] = None,
    instead: str = "falling back",
    policy: LLMCallPolicy = SINGLE_ATTEMPT,
    error_type: ErrorType = None,
) -> Union[T, F]:
    """One guarded async LLM call under ``policy``; as [`call_llm`][llama_index_hiqa.models.llm_calls.call_llm].

    Args:
        make_call: Makes one fresh attempt (a coroutine): the LLM call and any check of its
            answer (raising retries).
        what: What the call is, for the log and the event.
        fallback: Answers from the last error when every attempt failed (after one warning
            in the log); ``None``: raise.
        instead: What the fallback does, for the warning.
        policy: Time limit, retries and backoff.
        error_type: Without a fallback, turns the last error into the component's typed
            error; ``None``: the last error is raised as it is.

    Returns:
        The first successful attempt's answer, else the fallback's.

    Raises:
        Exception: Without a fallback, the last error (or ``error_type`` of it).
    """
    answer, error = await _aattempts(make_call, what, policy)
    if error is None:
        return answer
    return _give_up(what, instead, policy, error, fallback, error_type)


async def call_with_retries(
    make_call: Callable[[], Awaitable[T]],
    *,
    max_retries: int,
    backoff_seconds: float,
    timeout_seconds: Optional[float],
) -> Tuple[Optional[T], Optional[BaseException]]:
    """The retry loop of [`acall_llm`][llama_index_hiqa.models.llm_calls.acall_llm] without its fallback, for callers that keep their
    own bookkeeping of failures.

    Args:
        make_call: Makes one fresh attempt (the LLM call and any validation of its answer:
            raising retries).
        max_retries: Retries after the first attempt.
        backoff_seconds: First wait before a retry (see [`retry_delay`][llama_index_hiqa.models.llm_calls.retry_delay]).
        timeout_seconds: Time limit of one attempt (``None`` or 0: none).

    Returns:
        ``(answer, None)`` from the first attempt that succeeds, else ``(None, last error)``.
    """
    policy = LLMCallPolicy(
        max_retries=max_retries, retry_backoff_seconds=backoff_seconds, timeout_seconds=timeout_seconds or None
    )
    answer, error = await _aattempts(make_call, "LLM call", policy)
    return (None, error) if error is not None else (answer, None)
