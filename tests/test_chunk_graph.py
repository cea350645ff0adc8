"""ChunkInteractionGraph and ChunkGraphRetriever (IIER) on tiny corpora with known structure."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from llama_index.core.schema import QueryBundle, TextNode

from llama_index_hiqa import schema
from llama_index_hiqa.errors import GraphBuildError, LLMOutputError, UnknownNodeError
from llama_index_hiqa.retrievers.chain_scorers import (
    N_FEATURES,
    DefaultChainScorer,
    TrainedChainScorer,
)
from llama_index_hiqa.retrievers.chain_training import chain_training_examples, fit_chain_scorer
from llama_index_hiqa.retrievers.chunk_graph import (
    ChunkGraphRetriever,
    ChunkInteractionGraph,
    parse_keyword_list,
)
from llama_index_hiqa.testing import ScriptedLLM

DIM = 6


def unit(*coords):
    v = np.zeros(DIM, dtype=np.float32)
    for i, c in enumerate(coords):
        v[i] = c
    return (v / np.linalg.norm(v)).tolist()


def make_node(node_id, vec, doc="doc", pos=0, keywords=(), title=None, text=None):
    node = TextNode(text=text or f"text of {node_id}", id_=node_id, embedding=list(vec))
    schema.set_segment_facts(node, document_id=doc, document_title=title or doc, position=pos)
    node.metadata[schema.CRITICAL_KEYWORDS] = list(keywords)
    return node


def random_nodes(n, seed=0, docs=4):
    rng = np.random.default_rng(seed)
    nodes = []
    for i in range(n):
        kws = [f"k{w}" for w in rng.choice(12, size=4, replace=False)]
        nodes.append(make_node(f"n{i}", rng.normal(size=DIM), doc=f"d{i % docs}", pos=i // docs, keywords=kws))
    return nodes


def edge_set(graph):
    return {
        tuple(sorted((u, v))): (d["structural"], round(d["semantic"], 5), d["keyword"])
        for u, v, d in graph.graph.edges(data=True)
    }


# --- graph construction -------------------------------------------------------------------


def test_structural_edges_follow_positions_within_each_document_only():
    nodes = [
        make_node("a2", unit(1), doc="A", pos=2),
        make_node("a0", unit(1), doc="A", pos=0),
        make_node("a1", unit(1), doc="A", pos=1),
        make_node("b0", unit(1), doc="B", pos=0),
    ]
    g = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=0)
    assert g.edge("a0", "a1")["structural"] == 1
    assert g.edge("a1", "a2")["structural"] == 1
    assert g.edge("a0", "a2")["structural"] == 0
    assert g.edge("a2", "b0")["structural"] == 0
    assert g.edge_counts()["structural"] == 2


def test_semantic_edges_link_each_chunk_to_its_top_k_with_cosine_weight():
    nodes = [
        make_node("x", unit(1, 0), doc="1"),
        make_node("x_close", unit(1, 0.1), doc="2"),
        make_node("x_far", unit(1, 1), doc="3"),
        make_node("y", unit(0, 0, 1), doc="4"),
    ]
    g = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=1)
    expected = float(np.dot(nodes[0].embedding, nodes[1].embedding))
    assert g.edge("x", "x_close")["semantic"] == pytest.approx(expected, abs=1e-5)
    # x_far's best neighbour is x_close (cos .77 > x .71); y's best is x_far (0.0 ties broken).
    assert g.edge("x", "x_far")["semantic"] == 0
    assert g.edge("x_far", "x_close")["semantic"] > 0
    assert all(g.edge("y", other)["semantic"] <= 1e-6 or other == "x_far" for other in ("x", "x_close"))
    # min_similarity drops weak edges
    strict = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=1, min_similarity=0.9)
    assert strict.edge_counts()["semantic"] == 1


def test_blocked_top_k_equals_one_block():
    nodes = random_nodes(40)
    one = ChunkInteractionGraph.from_nodes(nodes, block_size=10_000)
    blocked = ChunkInteractionGraph.from_nodes(random_nodes(40), block_size=7)
    assert edge_set(one) == edge_set(blocked)


def test_keyword_edges_need_the_threshold_and_carry_the_intersection_size():
    nodes = [
        make_node("p", unit(1), doc="1", keywords=["alpha", "beta", "gamma", "delta"]),
        make_node("q", unit(0, 1), doc="2", keywords=["Alpha", "beta", "gamma", "zeta"]),
        make_node("r", unit(0, 0, 1), doc="3", keywords=["alpha", "beta", "omega"]),
    ]
    g = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=0, keyword_threshold=3)  # paper: more than two
    assert g.edge("p", "q")["keyword"] == 3
    assert g.edge("p", "r")["keyword"] == 0 and g.edge("q", "r")["keyword"] == 0
    loose = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=0, keyword_threshold=2)
    assert loose.edge("p", "r")["keyword"] == 2 and loose.edge("q", "r")["keyword"] == 2


def test_document_titles_and_too_common_keywords_are_not_keywords():
    nodes = [
        make_node(f"c{i}", unit(1, i), doc="Acme Annual Report", title="Acme Annual Report",
                  keywords=["Acme Annual Report", "revenue", f"only{i}", f"pair{i // 2}", f"pair{i // 2}b"])
        for i in range(6)
    ]
    g = ChunkInteractionGraph.from_nodes(
        nodes, semantic_top_k=0, keyword_threshold=2, max_keyword_fraction=0.5, min_common_count=2
    )
    assert "acmeannualreport" not in g.keywords("c0")
    assert "acmeannualreport" in g.title_keywords("c0")
    # identifier/year tokens of a filing-style title are title keywords too
    filing = make_node("f", unit(1), doc="3M_2018_10K", title="3M_2018_10K", keywords=["3M", "2018", "revenue"])
    assert ChunkInteractionGraph.from_nodes([filing]).keywords("f") == {"revenue"}
    # "revenue" is in all 6 chunks (> 50%): it links nobody, so only the designed pairs share 2.
    assert g.edge_counts()["keyword"] == 3
    assert g.edge("c0", "c1")["keyword"] == 2
    assert g.edge("c0", "c2")["keyword"] == 0
    kept = ChunkInteractionGraph.from_nodes(
        nodes, semantic_top_k=0, keyword_threshold=2, max_keyword_fraction=1.0, min_common_count=2
    )
    assert kept.edge("c0", "c2")["keyword"] == 0 and kept.edge("c0", "c1")["keyword"] == 3


def test_a_chunk_naming_another_documents_title_links_to_that_documents_chunks_only_across_documents():
    nodes = [
        # "Zorblax" is doc B's title; A's text names it (a hyperlink, in Wikipedia terms)
        make_node("A0", unit(1), doc="A", title="Quantacorp", pos=0, keywords=["Zorblax", "gadget"]),
        make_node("A1", unit(0, 1), doc="A", title="Quantacorp", pos=1, keywords=["factory"]),
        make_node("B0", unit(0, 0, 1), doc="B", title="Zorblax", pos=0, keywords=["Zorblax", "toy"]),
        make_node("B1", unit(0, 0, 0, 1), doc="B", title="Zorblax", pos=1, keywords=["Zorblax", "price"]),
        make_node("C0", unit(0, 0, 0, 0, 1), doc="C", title="Other", keywords=["toy"]),
    ]
    g = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=0, keyword_threshold=1)
    assert g.edge("A0", "B0")["keyword"] == 1 and g.edge("A0", "B1")["keyword"] == 1
    # the title never links the chunks of its own document, nor a chunk that does not name it
    assert g.edge("B0", "B1")["keyword"] == 0
    assert g.edge("A1", "B0")["keyword"] == 0
    assert g.edge("B0", "C0")["keyword"] == 1  # an ordinary shared keyword
    assert "zorblax" not in g.keywords("B0")
    paper = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=0, keyword_threshold=1, title_mentions=False)
    assert paper.edge("A0", "B0")["keyword"] == 0 and paper.edge("B0", "C0")["keyword"] == 1
    # a title named by more chunks than the "too common" limit links nobody
    common = ChunkInteractionGraph.from_nodes(
        nodes, semantic_top_k=0, keyword_threshold=1, max_keyword_fraction=0.2, min_common_count=2
    )
    assert common.edge("A0", "B0")["keyword"] == 0


def test_a_graph_saved_before_title_mentions_keeps_the_papers_rule(tmp_path):
    g = ChunkInteractionGraph.from_nodes(random_nodes(8), semantic_top_k=1)
    records = dict(g.model_dump())
    del records["title_mentions"]
    old = ChunkInteractionGraph.from_records(
        records, g.resolved_keyword_threshold, g.node_records(), g.edge_records(), g.vectors, *g.knn
    )
    assert old.title_mentions is False and g.title_mentions is True


def test_incremental_add_equals_rebuild_including_insertions_between_positions():
    full_nodes = random_nodes(30, seed=3)
    full = ChunkInteractionGraph.from_nodes(full_nodes, semantic_top_k=3, keyword_threshold=2)
    parts = random_nodes(30, seed=3)
    # add the odd positions later, so structural edges 0-2 must become 0-1, 1-2
    first = [n for n in parts if schema.get_position(n) % 2 == 0]
    later = [n for n in parts if schema.get_position(n) % 2 == 1]
    inc = ChunkInteractionGraph.from_nodes(first, semantic_top_k=3, keyword_threshold=2)
    inc.add_nodes(later[:5])
    inc.add_nodes(later[5:])
    assert edge_set(inc) == edge_set(full)


def test_incremental_add_equals_rebuild_on_near_ties_in_the_top_k():
    """Look-alike chunks give cosines equal in float32 (ties broken by row); an incremental
    build must compute each pair's cosine to the same bit as a rebuild does."""
    rng = np.random.default_rng(7)
    base = rng.normal(size=(12, 64))
    vectors = np.concatenate([base + rng.normal(scale=1e-7, size=base.shape) for _ in range(6)])
    def nodes():
        return [make_node(f"n{i:03d}", v, doc=f"d{i // 12}", pos=i % 12) for i, v in enumerate(vectors)]

    full = ChunkInteractionGraph.from_nodes(nodes(), semantic_top_k=4)
    parts = nodes()
    inc = ChunkInteractionGraph.from_nodes(parts[:40], semantic_top_k=4)
    inc.add_nodes(parts[40:])
    assert edge_set(inc) == edge_set(full)
    assert np.array_equal(inc.knn[0], full.knn[0])


