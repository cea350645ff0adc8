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
