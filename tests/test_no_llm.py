"""'No LLM' means no LLM: None, LlamaIndex's MockLLM (what ``Settings.llm = None`` installs)
and an OpenAI client without a key all take the no-LLM paths, with one notice."""

from __future__ import annotations

import logging

import pytest
from llama_index.core import Settings
from llama_index.core.llms import MockLLM
from llama_index.llms.openai import OpenAI
from llama_index.llms.openai_like import OpenAILike

from llama_index_hiqa import HiQAPack, MarkdownFormatterParser, demo_data_dir
from llama_index_hiqa.models import defaults
from llama_index_hiqa.pack.answers import NO_LLM_NOTICE
from llama_index_hiqa.testing import ScriptedLLM
from tests.pack_helpers import HashEmbedding


@pytest.fixture(autouse=True)
def _fresh_notice(monkeypatch):
    monkeypatch.setattr(defaults, "_no_llm_noticed", False)
    monkeypatch.setattr(Settings, "_llm", None)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def test_settings_llm_none_is_no_llm(caplog):
    Settings.llm = None  # LlamaIndex installs a MockLLM here
    assert type(Settings._llm) is MockLLM
    with caplog.at_level(logging.WARNING, logger="llama_index_hiqa.models.defaults"):
        assert defaults.resolve_llm() is None
        assert defaults.resolve_llm() is None
        assert MarkdownFormatterParser()._llm is None
    notices = [r for r in caplog.records if "no-LLM" in r.getMessage()]
    assert len(notices) == 1 and "MockLLM" in notices[0].getMessage()


def test_mock_and_keyless_openai_are_no_llm_but_real_llms_are_kept():
    assert defaults.resolve_llm(MockLLM()) is None
    assert defaults.resolve_llm(OpenAI(model="gpt-4o-mini")) is None  # no key anywhere
    keyed = OpenAI(model="gpt-4o-mini", api_key="sk-test")
    assert defaults.resolve_llm(keyed) is keyed
    # A server of one's own may need no key.
    local = OpenAILike(model="local", api_base="http://127.0.0.1:9/v1", api_key="")
    assert defaults.resolve_llm(local) is local
    scripted = ScriptedLLM(responses=["x"])
    assert defaults.resolve_llm(scripted) is scripted


def test_the_demo_with_settings_llm_none_takes_the_no_llm_path(caplog):
    Settings.llm = None
    with caplog.at_level(logging.WARNING):
        pack = HiQAPack.from_directory(demo_data_dir(), embed_model=HashEmbedding())
        answer = pack.run("What is the maximum output current of the NX-2043?")
    assert pack.llm is None
    assert NO_LLM_NOTICE.split(".")[0] in str(answer)
    assert not [r for r in caplog.records if "unusable" in r.getMessage()]
    assert len([r for r in caplog.records if "no-LLM" in r.getMessage()]) == 1
