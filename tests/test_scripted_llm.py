import pytest

from llama_index_hiqa.testing import ScriptedLLM, count_tokens


def test_answers_in_order_then_raises_scripted_errors():
    llm = ScriptedLLM(responses=["one", TimeoutError("slow"), "three"])
    assert llm.complete("p1").text == "one"
    with pytest.raises(TimeoutError):
        llm.complete("p2")
    assert llm.complete("p3").text == "three"
    assert llm.calls == 3
    with pytest.raises(RuntimeError, match="exhausted"):
        llm.complete("p4")


def test_function_script_and_token_counts():
    llm = ScriptedLLM(responses=lambda prompt: prompt.upper())
    assert llm.complete("ab cd").text == "AB CD"
    assert llm.prompt_tokens == 2 and llm.completion_tokens == 2
    assert count_tokens("Item 7A. Risk") == 4


async def test_async_and_chat_paths():
    from llama_index.core.llms import ChatMessage

    llm = ScriptedLLM(responses=["a", "b"], latency_seconds=0.01)
    assert (await llm.acomplete("x")).text == "a"
    assert llm.chat([ChatMessage(role="user", content="y")]).message.content == "b"
