"""The optional LLM question rewrite inside the focused documents: parsing, the LLM-call
policy's fallback (the question unrewritten), its visibility in route_scores, and off
without an LLM."""

import asyncio
import logging
import time

import pytest

from llama_index_hiqa import DocumentFocusRetriever, HiQAPack, schema
from llama_index_hiqa.errors import InvalidSettingError
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_hiqa.retrievers.question_rewrite import (
    REWRITE,
    FocusRewrite,
    QuestionRewriter,
    parse_rewrite_terms,
    rewritten_question,
    with_rewrite,
)
from llama_index_hiqa.retrievers.settings import DocumentFocusSettings, QuestionRewriteSettings
from llama_index_hiqa.testing import HashingEmbedding, ScriptedLLM
from llama_index_hiqa.vocabularies import VocabularyExpansion
from tests.test_document_focus import _retrievers

QUICK = "Does Acme have a healthy quick ratio?"
ANSWER = "- Cash and cash equivalents\n- Accounts receivable\n2. total current liabilities\n"


# --- parsing the answer -----------------------------------------------------------------


def test_parse_takes_one_term_per_line_without_bullets_numbers_or_repeats():
    answer = "Terms:\n- Cash and cash equivalents\n* accounts receivable; Accounts Receivable\n3) \"Marketable securities\".\n"
    assert parse_rewrite_terms(answer, QUICK, 10) == ["Cash and cash equivalents", "accounts receivable", "Marketable securities"]


def test_parse_leaves_out_the_questions_words_sentences_and_what_is_over_the_limit():
    answer = "quick ratio\nThe quick ratio is a measure of liquidity that compares assets with debts\ncash, receivables, inventories"
    assert parse_rewrite_terms(answer, QUICK, 2) == ["cash", "receivables"]
    assert parse_rewrite_terms("", QUICK, 5) == [] and parse_rewrite_terms("\n - \n", QUICK, 5) == []


def test_with_rewrite_adds_one_concept_after_the_vocabularys_without_its_terms():
    vocabulary = VocabularyExpansion(QUICK, (("quick ratio", ("accounts receivable",)),))
    merged = with_rewrite(vocabulary, QUICK, ["Accounts receivable", "cash"])
    assert merged.explained() == {"quick ratio": ["accounts receivable"], REWRITE: ["cash"]}
    assert with_rewrite(vocabulary, QUICK, ["accounts receivable"]) is vocabulary
    assert with_rewrite(None, QUICK, ["cash"]).explained() == {REWRITE: ["cash"]}


# --- the call through the LLM-call policy -------------------------------------------------


def test_the_rewriter_asks_once_and_returns_the_terms():
    llm = ScriptedLLM([ANSWER])
    terms = QuestionRewriter(llm).rewrite(QUICK)
    assert terms == ["Cash and cash equivalents", "Accounts receivable", "total current liabilities"]
    assert llm.calls == 1 and QUICK in llm.prompts[0]


def test_the_focus_asks_only_with_an_llm_enabled_and_results_sync_and_async():
    found = [NodeWithScore(node=TextNode(text="x"), score=1.0)]
    llm = ScriptedLLM([ANSWER, ANSWER])
    step = FocusRewrite(llm, QuestionRewriteSettings(enabled=True))
    assert step.terms(QUICK, []) == [] and asyncio.run(step.aterms(QUICK, [])) == [] and llm.calls == 0
    assert step.terms(QUICK, found)[0] == "Cash and cash equivalents"
    assert asyncio.run(step.aterms(QUICK, found))[0] == "Cash and cash equivalents" and llm.calls == 2
    assert not FocusRewrite(None, QuestionRewriteSettings(enabled=True)).asks(found)
    assert not FocusRewrite(ScriptedLLM([ANSWER]), QuestionRewriteSettings(enabled=False)).asks(found)


def test_the_rewritten_question_keeps_its_embedding_and_lists_the_terms():
    query = QueryBundle(QUICK, embedding=[0.1, 0.2])
    bundle, expansion = rewritten_question(query, None, ["accounts receivable"])
    assert bundle.query_str == f"{QUICK} accounts receivable" and bundle.embedding == [0.1, 0.2]
    assert expansion is not None and expansion.explained() == {REWRITE: ["accounts receivable"]}
    assert rewritten_question(query, None, []) == (query, None)  # no term: unchanged


def test_a_malformed_answer_is_retried_then_falls_back_to_the_question_unrewritten(caplog):
    config = QuestionRewriteSettings(enabled=True, max_retries=1, retry_backoff_seconds=0)
    llm = ScriptedLLM(["quick ratio", ANSWER])  # nothing usable, then an answer
    assert QuestionRewriter(llm, config).rewrite(QUICK)[0] == "Cash and cash equivalents"
    assert llm.calls == 2
    broken = ScriptedLLM(["quick ratio", "\n"])
    with caplog.at_level(logging.WARNING):
        assert QuestionRewriter(broken, config).rewrite(QUICK) == []
    assert broken.calls == 2 and "searching the question unrewritten" in caplog.text