def test_without_nodes_equals_a_rebuild_over_the_rest():
    nodes = random_nodes(30, seed=5)
    graph = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=3, keyword_threshold=2)
    gone = {n.node_id for n in nodes if schema.get_document_id(n) == "d1"} | {"n4"}
    rest = [n for n in random_nodes(30, seed=5) if n.node_id not in gone]
    smaller = graph.without_nodes(gone)
    assert smaller.node_ids == [n.node_id for n in rest] and len(graph) == 30  # a new graph
    assert edge_set(smaller) == edge_set(ChunkInteractionGraph.from_nodes(rest, semantic_top_k=3, keyword_threshold=2))
    assert not graph.without_nodes([n.node_id for n in nodes]).node_ids


def test_bad_input_raises_typed_errors(tmp_path):
    with pytest.raises(GraphBuildError):
        ChunkInteractionGraph.from_nodes([])
    node = make_node("a", unit(1))
    with pytest.raises(GraphBuildError, match="already"):
        ChunkInteractionGraph.from_nodes([node, make_node("a", unit(0, 1))])
    g = ChunkInteractionGraph.from_nodes([node])
    with pytest.raises(GraphBuildError, match="dimension"):
        g.add_nodes([TextNode(text="x", id_="b", embedding=[1.0, 0.0])])
    with pytest.raises(UnknownNodeError):
        g.keywords("missing")
    with pytest.raises(GraphBuildError):
        ChunkInteractionGraph.load(tmp_path / "nothing")


