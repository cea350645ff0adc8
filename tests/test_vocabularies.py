"""Expert vocabularies: the shipped files, the loader's errors, the expansion, and the
multi-route retriever and document focus applying it on the question side."""

import json

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import QueryBundle, TextNode

from llama_index_hiqa import DocumentFocusRetriever, ExpertVocabulary, MultiRouteRetriever, load_vocabulary, schema
from llama_index_hiqa.errors import InvalidSettingError, VocabularyFileError
from llama_index_hiqa.pack.config import HiQAPackSettings
from llama_index_hiqa.retrievers.settings import MultiRouteSettings
from llama_index_hiqa.storage.vector_store import MatrixVectorStore
from llama_index_hiqa.testing import HashingEmbedding
from llama_index_hiqa.transforms.critical_keywords import CriticalKeywordExtractor
from llama_index_hiqa.vocabularies import SHIPPED_VOCABULARIES


# --- the shipped files --------------------------------------------------------------------


@pytest.mark.parametrize("name", SHIPPED_VOCABULARIES)
def test_every_shipped_entry_says_where_it_comes_from(name):
    vocabulary = load_vocabulary(name)
    assert vocabulary.name == name
    entries = vocabulary.entries()
    assert len(entries) >= 30
    assert all(vocabulary.source_of(entry) for entry in entries)
    concepts = [entry.concept for entry in entries]
    assert len(concepts) == len(set(concepts)), "a concept is listed twice"


def test_finance_names_the_parts_of_a_ratio_and_the_section_of_a_topic():
    finance = load_vocabulary("finance")
    quick = finance.expand("Does Verizon have a healthy quick ratio?")
    assert "quick ratio" in quick.explained()
    assert {"total current liabilities", "accounts receivable"} <= set(quick.terms)
    assert quick.text().startswith("Does Verizon have a healthy quick ratio? ")
    assert "legal proceedings" in finance.expand("What legal battles did the company face?").explained()
    # An alias, any case and hyphenation, and a plural.
    assert "quick ratio" in finance.expand("its ACID TEST ratios").explained()
    # Terms the question already says are not added again.
    assert "legal proceedings" not in finance.expand("Summarise the legal proceedings").terms


def test_a_capitalised_abbreviation_matches_in_capitals_only():
    datasheets = load_vocabulary("datasheets")
    assert "supply voltage" in datasheets.expand("What is the VS range?").explained()
    assert datasheets.expand("part A vs part B") == datasheets.expand("part A vs part B")
    assert "supply voltage" not in datasheets.expand("part A vs part B").explained()
    assert "property, plant and equipment" in load_vocabulary("finance").expand("PP&E growth").explained()


def test_a_question_naming_no_concept_expands_to_itself():
    expansion = load_vocabulary("finance").expand("Who founded the company?")
    assert not expansion and expansion.terms == [] and expansion.text() == "Who founded the company?"


# --- a user's file ------------------------------------------------------------------------


def _write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(json.dumps(data) if name.endswith(".json") else data, encoding="utf-8")
    return path


GOOD = {"name": "mine", "groups": [{"name": "g", "source": "my glossary", "entries": [
    {"concept": "burn rate", "terms": ["net cash used in operating activities"]}]}]}


def test_a_users_json_and_yaml_files_load(tmp_path):
    from_json = load_vocabulary(_write(tmp_path, "mine.json", GOOD))
    yaml_text = "name: mine\ngroups:\n  - name: g\n    source: my glossary\n    entries:\n      - concept: burn rate\n        terms: [net cash used in operating activities]\n"
    from_yaml = load_vocabulary(str(_write(tmp_path, "mine.yaml", yaml_text)))
    assert from_json == from_yaml
    assert from_json.expand("What is the burn rate?").terms == ["net cash used in operating activities"]


def test_an_unknown_key_fails_naming_the_file_and_the_entry(tmp_path):
    bad = json.loads(json.dumps(GOOD))
    bad["groups"][0]["entries"][0]["synonyms"] = ["cash burn"]
    path = _write(tmp_path, "bad.json", bad)
    with pytest.raises(VocabularyFileError) as error:
        load_vocabulary(path)
    assert error.value.path == str(path)
    assert error.value.entry == "groups[0].entries[0].synonyms ('burn rate')"
    assert "bad.json" in str(error.value)