def test_an_llm_error_falls_back_in_the_async_path_too():
    def fail(prompt):
        raise ConnectionError("down")

    assert asyncio.run(QuestionRewriter(ScriptedLLM(fail)).arewrite(QUICK)) == []
    assert asyncio.run(QuestionRewriter(ScriptedLLM([ANSWER])).arewrite(QUICK))[1] == "Accounts receivable"


@pytest.mark.parametrize("fault", ["slow", "truncated_json", "server_error"])
def test_the_loopback_server_faults_fall_back_and_a_good_answer_goes_through(fault):
    from llama_index_hiqa.testing.openai_server import Fault, OpenAICompatibleServer

    config = QuestionRewriteSettings(enabled=True, max_retries=0, timeout_seconds=0.5)
    with OpenAICompatibleServer(["warm up", Fault(fault), ANSWER], slow_seconds=1.0) as server:
        llm = server.llm(timeout=5.0)
        llm.complete("warm up")  # the OpenAI client's first request imports it (seconds): not the fault
        rewriter = QuestionRewriter(llm, config)
        assert rewriter.rewrite(QUICK) == []  # the fault: the question unrewritten
        if fault == "slow":  # the abandoned call holds the policy's one call thread until it ends
            time.sleep(1.0)
        assert rewriter.rewrite(QUICK) == ["Cash and cash equivalents", "Accounts receivable", "total current liabilities"]


# --- inside the document focus ----------------------------------------------------------------

OFF = {"table_weight": 0.0, "heading_weight": 0.0, "heading_words_weight": 0.0, "focus_documents": 1}
QUESTION = "acme capital spending"
PARTS = "purchases of property\nconsolidated statement of cash flows"


def _focus(llm, **rewrite):
    multi, _, _ = _retrievers(**OFF)
    return DocumentFocusRetriever(multi, embed_model=HashingEmbedding(dim=64), llm=llm, question_rewrite=rewrite, **OFF)


def test_the_rewrites_terms_rank_the_nodes_that_hold_them_and_show_in_route_scores():
    before = {r.node.node_id: r for r in _focus(None).retrieve(QUESTION)}
    llm = ScriptedLLM(default_response=PARTS)
    rewritten = _focus(llm, enabled=True)
    results = rewritten.retrieve(QUESTION)
    after = {r.node.node_id: r for r in results}
    # the statement's words: BM25 finds the cash flow statement, which it did not before
    assert before["acme-cash"].node.metadata[schema.ROUTE_SCORES]["bm25"] is None
    assert after["acme-cash"].node.metadata[schema.ROUTE_SCORES]["bm25"] > 0
    assert list(after).index("acme-cash") < list(before).index("acme-cash")
    assert results[0].node.metadata[schema.ROUTE_SCORES]["vocabulary"] == {
        REWRITE: ["purchases of property", "consolidated statement of cash flows"]
    }
    assert llm.calls == 1  # one call a question, whatever the steps
    assert [r.node.node_id for r in asyncio.run(rewritten.aretrieve(QUESTION))] == list(after)
    assert rewritten.full_ranking(QUESTION)[: len(after)] == list(after)


def test_off_without_an_llm_or_unless_enabled_and_a_failed_rewrite_ranks_as_without_one():
    plain = [r.node.node_id for r in _focus(None).retrieve(QUESTION)]
    assert [r.node.node_id for r in _focus(None, enabled=True).retrieve(QUESTION)] == plain
    idle = ScriptedLLM(default_response=PARTS)
    assert [r.node.node_id for r in _focus(idle).retrieve(QUESTION)] == plain and idle.calls == 0

    def fail(prompt):
        raise TimeoutError("slow")

    failed = _focus(ScriptedLLM(fail), enabled=True).retrieve(QUESTION)
    assert [r.node.node_id for r in failed] == plain
    assert "vocabulary" not in failed[0].node.metadata[schema.ROUTE_SCORES]


@pytest.mark.parametrize(
    "rewrite, name",
    [({"bogus": 1}, "question_rewrite.bogus"), ({"max_terms": 0}, "question_rewrite.max_terms"),
     ({"timeout_seconds": -1}, "question_rewrite.timeout_seconds")],
)
def test_bad_rewrite_settings_fail_at_construction_naming_the_key(rewrite, name):
    with pytest.raises(InvalidSettingError, match=name):
        DocumentFocusSettings(question_rewrite=rewrite)


def test_the_pack_warns_that_the_rewrite_needs_an_llm():
    with pytest.warns(UserWarning, match="question_rewrite has no effect without an LLM"):
        HiQAPack.empty(embed_model=HashingEmbedding(dim=16), document_focus={"question_rewrite": {"enabled": True}})
