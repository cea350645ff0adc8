"""Every LLM path of the pack through the real ``llama-index-llms-openai`` client over HTTP,
against the in-test OpenAI-compatible server (127.0.0.1, ephemeral port): answers from
scripts, injected faults (429 + Retry-After, 500, slow reply past the timeout, truncated
JSON, empty choice), streaming and usage. Each path finishes with its documented fallback
and loses no source text; the command line picks the server and words its failures."""

from __future__ import annotations

import json
import re
import socket

import pytest
from llama_index.core.schema import Document, TextNode

from llama_index_hiqa import cli, schema
from llama_index_hiqa.pack import hiqa_pack as pack_module
from llama_index_hiqa.pack.answers import NO_LLM_NOTICE
from llama_index_hiqa.demo import DEMO_DATA_DIR, load_demo_documents
from llama_index_hiqa.errors import LLMConfigError
from llama_index_hiqa.models.llm_spec import check_llm, llm_from_spec
from llama_index_hiqa.testing.openai_server import FAULT_KINDS, Fault, OpenAICompatibleServer
from llama_index_hiqa.parsers.markdown_formatter import MarkdownFormatterParser, window_from_prompt
from tests.pack_helpers import HashEmbedding

FAST = dict(retry_backoff_seconds=0.0, timeout_seconds=3.0)


@pytest.fixture
def serve():
    """Start servers for one test; every one is stopped at teardown."""
    servers = []

    def start(responses=(), **kw):
        server = OpenAICompatibleServer(responses, **kw).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def demo_docs():
    return {d.metadata[schema.DOCUMENT_ID]: d for d in load_demo_documents()}


def _text_nodes(nodes):
    return [n for n in nodes if schema.get_segment_kind(n) != schema.KIND_IMAGE]


def _assert_source_text_kept(doc, nodes):
    """The text segments tile the document: every character of the source is in exactly one."""
    spans = [schema.get_char_span(n) for n in _text_nodes(nodes)]
    assert spans[0][0] == 0 and spans[-1][1] == len(doc.text)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


# --- the server itself ----------------------------------------------------------------------


def test_server_answers_streams_reports_usage_and_injects_every_fault(serve):
    import openai

    server = serve(["first answer", "a streamed answer of six words"], default_response="ok",
                   slow_seconds=0.6)
    llm = server.llm(timeout=0.3)
    assert llm.complete("hello there").text == "first answer"
    deltas = [r.delta for r in llm.stream_complete("stream please")]
    assert "".join(deltas) == "a streamed answer of six words" and len([d for d in deltas if d]) == 6
    assert server.stats.streamed == 1 and server.stats.completion_tokens > 0 and server.stats.prompt_tokens > 0

    server._queued_faults = [Fault(k) for k in FAULT_KINDS]
    seen = []
    for _ in FAULT_KINDS:
        with pytest.raises(Exception) as caught:
            llm.complete("q")
        seen.append(type(caught.value))
    assert seen[:2] == [openai.RateLimitError, openai.InternalServerError]
    assert seen[2] is openai.APITimeoutError  # the slow reply, past the client's timeout
    assert issubclass(seen[3], ValueError) and seen[4] is IndexError  # truncated JSON, empty choice
    assert dict(server.stats.faults) == {k: 1 for k in FAULT_KINDS}
    with pytest.raises(ValueError):
        Fault("meteor")
    with pytest.raises(ValueError):
        OpenAICompatibleServer(fault_rate=2.0)


def test_server_listens_on_loopback_only_and_stops(serve):
    server = serve(default_response="x")
    assert server.url.startswith("http://127.0.0.1:")
    port = int(server.url.rsplit(":", 1)[1].split("/")[0])
    server.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()


# --- HiQA Markdown formatter over a PDF -------------------------------------------------------


def _echo_markdown(prompt):
    return window_from_prompt(prompt)  # a perfect formatter: the window as it is


