"""Evidence chains as retrieval results: the budget shared hop by hop, nodes tagged by chain.

IIER ("Leveraging Inter-Chunk Interactions for Enhanced Retrieval in Large Language
Model-Based Question Answering" (IIER, Guo et al.) §3.2) returns the chains in traversal
order so the LLM reads the reasoning path. [`chain_results`][llama_index_hiqa.retrievers.chain_output.chain_results] fills the node budget hop by
hop across chains (every seed first, then every chain's first hop, ...) so one long chain
cannot crowd out the other seeds, then lists the nodes chain by chain, each a copy tagged
with ``schema.CHAIN_ID`` / ``schema.CHAIN_HOP`` (or the chain merged into one node).

The returned score is the rank's, ``1 / (rank + 1)``: it falls down the list, so a
postprocessor that sorts or cuts by score (``SimilarityPostprocessor``, a reranker's fallback)
keeps the chain order. The walk's own scores (a seed's cosine, then the chain scorer's value of
each hop) do not fall along a chain and are not comparable between seeds and hops; each node
keeps its own in ``schema.CHAIN_SCORE``.
"""

from __future__ import annotations

from typing import Callable, List, Set, Tuple

from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, TextNode

from llama_index_hiqa import schema

Chain = List[Tuple[int, float]]


def budgeted(chains: List[Chain], budget: int) -> List[List[Tuple[int, int, float]]]:
    """The chains cut to ``budget`` nodes in all, filled hop by hop across chains; a node
    already taken by an earlier chain is left out.

    Args:
        chains: ``[(graph row, score), ...]`` per chain, seed first.
        budget: the most nodes in all.

    Returns:
        Per chain, the kept ``(row, hop, score)``.
    """
    chosen: Set[Tuple[int, int]] = set()
    seen: Set[int] = set()
    longest = max((len(c) for c in chains), default=0)
    for hop in range(longest):
        for c, chain in enumerate(chains):
            if len(seen) >= budget:
                break
            if hop < len(chain) and chain[hop][0] not in seen:
                seen.add(chain[hop][0])
                chosen.add((c, hop))
    return [
        [(idx, hop, score) for hop, (idx, score) in enumerate(chain) if (c, hop) in chosen]
        for c, chain in enumerate(chains)
    ]


def chain_results(
    chains: List[Chain], budget: int, node_at: Callable[[int], BaseNode], merge: bool = False
) -> List[NodeWithScore]:
    """The chains' nodes as results (see the module docstring).

    Args:
        chains: ``[(graph row, score), ...]`` per chain, seed first.
        budget: the most nodes in all.
        node_at: the node of a graph row (from the docstore).
        merge: one merged node per chain instead of its nodes.

    Returns:
        The results, chain by chain in traversal order, scored by rank ([`rank_score`][llama_index_hiqa.retrievers.chain_output.rank_score]).
    """
    results: List[NodeWithScore] = []
    for c, chain in enumerate(budgeted(chains, budget)):
        if not chain:
            continue
        members = []
        for idx, hop, score in chain:
            source = node_at(idx)
            # A shallow copy with its own metadata and exclusion lists: the docstore's node
            # is left untouched, and the embedding is not copied.
            node = source.model_copy(
                update={
                    "metadata": dict(source.metadata),
                    "excluded_embed_metadata_keys": list(source.excluded_embed_metadata_keys),
                    "excluded_llm_metadata_keys": list(source.excluded_llm_metadata_keys),
                }
            )
            node.metadata[schema.CHAIN_ID] = c
            node.metadata[schema.CHAIN_HOP] = hop
            node.metadata[schema.CHAIN_SCORE] = score
            schema.hide_from_views(node, (schema.CHAIN_ID, schema.CHAIN_HOP, schema.CHAIN_SCORE))
            members.append(NodeWithScore(node=node, score=score))
        if merge:
            results.append(merge_chain(c, members))
        else:
            results.extend(members)
    for rank, result in enumerate(results):
        result.score = rank_score(rank)
    return results


def rank_score(rank: int) -> float:
    """The score of the ``rank``-th result (0 first): ``1 / (rank + 1)``, falling with rank.

    Args:
        rank: the place in the results.

    Returns:
        The score.
    """
    return 1.0 / (rank + 1)


def merge_chain(chain_id: int, members: List[NodeWithScore]) -> NodeWithScore:
    """One node holding a chain's texts in traversal order (a new node: sources untouched).

    Args:
        chain_id: the chain's number.
        members: the chain's results.

    Returns:
        The merged node, scored by the chain's best walk score (also its ``CHAIN_SCORE``).
    """
    first = members[0].node
    best = max(m.score or 0.0 for m in members)
    text = "\n\n".join(m.node.get_content(MetadataMode.NONE) for m in members)
    node = TextNode(
        text=text,
        metadata={
            schema.CHAIN_ID: chain_id,
            schema.CHAIN_SCORE: best,
            schema.SEGMENT_NODE_IDS: [m.node.node_id for m in members],
            schema.DOCUMENT_ID: schema.get_document_id(first),
        },
    )
    schema.hide_from_views(node, (schema.CHAIN_ID, schema.CHAIN_SCORE, schema.SEGMENT_NODE_IDS, schema.DOCUMENT_ID))
    return NodeWithScore(node=node, score=best)
