import asyncio

from llama_index_hiqa.llm_calls import call_with_retries, with_timeout


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

    from llama_index_hiqa.llm_calls import retry_after_seconds

    assert retry_after_seconds(_HTTPError({"retry-after": "2"})) == 2.0
    assert retry_after_seconds(_HTTPError({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    in_ten = retry_after_seconds(_HTTPError({"retry-after": formatdate(time.time() + 10, usegmt=True)}))
    assert 8 <= in_ten <= 10
    assert retry_after_seconds(_HTTPError({"retry-after": "soon"})) is None
    assert retry_after_seconds(ValueError("no response")) is None


def test_retry_delay_waits_as_long_as_the_server_asks_within_a_cap():
    from llama_index_hiqa.llm_calls import MAX_RETRY_AFTER_SECONDS, retry_delay

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