def test_markdown_formatter_over_pdfs_with_faults_and_concurrency_loses_no_text(serve, demo_docs):
    server = serve(_echo_markdown, latency_seconds=0.05, slow_seconds=1.0,
                   faults=["rate_limit", "server_error", "slow", "truncated_json", "empty_choice"])
    parser = MarkdownFormatterParser(llm=server.llm(timeout=0.5), num_workers=4, max_retries=3, **FAST)
    docs = [demo_docs[k] for k in ("NX-2040", "NX-2041", "NX-2042", "NX-2043")]
    nodes = parser.get_nodes_from_documents(docs)
    for doc in docs:
        mine = [n for n in nodes if schema.get_document_id(n) == doc.metadata[schema.DOCUMENT_ID]]
        _assert_source_text_kept(doc, mine)
        kinds = [schema.get_segment_kind(n) for n in mine]
        assert kinds.count(schema.KIND_IMAGE) == 1  # the datasheet's figure survives the LLM path
    # every fault was injected, retried, and the retries succeeded: no window fell back
    assert sum(server.stats.faults.values()) == 5
    assert {n.metadata[schema.PARSE_PATH] for n in nodes} == {"llm"}
    assert server.stats.max_in_flight > 1  # documents were formatted concurrently
    assert server.stats.completions == len(docs) + 5 and server.stats.total_tokens > 0


def test_markdown_formatter_falls_back_to_the_layout_parser_when_the_server_keeps_failing(serve, demo_docs):
    server = serve(lambda p: Fault("server_error"))
    parser = MarkdownFormatterParser(llm=server.llm(), max_retries=1, **FAST)
    doc = demo_docs["NX-2044"]
    nodes = parser.get_nodes_from_documents([doc])
    _assert_source_text_kept(doc, nodes)
    assert {n.metadata[schema.PARSE_PATH] for n in nodes} == {"layout_fallback"}
    assert server.stats.faults["server_error"] == 2  # one call + one retry, then the fallback


def test_retries_wait_as_long_as_retry_after_asks(serve, demo_docs):
    server = serve(_echo_markdown, faults=["rate_limit"], retry_after_seconds=0.4)
    parser = MarkdownFormatterParser(llm=server.llm(), max_retries=2, **FAST)
    parser.get_nodes_from_documents([demo_docs["NX-2045"]])
    (t0, first), (t1, second) = server.stats.events
    assert (first, second) == ("rate_limit", "answer")
    assert t1 - t0 >= 0.4  # the backoff alone (0 s) would have retried at once


# --- TextRAG sectioning, context headers, keyword prompts -------------------------------------


def _sections_of_window(prompt):
    numbers = [int(x) for x in re.findall(r"^\[(\d+)\]", prompt.split("DOCUMENT EXCERPT", 1)[1], re.M)]
    lo, hi = numbers[0], numbers[-1]
    secs = [{"title": f"Part {s}", "start_index": s, "end_index": min(s + 9, hi)} for s in range(lo, hi + 1, 10)]
    return json.dumps({"sections": secs})


def test_line_number_sectioner_over_http_recovers_from_faults_and_partitions_the_text(serve):
    from llama_index_hiqa import LineNumberSegmentParser

    text = "\n\n".join(f"Paragraph {i}. " + " ".join(f"w{i}x{j}" for j in range(25)) for i in range(60))
    doc = Document(text=text)
    server = serve(_sections_of_window, slow_seconds=1.0,
                   faults=["truncated_json", "empty_choice", "rate_limit", "slow", "server_error"])
    parser = LineNumberSegmentParser(
        llm=server.llm(timeout=0.5), min_chars_for_llm=0, window_chars=2_000, max_retries=5, **FAST
    )
    nodes = parser.get_nodes_from_documents([doc])
    assert "".join(n.text for n in nodes) == text  # the partition property, whatever the server did
    assert sum(server.stats.faults.values()) == 5
    # five faults cannot exhaust any window's six attempts: every window was sectioned by the LLM
    assert parser.failed_windows == 0 and {n.metadata[schema.PARSE_PATH] for n in nodes} == {"llm"}

    down = serve(lambda p: Fault("server_error"))
    parser = LineNumberSegmentParser(llm=down.llm(), min_chars_for_llm=0, window_chars=2_000, max_retries=1, **FAST)
    nodes = parser.get_nodes_from_documents([doc])
    assert "".join(n.text for n in nodes) == text  # fallback: one section per window, no text lost
    assert parser.failed_windows > 0 and {n.metadata[schema.PARSE_PATH] for n in nodes} == {"text"}


