"""ChainAugmentedRetriever: how the first ranking and the chain nodes share the top-k budget."""

import asyncio

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index_hiqa.errors import InvalidSettingError
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_hiqa import ChainAugmentedRetriever, HiQAPackSettings
from llama_index_hiqa import ChainBudget
from llama_index_hiqa.retrievers.chain_augmented import share_budget


class Fixed(BaseRetriever):
    """Returns the same ids every time; counts its calls (sync and async separately)."""

    def __init__(self, ids):
        self.ids, self.calls, self.acalls = ids, 0, 0
        super().__init__()

    def _nodes(self):
        return [NodeWithScore(node=TextNode(text=i, id_=i), score=1.0 / (r + 1)) for r, i in enumerate(self.ids)]

    def _retrieve(self, query_bundle):
        self.calls += 1
        return self._nodes()

    async def _aretrieve(self, query_bundle):
        self.acalls += 1
        return self._nodes()


def ids(nodes):
    return [n.node.node_id for n in nodes]


FIRST = ["a", "b", "c", "d", "e"]
CHAIN = ["c", "x", "y", "a", "z", "w"]


@pytest.mark.parametrize(
    "head_share, expected",
    [
        # ceil(0.4 * 5) = 2 first nodes, then chain nodes not listed (c, x, y), then the rest
        (0.4, ["a", "b", "c", "x", "y", "d", "e", "z", "w"]),
        (0.0, ["c", "x", "y", "a", "z", "b", "d", "e", "w"]),
        (1.0, ["a", "b", "c", "d", "e", "x", "y", "z", "w"]),
        (0.5, ["a", "b", "c", "x", "y", "d", "e", "z", "w"]),  # ceil(2.5) = 3: a, b, c; then x, y
    ],
)
def test_head_then_chain_nodes_fill_the_top_k_then_the_rest_of_both(head_share, expected):
    retriever = ChainAugmentedRetriever(Fixed(FIRST), Fixed(CHAIN), head_share=head_share)
    got = ids(retriever.retrieve("q"))
    assert got == expected
    assert len(got) == len(set(FIRST) | set(CHAIN))  # nothing retrieved is dropped, none twice


def test_async_retrieve_gives_the_same_order_and_calls_both_async():
    first, chain = Fixed(FIRST), Fixed(CHAIN)
    retriever = ChainAugmentedRetriever(first, chain, head_share=0.4)
    got = ids(asyncio.run(retriever.aretrieve("q")))
    assert got == ["a", "b", "c", "x", "y", "d", "e", "z", "w"]
    assert (first.acalls, chain.acalls, first.calls, chain.calls) == (1, 1, 0, 0)


def test_top_k_sets_the_budget_instead_of_the_first_list_length():
    retriever = ChainAugmentedRetriever(Fixed(FIRST), Fixed(CHAIN), head_share=0.5, top_k=4)
    # ceil(0.5 * 4) = 2 head nodes, 2 chain nodes (c, x) complete the 4
    assert ids(retriever.retrieve("q"))[:4] == ["a", "b", "c", "x"]


def test_short_chain_leaves_the_budget_to_the_first_ranking():
    got = share_budget(Fixed(FIRST)._nodes(), Fixed(["b"])._nodes(), ChainBudget(head_share=0.2))
    assert ids(got) == ["a", "b", "c", "d", "e"]


def test_chain_copy_of_a_node_is_kept_when_the_chain_lists_it_first():
    chain = Fixed(["x", "d"])._nodes()
    chain[1].node.metadata["chain_id"] = 0
    got = share_budget(Fixed(FIRST)._nodes(), chain, ChainBudget(head_share=0.2))
    assert ids(got)[:3] == ["a", "x", "d"] and got[2].node.metadata == {"chain_id": 0}


@pytest.mark.parametrize("settings, name", [({"head_share": 1.5}, "head_share"), ({"head_share": -0.1}, "head_share"),
                                            ({"top_k": 0}, "top_k"), ({"head_shares": 0.5}, "head_shares")])
def test_bad_settings_fail_at_construction_naming_the_setting(settings, name):
    with pytest.raises(InvalidSettingError, match=name):
        ChainAugmentedRetriever(Fixed(FIRST), Fixed(CHAIN), **settings)


def test_pack_config_accepts_the_budget_setting_and_names_a_bad_one():
    assert HiQAPackSettings(chunk_graph={"head_share": 0.6}).chunk_graph.budget.head_share == 0.6
    with pytest.raises(ValueError, match="head_share"):
        HiQAPackSettings(chunk_graph={"head_share": 2})


