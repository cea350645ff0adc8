import asyncio

from llama_index_hiqa.models.llm_calls import call_with_retries, with_timeout


async def test_retries_until_an_attempt_succeeds():
    attempts = []

    async def flaky():
        attempts.append(len(attempts))
        if len(attempts) < 3:
            raise ValueError("malformed")
        return "ok"

    answer, error = await call_with_retries(flaky, max_retries=2, backoff_seconds=0, timeout_seconds=None)
    assert (answer, error) == ("ok", None)
    assert attempts == [0, 1, 2]


async def test_gives_up_with_the_last_error_after_the_retries():
    async def slow():
        await asyncio.sleep(1)

    answer, error = await call_with_retries(slow, max_retries=1, backoff_seconds=0, timeout_seconds=0.01)
    assert answer is None
    assert isinstance(error, asyncio.TimeoutError)


async def test_no_timeout_means_no_bound():
    async def value():
        return 7

    assert await with_timeout(value(), None) == 7
    assert await with_timeout(value(), 0) == 7


class _HTTPError(Exception):
    """An error shaped like openai's APIStatusError: it carries the HTTP response."""

    def __init__(self, headers):
        super().__init__("429 Too Many Requests")
        self.response = type("Response", (), {"headers": headers})()


def test_retry_after_is_read_in_seconds_milliseconds_and_http_dates():
    from email.utils import formatdate
    import time

    from llama_index_hiqa.models.llm_calls import retry_after_seconds

    assert retry_after_seconds(_HTTPError({"retry-after": "2"})) == 2.0
    assert retry_after_seconds(_HTTPError({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    in_ten = retry_after_seconds(_HTTPError({"retry-after": formatdate(time.time() + 10, usegmt=True)}))
    assert 8 <= in_ten <= 10
    assert retry_after_seconds(_HTTPError({"retry-after": "soon"})) is None
    assert retry_after_seconds(ValueError("no response")) is None


def test_retry_delay_waits_as_long_as_the_server_asks_within_a_cap():
    from llama_index_hiqa.models.llm_calls import MAX_RETRY_AFTER_SECONDS, retry_delay

    assert retry_delay(ValueError("x"), 2, 0.5) == 2.0  # backoff · 2^attempt
    assert retry_delay(_HTTPError({"retry-after": "3"}), 0, 0.5) == 3.0  # the server's wait wins
    assert retry_delay(_HTTPError({"retry-after": "0"}), 1, 0.5) == 1.0  # ... only when longer
    assert retry_delay(_HTTPError({"retry-after": "86400"}), 0, 0.5) == MAX_RETRY_AFTER_SECONDS


async def test_call_with_retries_sleeps_the_retry_after(monkeypatch):
    slept = []

    async def fake_sleep(seconds):
        slept.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    attempts = []

    async def limited():
        attempts.append(1)
        if len(attempts) == 1:
            raise _HTTPError({"retry-after": "1.5"})
        return "ok"

    answer, error = await call_with_retries(limited, max_retries=2, backoff_seconds=0.1, timeout_seconds=None)
    assert (answer, error) == ("ok", None)
    assert slept == [1.5]


# --- the policy: call_llm / acall_llm -----------------------------------------------------------

import logging  # noqa: E402
import time  # noqa: E402
from contextlib import contextmanager  # noqa: E402

import pytest  # noqa: E402

from llama_index_hiqa.errors import LLMOutputError, RerankerError  # noqa: E402
from llama_index_hiqa.events import LLMCallFailedEvent  # noqa: E402
from llama_index_hiqa.models.llm_calls import LLMCallPolicy, acall_llm, call_llm  # noqa: E402
from llama_index_hiqa.testing import OpenAICompatibleServer, ScriptedLLM  # noqa: E402


@contextmanager
def llm_call_events():
    """The LLMCallFailedEvents sent through LlamaIndex's root dispatcher while inside."""
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler

    seen = []

    class Collect(BaseEventHandler):
        @classmethod
        def class_name(cls):
            return "CollectLLMCallEvents"

        def handle(self, event, **kwargs):
            if isinstance(event, LLMCallFailedEvent):
                seen.append(event)

    handler, root = Collect(), get_dispatcher()
    root.add_event_handler(handler)
    try:
        yield seen
    finally:
        root.event_handlers.remove(handler)


def _keywords(answer):
    """A check of the answer inside the attempt: a malformed answer raises, so it is retried."""
    from llama_index_hiqa.transforms.critical_keywords import parse_keyword_list

    return parse_keyword_list(answer, strict=True)


def test_policy_settings_are_validated_at_construction():
    with pytest.raises(ValueError, match="max_retries"):
        LLMCallPolicy(max_retries=-1)
    with pytest.raises(ValueError, match="timeout_seconds"):
        LLMCallPolicy(timeout_seconds=0)
    with pytest.raises(ValueError, match="retries"):
        LLMCallPolicy(retries=2)  # a misspelt setting fails instead of being ignored
    assert LLMCallPolicy().attempts == 1 and LLMCallPolicy(max_retries=2).attempts == 3


def test_malformed_answer_is_retried_then_answered_sync_and_async():
    policy = LLMCallPolicy(max_retries=1, retry_backoff_seconds=0)
    llm = ScriptedLLM(["no list here " * 40, "['OPT3004', 'NX-2040']"])
    with llm_call_events() as events:
        got = call_llm(lambda: _keywords(llm.complete("q").text), what="keywords", fallback=lambda e: [], policy=policy)
    assert got == ["OPT3004", "NX-2040"] and llm.calls == 2
    assert [(e.attempt, e.attempts, e.retry_in_seconds) for e in events] == [(1, 2, 0.0)]
    assert events[0].error.startswith("LLMOutputError")

    allm = ScriptedLLM(["no list here " * 40, "['OPT3004']"])

    async def ask():
        return _keywords((await allm.acomplete("q")).text)

    assert asyncio.run(acall_llm(ask, what="keywords", fallback=lambda e: [], policy=policy)) == ["OPT3004"]
    assert allm.calls == 2


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_malformed_output_falls_back_with_one_warning_and_loses_nothing(mode, caplog):
    llm = ScriptedLLM(["not a list " * 40] * 3)
    kept = ["rule keyword"]  # what the component had before asking: the fallback returns it whole
    policy = LLMCallPolicy(max_retries=2, retry_backoff_seconds=0)
    with caplog.at_level(logging.WARNING, logger="llama_index_hiqa.models.llm_calls"), llm_call_events() as events:
        if mode == "sync":
            got = call_llm(
                lambda: kept + _keywords(llm.complete("q").text), what="keyword prompt",
                instead="using the rule keywords", fallback=lambda error: list(kept), policy=policy,
            )
        else:
            async def ask():
                return kept + _keywords((await llm.acomplete("q")).text)

            got = asyncio.run(acall_llm(
                ask, what="keyword prompt", instead="using the rule keywords",
                fallback=lambda error: list(kept), policy=policy,
            ))
    assert got == ["rule keyword"] and llm.calls == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "keyword prompt failed after 3 attempts (LLMOutputError" in warnings[0]
    assert warnings[0].endswith("using the rule keywords")
    assert [e.retry_in_seconds is None for e in events] == [False, False, True]


def test_without_a_fallback_the_typed_error_is_raised():
    llm = ScriptedLLM([ConnectionError("refused")])
    with pytest.raises(RerankerError, match="refused") as caught:
        call_llm(lambda: llm.complete("q"), what="reranking", error_type=lambda e: RerankerError("reranker", str(e)))
    assert isinstance(caught.value.__cause__, ConnectionError)
    typed = LLMOutputError("bad")
    with pytest.raises(LLMOutputError) as same:  # already typed: raised as it is, not wrapped
        call_llm(lambda: (_ for _ in ()).throw(typed), what="x", error_type=lambda e: e)
    assert same.value is typed


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_call_past_its_time_limit_is_retried_then_falls_back(mode):
    llm = ScriptedLLM(["late"] * 2 + ["in time"], latency_seconds=0.0)
    slow = {"left": 1}

    def one_sync():
        if slow["left"]:
            slow["left"] -= 1
            time.sleep(0.5)
        return llm.complete("q").text

    async def one_async():
        if slow["left"]:
            slow["left"] -= 1
            await asyncio.sleep(0.5)
        return (await llm.acomplete("q")).text

    policy = LLMCallPolicy(max_retries=1, retry_backoff_seconds=0, timeout_seconds=0.1)
    start = time.monotonic()
    with llm_call_events() as events:
        if mode == "sync":
            got = call_llm(one_sync, what="slow call", fallback=lambda e: "fallback", policy=policy)
        else:
            got = asyncio.run(acall_llm(one_async, what="slow call", fallback=lambda e: "fallback", policy=policy))
    assert got in ("late", "in time")  # the second attempt, in time
    assert time.monotonic() - start < 0.45  # the first was not waited for
    assert len(events) == 1 and "Timeout" in events[0].error

    never = LLMCallPolicy(timeout_seconds=0.05)
    if mode == "sync":
        got = call_llm(lambda: time.sleep(0.3), what="slow call", fallback=lambda e: type(e).__name__, policy=never)
    else:
        got = asyncio.run(acall_llm(lambda: asyncio.sleep(0.3), what="slow call", fallback=lambda e: type(e).__name__, policy=never))
    assert got == "TimeoutError"


def test_sync_retry_sleeps_the_servers_retry_after(monkeypatch):
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    llm = ScriptedLLM([_HTTPError({"retry-after": "2.5"}), "ok"])
    policy = LLMCallPolicy(max_retries=1, retry_backoff_seconds=0.1)
    assert call_llm(lambda: llm.complete("q").text, what="x", policy=policy) == "ok"
    assert slept == [2.5]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_429_from_the_server_is_retried_after_its_retry_after(mode):
    """The real OpenAI client over HTTP: 429 + Retry-After, then an answer."""
    with OpenAICompatibleServer(["['NX-2040']"], faults=["rate_limit"], retry_after_seconds=0.4) as server:
        llm = server.llm(timeout=5.0)
        policy = LLMCallPolicy(max_retries=2, retry_backoff_seconds=0.0)
        with llm_call_events() as events:
            if mode == "sync":
                got = call_llm(lambda: _keywords(llm.complete("q").text), what="keywords", fallback=lambda e: [], policy=policy)
            else:
                async def ask():
                    return _keywords((await llm.acomplete("q")).text)

                got = asyncio.run(acall_llm(ask, what="keywords", fallback=lambda e: [], policy=policy))
        (t0, first), (t1, second) = server.stats.events
    assert got == ["NX-2040"]
    assert (first, second) == ("rate_limit", "answer")
    assert t1 - t0 >= 0.4  # the backoff alone (0 s) would have retried at once
    assert len(events) == 1 and events[0].retry_in_seconds == pytest.approx(0.4)
    assert "RateLimitError" in events[0].error


def test_server_faults_end_in_the_fallback_with_the_source_kept():
    """Every attempt fails (500, truncated JSON): the fallback answers with what was there."""
    with OpenAICompatibleServer(["unused"], faults=["server_error", "truncated_json"]) as server:
        llm = server.llm(timeout=5.0)
        source = "OPT3004 ambient light sensor"
        got = call_llm(
            lambda: llm.complete(source).text, what="summary", fallback=lambda error: source,
            policy=LLMCallPolicy(max_retries=1, retry_backoff_seconds=0),
        )
        assert got == source
        assert server.stats.faults["server_error"] == 1 and server.stats.faults["truncated_json"] == 1