@pytest.mark.parametrize("change, where", [
    (lambda d: d["groups"][0]["entries"][0].update(terms=[]), "groups[0].entries[0].terms ('burn rate')"),
    (lambda d: d["groups"][0]["entries"][0].update(terms="net cash"), "groups[0].entries[0].terms ('burn rate')"),
    (lambda d: d["groups"][0]["entries"][0].update(concept="  "), "groups[0].entries[0].concept"),
    (lambda d: d.pop("groups"), "groups"),
])
def test_a_bad_shape_fails_naming_where(tmp_path, change, where):
    data = json.loads(json.dumps(GOOD))
    change(data)
    with pytest.raises(VocabularyFileError) as error:
        load_vocabulary(_write(tmp_path, "bad.json", data))
    assert error.value.entry == where


def test_files_that_are_not_vocabularies_fail_clearly(tmp_path):
    with pytest.raises(VocabularyFileError, match="does not exist"):
        load_vocabulary(tmp_path / "missing.yaml")
    with pytest.raises(VocabularyFileError, match="neither a shipped vocabulary"):
        load_vocabulary("medicine")
    with pytest.raises(VocabularyFileError, match="not valid YAML"):
        load_vocabulary(_write(tmp_path, "broken.yaml", "name: [unclosed\n"))
    with pytest.raises(VocabularyFileError, match="must hold a mapping"):
        load_vocabulary(_write(tmp_path, "list.yaml", "- a\n- b\n"))


def test_the_setting_is_checked_where_it_is_written(tmp_path):
    with pytest.raises(InvalidSettingError) as error:
        MultiRouteSettings(expert_vocabulary="medicine")
    assert error.value.setting == "expert_vocabulary"
    with pytest.raises(InvalidSettingError, match="multi_route.expert_vocabulary"):
        HiQAPackSettings(multi_route={"expert_vocabulary": str(tmp_path / "missing.yaml")})
    assert HiQAPackSettings(multi_route={"expert_vocabulary": "datasheets"}).multi_route.expert_vocabulary == "datasheets"


# --- applied by the retrievers ----------------------------------------------------------------


class _Recording(BaseRetriever):
    """A vector route that returns nothing and records what it was asked to embed."""

    def __init__(self):
        super().__init__()
        self.similarity_top_k = 1
        self.asked = []

    def _retrieve(self, query_bundle):
        self.asked.append(list(query_bundle.embedding_strs))
        return []


def _filing_nodes():
    texts = {
        "bs": "Cash and cash equivalents 1,200 Accounts receivable 800 Total current liabilities 1,500",
        "mdna": "Verizon discussed a healthy business and a strong ratio of customers to stores",
        "legal": "Legal proceedings: the company is a defendant in several patent suits",
    }
    nodes = []
    for node_id, text in texts.items():
        node = TextNode(id_=node_id, text=text)
        node.metadata[schema.DOCUMENT_ID] = "verizon"
        node.metadata[schema.DOCUMENT_TITLE] = "Verizon 2022 10-K"
        nodes.append(node)
    return nodes


def _multi(vocabulary, vector=None, scope="collection"):
    return MultiRouteRetriever(
        vector_retriever=vector, nodes=_filing_nodes(), keyword_extractor=CriticalKeywordExtractor(use_ner=False),
        expert_vocabulary=vocabulary, similarity_top_k=3, vocabulary_scope=scope,
    )


def test_the_vocabulary_brings_the_statement_lines_a_ratio_is_made_of():
    question = "Does Verizon have a healthy quick ratio?"
    without = _multi(None).retrieve(question)
    assert without[0].node.node_id == "mdna"  # the words of the question alone
    assert "vocabulary" not in without[0].node.metadata[schema.ROUTE_SCORES]
    vector = _Recording()
    with_vocabulary = _multi("finance", vector).retrieve(question)
    assert with_vocabulary[0].node.node_id == "bs"
    shown = with_vocabulary[0].node.metadata[schema.ROUTE_SCORES]["vocabulary"]
    assert "total current liabilities" in shown["quick ratio"]
    assert vector.asked == [[question]]  # the embedding sees the question alone