def test_pack_config_sends_each_flat_chunk_graph_key_to_its_receiver():
    config = HiQAPackSettings(chunk_graph={"keyword_threshold": 2, "max_nodes": 7, "head_share": 0.3})
    parts = config.chunk_graph
    assert (parts.graph.keyword_threshold, parts.search.max_nodes, parts.budget.head_share) == (2, 7, 0.3)
    assert parts == HiQAPackSettings(
        chunk_graph={"graph": {"keyword_threshold": 2}, "search": {"max_nodes": 7}, "budget": {"head_share": 0.3}}
    ).chunk_graph


def test_pack_sends_graph_search_and_budget_settings_where_they_act():
    from llama_index_hiqa.demo import load_demo_documents
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack
    from tests.pack_helpers import HashEmbedding

    pack = HiQAPack.from_documents(
        load_demo_documents()[:3], embed_model=HashEmbedding(), use_chunk_graph=True,
        keywords={"use_ner": False}, chunk_graph={"keyword_threshold": 7, "max_nodes": 3, "head_share": 0.2},
    )
    retriever = pack.as_retriever()
    assert pack.graph.graph.keyword_threshold == 7 and pack.graph.graph.resolved_keyword_threshold == 7
    assert pack.graph.settings.max_nodes == 3
    assert isinstance(retriever, ChainAugmentedRetriever) and retriever.budget.head_share == 0.2
    first = pack.multi_route.retrieve("What is the maximum output current of the NX-2040?")
    got = retriever.retrieve("What is the maximum output current of the NX-2040?")
    assert ids(got)[0] == ids(first)[0]  # a head share above 0 keeps the first ranking's best node first


def test_node_text_ner_is_on_with_the_chunk_graph_unless_the_user_sets_it():
    from llama_index_hiqa.pack.config import keyword_extractor

    assert keyword_extractor(HiQAPackSettings()).ner_max_nodes == 0
    assert keyword_extractor(HiQAPackSettings(use_chunk_graph=True)).ner_max_nodes is None
    assert keyword_extractor(HiQAPackSettings(use_chunk_graph=True, keywords={"ner_max_nodes": 0})).ner_max_nodes == 0


def _bridge_corpus():
    """Two-hop, Wikipedia style: the question names the Zorblax; its page names its maker,
    Quantacorp, whose page (titled by that name, as Wikipedia titles pages) holds the answer.
    Six distractor pages are closer to the question's words than the answer page is."""
    from llama_index_hiqa.evaluation.corpus import document

    docs = [
        document("The Zorblax is a pocket gadget. It is made by Quantacorp in a plant by the river.", "z", "Zorblax"),
        document("Quantacorp is a maker of many things; its founder was Ada Lovelace.", "q", "Quantacorp"),
    ]
    docs += [
        document(f"The maker of gadget {i} is in Paris.", f"d{i}", f"Gadget {i}")
        for i in range(6)
    ]
    return docs


def test_a_two_hop_question_gets_both_pages_in_the_first_k_through_the_title_mention_on_the_product_path():
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack
    from tests.pack_helpers import HashEmbedding

    question = "Who was the founder of the maker of the Zorblax?"
    settings = dict(embed_model=HashEmbedding(), use_chunk_graph=True, similarity_top_k=3,
                    keywords={"use_ner": False, "expert_keywords": ["Zorblax", "Quantacorp"]})
    pack = HiQAPack.from_documents(_bridge_corpus(), **settings)
    vector_top = {schema_doc(n) for n in pack.index.as_retriever(similarity_top_k=3).retrieve(question)}
    assert "q" not in vector_top  # the answer page is not among the question's nearest pages
    got = [schema_doc(n) for n in pack.as_retriever().retrieve(question)[:3]]
    assert {"z", "q"} <= set(got)
    assert _link(pack) == 1  # the Zorblax page names Quantacorp's title
    paper = HiQAPack.from_documents(_bridge_corpus(), chunk_graph={"title_mentions": False}, **settings)
    assert "q" not in [schema_doc(n) for n in paper.as_retriever().retrieve(question)[:3]]
    assert _link(paper) == 0  # IIER's keyword edges alone: no link between the two pages


def _link(pack):
    from llama_index_hiqa import schema

    of = {schema.get_document_id(n): n.node_id for n in pack.nodes}
    return pack.graph.graph.edge(of["z"], of["q"])["keyword"]


def schema_doc(node_with_score):
    from llama_index_hiqa import schema

    return schema.get_document_id(node_with_score.node)