def test_context_headers_over_http_and_their_fallback(serve):
    from llama_index_hiqa import ContextHeaderTransform

    def answer(prompt):
        if "title of the document" in prompt:
            return "NX-2043 regulator datasheet"
        return "This document is about a voltage regulator."

    server = serve(answer, faults=["rate_limit", "empty_choice"])
    nodes = [TextNode(text=f"Part {i}: the regulator keeps 2.5 V.") for i in range(3)]
    for i, node in enumerate(nodes):
        schema.set_segment_facts(node, document_id="nx", document_title="", position=i)
    texts = [n.text for n in nodes]
    out = ContextHeaderTransform(llm=server.llm(), max_retries=2, **FAST)(nodes)
    assert [n.text for n in out] == texts  # node text is never rewritten
    assert out[0].metadata[schema.DOCUMENT_TITLE] == "NX-2043 regulator datasheet"
    assert "voltage regulator" in out[0].metadata[schema.DOCUMENT_SUMMARY]

    down = serve(lambda p: Fault("server_error"))
    fallback = [TextNode(text="Some text.")]
    schema.set_segment_facts(fallback[0], document_id="other", document_title="Given title", position=0)
    out = ContextHeaderTransform(llm=down.llm(), max_retries=1, **FAST)(fallback)
    assert out[0].text == "Some text." and schema.DOCUMENT_SUMMARY not in out[0].metadata  # left out


def test_keyword_prompts_over_http_fall_back_to_the_rules(serve):
    from llama_index_hiqa import CriticalKeywordExtractor, normalize_keyword

    llm_keyword = normalize_keyword("thermal shutdown")
    server = serve(["NX-2043, thermal shutdown"], faults=["server_error"], default_response="ceramic capacitor")
    extractor = CriticalKeywordExtractor(llm=server.llm(), use_ner=False)
    failed = extractor.extract("The NX-2043 has thermal shutdown.")  # 500: the rules' keywords only
    assert normalize_keyword("NX-2043") in failed and llm_keyword not in failed
    answered = extractor.extract("The NX-2043 has thermal shutdown.")
    assert llm_keyword in answered and server.stats.completions == 2


# --- answer synthesis and streaming through the pack ------------------------------------------


@pytest.fixture
def small_pack(monkeypatch, demo_docs):
    from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

    monkeypatch.setattr(pack_module, "keyword_extractor", lambda config: CriticalKeywordExtractor(use_ner=False))
    docs = [demo_docs[k] for k in ("NX-2042", "NX-2043")]
    return pack_module.HiQAPack.from_documents(docs, embed_model=HashEmbedding(), similarity_top_k=3)


def test_answer_synthesis_and_streaming_through_the_pack_over_http(serve, small_pack):
    answer = "The NX-2043 application circuit is shown in Figure 1."
    server = serve(default_response=answer, faults=["rate_limit"], retry_after_seconds=0.05)
    llm = server.llm(max_retries=2)  # answer synthesis relies on the client's retries (Retry-After)
    response = small_pack.run("Show the typical application circuit of the NX-2043", llm=llm)
    assert str(response) == answer and response.source_nodes
    assert server.stats.faults["rate_limit"] == 1

    streamed = small_pack.run("Show the typical application circuit of the NX-2043", llm=llm, streaming=True)
    tokens = list(streamed.response_gen)
    assert "".join(tokens) == answer and len(tokens) > 3 and server.stats.streamed == 1
    figures = small_pack.figures(streamed)
    assert [(f["document_id"], f["page"], f["section"]) for f in figures] == [("NX-2043", 1, "3 Description")]
    assert figures[0]["caption"] == "Figure 1. Typical application circuit of the NX-2043"


def test_without_an_llm_streaming_yields_the_evidence_answer(small_pack):
    response = small_pack.run("NX-2043 application circuit", streaming=True)
    assert "".join(response.response_gen).startswith(NO_LLM_NOTICE)


# --- the command line -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

    path = tmp_path_factory.mktemp("http") / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pack_module, "default_embed_model", lambda m=None, backend=None: m or HashEmbedding())
        mp.setattr(pack_module, "keyword_extractor", lambda config: CriticalKeywordExtractor(use_ner=False))
        assert cli.main(["ingest", str(DEMO_DATA_DIR), "--store", str(path), "--quiet"]) == 0
    return path


@pytest.fixture
def cheap_models(monkeypatch):
    from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor

    monkeypatch.setattr(pack_module, "default_embed_model", lambda m=None, backend=None: m or HashEmbedding())
    monkeypatch.setattr(pack_module, "keyword_extractor", lambda config: CriticalKeywordExtractor(use_ner=False))
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def test_store_keeps_each_figure_once_by_content_hash(store):
    files = sorted(p.name for p in (store / "images").iterdir())
    # the ten datasheets share one generated bitmap: one file, named by its content hash
    assert len(files) == 1 and re.fullmatch(r"[0-9a-f]{32}\.png", files[0])
    assert (store / "images" / files[0]).read_bytes().startswith(b"\x89PNG")