def test_the_keyword_route_counts_the_terms_on_nodes_that_hold_them():
    nodes = _filing_nodes()
    extractor = CriticalKeywordExtractor(use_ner=False, expert_keywords=["total current liabilities"])
    multi = MultiRouteRetriever(
        nodes=nodes, keyword_extractor=extractor, use_bm25=False, expert_vocabulary="finance", vocabulary_scope="collection"
    )
    question = "Verizon quick ratio"
    assert "totalcurrentliabilities" in multi.rank(QueryBundle(question)).keywords.normalized
    counts = multi.route_scores(question)["keywords"]
    plain = multi.with_settings(expert_vocabulary=None).route_scores(question)["keywords"]
    assert counts["bs"] == plain.get("bs", 0.0) + 1
    assert counts.get("mdna", 0.0) == plain.get("mdna", 0.0)


def test_by_default_the_vocabulary_ranks_inside_documents_and_leaves_the_collection_ranking_alone():
    question = "Does Verizon have a healthy quick ratio?"
    plain, inside = _multi(None), _multi("finance", scope="documents")
    assert [r.node.node_id for r in inside.retrieve(question)] == [r.node.node_id for r in plain.retrieve(question)]
    head = inside.rank(QueryBundle(question))
    assert "vocabulary" not in head.results[0].node.metadata[schema.ROUTE_SCORES]
    assert "quick ratio" in head.expansion.explained()  # for the document focus
    within = inside.scores_within(question, ["bs", "mdna"])["bm25"]
    assert within["bs"] > plain.scores_within(question, ["bs", "mdna"])["bm25"].get("bs", 0.0)


@pytest.mark.asyncio
async def test_async_retrieval_expands_as_sync_does():
    multi = _multi("finance")
    question = "Does Verizon have a healthy quick ratio?"
    sync = [(r.node.node_id, r.node.metadata[schema.ROUTE_SCORES]) for r in multi.retrieve(question)]
    asynced = [(r.node.node_id, r.node.metadata[schema.ROUTE_SCORES]) for r in await multi.aretrieve(question)]
    assert sync == asynced


def test_the_focus_reads_the_terms_as_named_heading_words():
    embed = HashingEmbedding(dim=64)
    nodes = []
    for node_id, heading, text in (
        ("legal", "Legal Proceedings", "the company is a defendant in several suits"),
        ("risk", "Risk Factors", "competition in the wireless market"),
    ):
        node = TextNode(id_=node_id, text=text)
        node.metadata.update({schema.DOCUMENT_ID: "verizon", schema.DOCUMENT_TITLE: "Verizon 2022 10-K", schema.PAGE_START: 1})
        schema.set_heading_path(node, [["", heading, 1]])
        node.excluded_embed_metadata_keys = list(node.metadata)
        nodes.append(node)
    index = VectorStoreIndex(nodes, embed_model=embed, storage_context=StorageContext.from_defaults(vector_store=MatrixVectorStore()))
    question = "What lawsuits did Verizon face?"
    shares = {}
    for vocabulary in (None, "finance"):
        multi = MultiRouteRetriever.from_index(index, keyword_extractor=CriticalKeywordExtractor(use_ner=False), expert_vocabulary=vocabulary)
        results = DocumentFocusRetriever(multi, embed_model=embed).retrieve(question)
        shares[vocabulary] = {r.node.node_id: r.node.metadata[schema.ROUTE_SCORES] for r in results}
    assert not shares[None]["legal"]["heading_words"]
    assert shares["finance"]["legal"]["heading_words"] == pytest.approx(1.0)
    assert "legal proceedings" in shares["finance"]["legal"]["vocabulary"]


def test_an_expert_vocabulary_object_is_returned_as_it_is():
    vocabulary = ExpertVocabulary.model_validate(GOOD)
    assert load_vocabulary(vocabulary) is vocabulary