def test_persist_and_load_round_trip(tmp_path):
    nodes = random_nodes(20, seed=5)
    g = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=2, keyword_threshold=2)
    g.persist(tmp_path / "store")
    loaded = ChunkInteractionGraph.load(tmp_path / "store")
    assert loaded.node_ids == g.node_ids
    assert edge_set(loaded) == edge_set(g)
    assert loaded.semantic_top_k == 2 and loaded.keyword_threshold == 2
    np.testing.assert_allclose(loaded.vectors, g.vectors)
    assert loaded.keywords("n3") == g.keywords("n3")
    # a loaded graph keeps growing exactly like the original
    extra = random_nodes(25, seed=5)[20:]
    for n in extra:
        n.id_ = "x" + n.node_id
    g.add_nodes(extra)
    loaded.add_nodes([n.model_copy() for n in extra])
    assert edge_set(loaded) == edge_set(g)


# --- seeds and chains ---------------------------------------------------------------------


def two_hop_corpus():
    """Question ~ e0. A (bridge) names the product; B (answer) is reachable from A only via
    three shared keywords; four distractors sit closest to the question in vector space."""
    nodes = [
        make_node("A", unit(1, 1), doc="A", keywords=["zorblax", "quantacorp", "gadget", "factory"]),
        make_node("B", unit(0.4, 0.917), doc="B", keywords=["quantacorp", "gadget", "factory", "ada lovelace"]),
    ]
    for i in range(4):
        nodes.append(make_node(f"D{i}", unit(0.9, 0, 0, 0.1 * (i + 1), 0.3), doc=f"D{i}", keywords=[f"noise{i}"]))
    return nodes