def test_hiqa_ask_streams_from_an_openai_compatible_server_then_cites_and_lists_figures(
    serve, store, cheap_models, capsys
):
    answer = "Figure 1 shows the typical application circuit of the NX-2043."
    server = serve(default_response=answer, model="qwen2.5-7b-instruct")
    args = ["ask", "Show the typical application circuit of the NX-2043", "--store", str(store),
            "--llm", "openai-compatible:qwen2.5-7b-instruct", "--llm-base-url", server.url, "--stream"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith(answer) and server.stats.streamed == 1
    sources, figures = out.split("\nSources:\n")[1].split("\nFigures:\n")
    assert "[1] NX-2043" in sources
    assert re.search(r"NX-2043 .* · p\.1 · 3 Description · Figure 1\. Typical application circuit of the "
                     r"NX-2043 · .*images/[0-9a-f]{32}\.png", figures)

    assert cli.main(args[:-1] + ["--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["answer"] == answer
    (figure,) = [f for f in payload["figures"] if f["document_id"] == "NX-2043"]
    assert figure["page"] == 1 and figure["file"].endswith(".png") and len(figure["bbox"]) == 4


def test_hiqa_ask_without_llm_keeps_the_evidence_path_and_lists_the_figure(store, cheap_models, capsys):
    assert cli.main(["ask", "Show the typical application circuit of the NX-2043", "--store", str(store),
                     "--stream"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(NO_LLM_NOTICE) and "Figures:" in out


def test_base_url_from_the_environment_and_openai_form(serve, monkeypatch):
    server = serve(default_response="x", model="my-model")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    llm = llm_from_spec("openai-compatible:my-model", context_window=8192)
    assert llm.api_base == server.url and llm.metadata.context_window == 8192
    check_llm(llm)  # the server has the model: no error
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    known = llm_from_spec("openai:gpt-4o-mini")
    assert type(known).__name__ == "OpenAI" and known.model == "gpt-4o-mini"
    unknown = llm_from_spec("openai:my-finetune-2027")  # OpenAI(model=...) would reject the name
    assert type(unknown).__name__ == "OpenAILike" and unknown.model == "my-finetune-2027"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", ["refused", "unauthorised", "unknown_model", "wrong_path", "not_a_url", "no_url"])
def test_cli_llm_problems_are_one_clear_line(case, serve, store, cheap_models, monkeypatch, capsys):
    server = serve(default_response="x", model="served-model", api_key="right-key")
    monkeypatch.setenv("OPENAI_API_KEY", "right-key")
    model, url, expected = "served-model", server.url, None
    if case == "refused":
        url, expected = f"http://127.0.0.1:{_free_port()}/v1", "cannot connect to the server"
    elif case == "unauthorised":
        monkeypatch.setenv("OPENAI_API_KEY", "wrong-key")
        expected = "refused the API key (401); check OPENAI_API_KEY"
    elif case == "unknown_model":
        model, expected = "other-model", "has no model 'other-model' (it has: served-model)"
    elif case == "wrong_path":
        url, expected = server.url[: -len("/v1")] + "/api", "nothing OpenAI-compatible"
    elif case == "not_a_url":
        url, expected = "gpu-box:8000", "is not an http(s) URL"
    args = ["ask", "q", "--store", str(store), "--llm", f"openai-compatible:{model}"]
    if case == "no_url":
        expected = "no server URL"
    else:
        args += ["--llm-base-url", url]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"hiqa ask: --llm openai-compatible:{model}: ")


def test_llm_spec_rejects_malformed_names():
    for bad in ("gpt-4o-mini", "azure:gpt-4o", "openai-compatible:"):
        with pytest.raises(LLMConfigError, match="PROVIDER:MODEL"):
            llm_from_spec(bad)
    with pytest.raises(LLMConfigError, match="too small"):
        llm_from_spec("openai-compatible:m", base_url="http://127.0.0.1:1/v1", context_window=10)


def test_a_server_failing_mid_run_is_one_line_too(serve, store, cheap_models, monkeypatch, capsys):
    import httpx
    import openai

    server = serve(default_response="x", model="m")

    def failing_run(self, question, **kwargs):
        response = httpx.Response(503, request=httpx.Request("POST", server.url + "/chat/completions"))
        raise openai.InternalServerError("Service Unavailable", response=response, body=None)

    monkeypatch.setattr(pack_module.HiQAPack, "run", failing_run)
    args = ["ask", "q", "--store", str(store), "--llm", "openai-compatible:m", "--llm-base-url", server.url]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err == "hiqa ask: --llm openai-compatible:m: the server answered 503: Service Unavailable\n"