Q_VEC = unit(1)


def test_two_hop_answer_is_found_through_the_keyword_edge_where_vector_top_k_misses_it():
    nodes = two_hop_corpus()
    graph = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=2, min_similarity=0.95)
    sims = graph.vectors @ np.asarray(Q_VEC)
    vector_top3 = {graph.node_ids[i] for i in np.argsort(-sims)[:3]}
    assert "B" not in vector_top3
    assert graph.edge("A", "B") == {"structural": 0, "semantic": 0, "keyword": 3}

    retriever = ChunkGraphRetriever(graph, nodes=nodes, keyword_fn=lambda q: ["Zorblax"], max_nodes=3)
    out = retriever.retrieve(QueryBundle("Who founded the maker of Zorblax?", embedding=Q_VEC))
    ids = [n.node.node_id for n in out]
    assert "B" in ids and len(ids) == 3
    a, b = ids.index("A"), ids.index("B")
    assert b == a + 1  # traversal order inside the chain
    assert out[a].node.metadata[schema.CHAIN_ID] == out[b].node.metadata[schema.CHAIN_ID]
    assert (out[a].node.metadata[schema.CHAIN_HOP], out[b].node.metadata[schema.CHAIN_HOP]) == (0, 1)

    # control: without keyword edges the chain cannot reach B
    no_kw = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=2, min_similarity=0.95, keyword_threshold=99)
    control = ChunkGraphRetriever(no_kw, nodes=nodes, keyword_fn=lambda q: ["zorblax"], max_nodes=3)
    assert "B" not in [n.node.node_id for n in control.retrieve(QueryBundle("q", embedding=Q_VEC))]


def test_scores_fall_down_the_chain_order_so_sorting_by_score_keeps_it():
    """A postprocessor that sorts or cuts by score keeps the traversal order; the walk's own
    scores (which rise from a seed's cosine to a hop's scorer value) stay in CHAIN_SCORE."""
    from llama_index.core.postprocessor import SimilarityPostprocessor

    nodes = two_hop_corpus()
    graph = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=2, min_similarity=0.95)
    retriever = ChunkGraphRetriever(graph, nodes=nodes, keyword_fn=lambda q: ["zorblax"], max_nodes=4)
    query = QueryBundle("Who founded the maker of Zorblax?", embedding=Q_VEC)
    out = retriever.retrieve(query)
    ids = [n.node.node_id for n in out]
    assert ids[:2] == ["A", "B"]
    assert [n.score for n in out] == [1.0, 0.5, 1 / 3, 0.25]
    assert [n.node.node_id for n in sorted(out, key=lambda n: -n.score)] == ids
    kept = SimilarityPostprocessor(similarity_cutoff=0.3).postprocess_nodes(out, query_bundle=query)
    assert [n.node.node_id for n in kept] == ids[:3]
    walk = [n.node.metadata[schema.CHAIN_SCORE] for n in out]
    assert walk[0] == pytest.approx(float(graph.vectors[0] @ np.asarray(Q_VEC)), abs=1e-6)  # A's cosine
    assert walk[1] > walk[0]  # the hop's scorer value: sorting by it would put B before A
    assert schema.CHAIN_SCORE in out[0].node.excluded_llm_metadata_keys
    merged = ChunkGraphRetriever(graph, nodes=nodes, keyword_fn=lambda q: ["zorblax"], max_nodes=4, merge_chains=True)
    merged_out = merged.retrieve(query)
    assert [n.score for n in merged_out] == [1 / (r + 1) for r in range(len(merged_out))]
    assert merged_out[0].node.metadata[schema.CHAIN_SCORE] == max(walk[:2])


def test_greedy_seed_cover_prefers_coverage_then_similarity():
    nodes = [
        make_node("both", unit(0, 1), doc="1", keywords=["paris", "london"]),
        make_node("paris_close", unit(1, 0.2), doc="2", keywords=["paris"]),
        make_node("rome_far", unit(0, 0, 1), doc="3", keywords=["rome"]),
        make_node("rome_close", unit(1, 0, 0.5), doc="4", keywords=["rome"]),
        make_node("other", unit(1), doc="5", keywords=["berlin"]),
    ]
    g = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=0)
    r = ChunkGraphRetriever(g, nodes=nodes, vector_seeds=0)
    seeds = [g.node_ids[i] for i in r.select_seeds(np.asarray(Q_VEC), {"paris", "london", "rome", "tokyo"})]
    assert seeds == ["both", "rome_close"]
    # no matching keyword: the top vector hit seeds
    assert [g.node_ids[i] for i in r.select_seeds(np.asarray(Q_VEC), {"tokyo"})] == ["other"]
    # seed matching may use document titles (kept out of the edges only)
    titled = [make_node("t", unit(0, 1), doc="Tokyo", title="Tokyo", keywords=["tokyo", "x"]), *nodes]
    g2 = ChunkInteractionGraph.from_nodes(titled, semantic_top_k=0)
    assert "tokyo" not in g2.keywords("t")
    r2 = ChunkGraphRetriever(g2, nodes=titled, vector_seeds=0)
    assert [g2.node_ids[i] for i in r2.select_seeds(np.asarray(Q_VEC), {"tokyo"})] == ["t"]


def test_chain_stops_below_threshold_and_respects_hops_budget_and_dedup():
    # a line graph of one document: n0 - n1 - ... - n7, all similar to the question
    nodes = [make_node(f"n{i}", unit(1, 0.1 * i), doc="L", pos=i) for i in range(8)]
    g = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=0)
    r = ChunkGraphRetriever(g, nodes=nodes, keyword_fn=lambda q: [], max_hops=2, max_nodes=10, fill_budget=False)
    ids = [n.node.node_id for n in r.retrieve(QueryBundle("q", embedding=Q_VEC))]
    assert ids == ["n0", "n1", "n2"]  # seed + 2 hops
    stopped = ChunkGraphRetriever(g, nodes=nodes, keyword_fn=lambda q: [], fill_budget=False,
                                  scorer=DefaultChainScorer(threshold=5.0))
    assert [n.node.node_id for n in stopped.retrieve(QueryBundle("q", embedding=Q_VEC))] == ["n0"]
    filled = ChunkGraphRetriever(g, nodes=nodes, keyword_fn=lambda q: [], scorer=DefaultChainScorer(threshold=5.0),
                                 max_nodes=3)
    out = filled.retrieve(QueryBundle("q", embedding=Q_VEC))
    assert [n.node.node_id for n in out] == ["n0", "n1", "n2"]  # budget filled with vector hits
    assert len({n.node.metadata[schema.CHAIN_ID] for n in out}) == 3
    budget = ChunkGraphRetriever(g, nodes=nodes, keyword_fn=lambda q: [], max_nodes=4)
    got = [n.node.node_id for n in budget.retrieve(QueryBundle("q", embedding=Q_VEC))]
    assert len(got) == 4 and len(set(got)) == 4


def test_budget_is_filled_hop_by_hop_across_chains():
    nodes = two_hop_corpus()
    graph = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=2, min_similarity=0.95)
    r = ChunkGraphRetriever(graph, nodes=nodes, keyword_fn=lambda q: ["zorblax"], max_nodes=2)
    out = r.retrieve(QueryBundle("q", embedding=Q_VEC))
    # two seeds (keyword seed A, vector seed D*) beat A's first hop B for a budget of 2
    assert [n.node.metadata[schema.CHAIN_HOP] for n in out] == [0, 0]


def test_merge_chains_returns_one_node_per_chain_without_touching_sources():
    nodes = two_hop_corpus()
    graph = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=2, min_similarity=0.95)
    r = ChunkGraphRetriever(graph, nodes=nodes, keyword_fn=lambda q: ["zorblax"], max_nodes=3,
                            merge_chains=True, fill_budget=False)
    out = r.retrieve(QueryBundle("q", embedding=Q_VEC))
    first = out[0].node
    assert first.metadata[schema.SEGMENT_NODE_IDS] == ["A", "B"]
    assert first.get_content() == "text of A\n\ntext of B"
    assert schema.CHAIN_ID not in nodes[0].metadata  # docstore nodes are not modified


def test_unknown_docstore_node_is_a_typed_error():
    nodes = two_hop_corpus()
    graph = ChunkInteractionGraph.from_nodes(nodes)
    r = ChunkGraphRetriever(graph, nodes=nodes[:1], keyword_fn=lambda q: ["zorblax"])
    with pytest.raises(UnknownNodeError, match="docstore"):
        r.retrieve(QueryBundle("q", embedding=Q_VEC))


# --- question keywords -----------------------------------------------------------------------


def test_llm_keywords_use_prompt_a1_and_fall_back_on_malformed_or_failing_answers():
    nodes = two_hop_corpus()
    graph = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=2, min_similarity=0.95)
    fallback_calls = []

    def fallback(q):
        fallback_calls.append(q)
        return ["zorblax"]

    good = ScriptedLLM(responses=["['Zorblax', 'Quantacorp']"])
    r = ChunkGraphRetriever(graph, nodes=nodes, llm=good, keyword_fn=fallback)
    assert r.question_keywords("Who founded the maker of Zorblax?") == {"zorblax", "quantacorp"}
    assert "Please select all the topics and keywords" in good.prompts[0]
    assert not fallback_calls

    bad = ScriptedLLM(responses=["I cannot help with that request because " + "x" * 200, TimeoutError("slow")])
    r = ChunkGraphRetriever(graph, nodes=nodes, llm=bad, keyword_fn=fallback, max_nodes=3)
    assert r.question_keywords("q1") == {"zorblax"}
    out = r.retrieve(QueryBundle("q2", embedding=Q_VEC))  # LLM raises: still answers
    assert "B" in [n.node.node_id for n in out]
    assert fallback_calls == ["q1", "q2"]


def test_parse_keyword_list_accepts_python_json_and_plain_lists():
    assert parse_keyword_list("['a', 'b c']") == ["a", "b c"]
    assert parse_keyword_list('Answer: ["x", "y"]') == ["x", "y"]
    assert parse_keyword_list("Philipsburg, Malakoff") == ["Philipsburg", "Malakoff"]
    assert parse_keyword_list("Keywords: [Philipsburg, Malakoff]") == ["Philipsburg", "Malakoff"]
    with pytest.raises(LLMOutputError):
        parse_keyword_list("", strict=True)
    with pytest.raises(LLMOutputError, match="keyword list"):
        parse_keyword_list("word, " * 60, strict=True)  # prose, not a list
    # lenient (the extractor at ingestion): the same answers give no keywords, never an error
    assert parse_keyword_list("") == []
    assert parse_keyword_list("a sentence " * 20) == []


async def test_async_retrieve_matches_sync_and_embeds_without_a_given_vector():
    from llama_index.core.embeddings import MockEmbedding

    class AxisEmbedding(MockEmbedding):
        def _get_query_embedding(self, query):
            return Q_VEC

        async def _aget_query_embedding(self, query):
            return Q_VEC

    nodes = two_hop_corpus()
    graph = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=2, min_similarity=0.95)
    r = ChunkGraphRetriever(graph, nodes=nodes, embed_model=AxisEmbedding(embed_dim=DIM),
                            keyword_fn=lambda q: ["zorblax"], max_nodes=3)
    sync_ids = [n.node.node_id for n in r.retrieve("Who founded the maker of Zorblax?")]
    async_ids = [n.node.node_id for n in await r.aretrieve("Who founded the maker of Zorblax?")]
    assert sync_ids == async_ids and "B" in sync_ids


# --- scorers --------------------------------------------------------------------------------


def test_trained_scorer_learns_a_synthetic_rule_and_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(3000, N_FEATURES)).astype(np.float32)
    x[:, 3] = rng.integers(0, 2, size=3000)
    # positive: close to the question AND (structural neighbour OR keyword overlap) - not linear
    y = ((x[:, 0] > 0.6) & ((x[:, 3] == 1) | (x[:, 5] > 0.7))).astype(float)
    scorer = TrainedChainScorer(epochs=600).fit(x[:2000], y[:2000])
    accuracy = ((scorer.score(x[2000:]) > 0.5) == (y[2000:] > 0.5)).mean()
    assert accuracy > 0.9
    path = tmp_path / "scorer.json"
    scorer.save(path)
    np.testing.assert_allclose(TrainedChainScorer.load(path).score(x[:50]), scorer.score(x[:50]), rtol=1e-6)
    with pytest.raises(RuntimeError):
        TrainedChainScorer().score(x[:2])
    with pytest.raises(ValueError):
        TrainedChainScorer().fit(x[:10], np.zeros(10))


def test_fit_uses_shortest_path_labels_and_the_fitted_scorer_walks_to_the_evidence():
    # Many copies of the two-hop pattern: bridge Ai -> answer Bi through a keyword edge, and a
    # decoy Ci that is closer to the question, linked to Ai by a semantic edge.
    nodes, questions, golds = [], [], []
    rng = np.random.default_rng(1)
    for i in range(12):
        axis = np.zeros(DIM)
        axis[i % DIM] = 1
        other = np.zeros(DIM)
        other[(i + 1) % DIM] = 1
        kws = [f"e{i}", f"f{i}", f"g{i}"]
        nodes.append(make_node(f"A{i}", axis + 0.3 * other, doc=f"A{i}", keywords=[f"topic{i}", *kws]))
        nodes.append(make_node(f"B{i}", other + 0.05 * rng.normal(size=DIM), doc=f"B{i}", keywords=[*kws, "answer"]))
        nodes.append(make_node(f"C{i}", axis + 0.25 * other + 0.02 * rng.normal(size=DIM), doc=f"C{i}", keywords=[f"c{i}"]))
        questions.append(f"question {i} topic{i}")
        golds.append([f"A{i}", f"B{i}"])
    graph = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=1, keyword_threshold=3)
    axes = {f"question {i} topic{i}": np.eye(DIM)[i % DIM].tolist() for i in range(12)}

    class DictEmbedding:
        def get_query_embedding(self, q):
            return axes[q]

    r = ChunkGraphRetriever(graph, nodes=nodes, embed_model=DictEmbedding(),
                            keyword_fn=lambda q: [q.split()[-1]], max_nodes=2, vector_seeds=0, fill_budget=False)
    x, y = chain_training_examples(r, questions[:8], golds[:8])
    assert x.shape[1] == N_FEATURES and 0 < y.sum() < len(y)
    default_hits = sum("B%d" % i in [n.node.node_id for n in r.retrieve(questions[i])] for i in range(8, 12))
    fit_chain_scorer(r, questions[:8], golds[:8])
    assert isinstance(r.scorer, TrainedChainScorer)
    trained_hits = sum("B%d" % i in [n.node.node_id for n in r.retrieve(questions[i])] for i in range(8, 12))
    assert trained_hits == 4 and trained_hits > default_hits


@pytest.mark.slow
def test_from_nodes_with_the_offline_models_drops_into_a_query_engine():
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.response_synthesizers import get_response_synthesizer

    texts = [
        ("Journal of Psychotherapy Integration", "The Journal of Psychotherapy Integration is published by the American Psychological Association."),
        ("American Psychological Association", "G. Stanley Hall was the first president of the American Psychological Association, founded in 1892."),
        ("Paris", "Paris is the capital of France and hosts the Louvre museum."),
        ("Berlin", "Berlin is the capital of Germany."),
    ]
    nodes = []
    for i, (title, text) in enumerate(texts):
        node = TextNode(text=text, id_=f"p{i}")
        schema.set_segment_facts(node, document_id=f"p{i}", document_title=title, position=0)
        nodes.append(node)
    retriever = ChunkGraphRetriever.from_nodes(nodes, max_nodes=2, graph_settings={"keyword_threshold": 1})
    assert all(schema.CRITICAL_KEYWORDS in n.metadata for n in nodes)
    engine = RetrieverQueryEngine(retriever, response_synthesizer=get_response_synthesizer(llm=ScriptedLLM(default_response="Hall")))
    response = engine.query("Who was the first president of the publisher of the Journal of Psychotherapy Integration?")
    got = [n.node.node_id for n in response.source_nodes]
    assert set(got) == {"p0", "p1"}
    assert str(response) == "Hall"


def test_from_index_reuses_the_vector_store_embeddings_and_docstore():
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding

    nodes = two_hop_corpus()
    index = VectorStoreIndex(nodes, embed_model=MockEmbedding(embed_dim=DIM))
    retriever = ChunkGraphRetriever.from_index(index, graph_settings={"semantic_top_k": 2, "min_similarity": 0.95},
                                               keyword_fn=lambda q: ["zorblax"], max_nodes=3)
    np.testing.assert_allclose(retriever.graph.vectors[0], np.asarray(nodes[0].embedding), atol=1e-6)
    assert retriever.graph.edge("A", "B")["keyword"] == 3
    ids = [n.node.node_id for n in retriever.retrieve(QueryBundle("q", embedding=Q_VEC))]
    assert "B" in ids


def test_auto_keyword_threshold_reads_the_collections_shared_keyword_counts():
    from llama_index_hiqa.retrievers.graph_edges import resolve_keyword_threshold

    # 10 chunks; 40 pairs share one keyword, 4 pairs share two, 1 pair shares three.
    counts = np.array([1] * 40 + [2] * 4 + [3])
    assert resolve_keyword_threshold("auto", counts, 10, max_degree=20.0) == 1  # 9 edges per chunk
    assert resolve_keyword_threshold("auto", counts, 10, max_degree=2.0) == 2  # 1 edge per chunk
    assert resolve_keyword_threshold("auto", counts, 10, max_degree=0.1) == 4  # none fits: no edges
    assert resolve_keyword_threshold(3, counts, 10, max_degree=20.0) == 3  # a number is kept
    assert resolve_keyword_threshold("auto", np.array([], int), 10, max_degree=20.0) == 1


def test_auto_threshold_is_resolved_on_build_and_kept_by_persist(tmp_path):
    nodes = [make_node(f"n{i}", unit(1, i), doc=f"doc{i}", keywords=[f"k{i}", f"k{i + 1}", "shared"]) for i in range(6)]
    # 15 pairs share "shared" (5 edges per chunk at T = 1), 5 consecutive pairs share two.
    graph = ChunkInteractionGraph.from_nodes(nodes, semantic_top_k=0, max_keyword_degree=2.0, min_common_count=10)
    assert graph.keyword_threshold == "auto" and graph.resolved_keyword_threshold == 2
    assert graph.edge_counts()["keyword"] == 5  # consecutive chunks share k{i+1} and "shared"
    graph.persist(tmp_path / "g")
    assert ChunkInteractionGraph.load(tmp_path / "g").resolved_keyword_threshold == 2


def test_chain_augmented_retriever_keeps_first_ranking_then_appends_new_chain_nodes():
    import asyncio

    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.schema import NodeWithScore, TextNode

    from llama_index_hiqa import ChainAugmentedRetriever

    def fixed(ids):
        class Fixed(BaseRetriever):
            def _retrieve(self, query_bundle):
                return [NodeWithScore(node=TextNode(text=i, id_=i), score=1.0) for i in ids]

        return Fixed()

    retriever = ChainAugmentedRetriever(fixed(["a", "b", "c"]), fixed(["c", "d", "a", "e"]), head_share=1.0)
    assert [n.node.node_id for n in retriever.retrieve("q")] == ["a", "b", "c", "d", "e"]
    assert [n.node.node_id for n in asyncio.run(retriever.aretrieve("q"))] == ["a", "b", "c", "d", "e"]


def test_from_defaults_builds_from_index_nodes_or_docstore():
    """LlamaIndex's from_defaults shape: exactly one of index, nodes, docstore; similarity_top_k
    is the chains' budget."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.storage.docstore import SimpleDocumentStore

    from llama_index_hiqa.errors import InvalidSettingError

    settings = dict(graph_settings={"semantic_top_k": 2, "min_similarity": 0.95}, keyword_fn=lambda q: ["zorblax"])
    query = QueryBundle("q", embedding=Q_VEC)
    by_nodes = ChunkGraphRetriever.from_nodes(two_hop_corpus(), max_nodes=3, **settings)
    expected = [n.node.node_id for n in by_nodes.retrieve(query)]
    index = VectorStoreIndex(two_hop_corpus(), embed_model=MockEmbedding(embed_dim=DIM))
    docstore = SimpleDocumentStore()
    docstore.add_documents(two_hop_corpus())
    for source in ({"nodes": two_hop_corpus()}, {"index": index}, {"docstore": docstore}):
        retriever = ChunkGraphRetriever.from_defaults(**source, similarity_top_k=3, **settings)
        assert retriever.settings.max_nodes == 3
        assert [n.node.node_id for n in retriever.retrieve(query)] == expected, source
    assert ChunkGraphRetriever.from_defaults(docstore=docstore, **settings).docstore is docstore
    with pytest.raises(InvalidSettingError, match="exactly one"):
        ChunkGraphRetriever.from_defaults(nodes=two_hop_corpus(), docstore=docstore)
    with pytest.raises(GraphBuildError):
        ChunkGraphRetriever.from_defaults(docstore=SimpleDocumentStore())
