"""ChainAugmentedRetriever: a retriever's top nodes and IIER evidence-chain nodes sharing one budget.

"Improving Retrieval-Augmented Generation with Chunk Interaction" (IIER), §3.3: evidence
chains found by walking the chunk interaction graph from a question's seed chunks carry the
bridge evidence a multi-hop question needs, which a single similarity ranking misses. The
first retriever (HiQA's multi-route retriever in the pack) answers single-hop questions best.

Appending the chain nodes after the first retriever's whole top-k leaves the first k nodes a
reader (or an LLM with a k-node context) sees unchanged, so the chains cannot bring the second
hop into them. `share_budget` shares the top-k budget instead: the first retriever's
best ``ceil(head_share * k)`` nodes, then the chain nodes they did not already hold until k
nodes are listed, then the rest of both lists (nothing retrieved is dropped).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, List, Optional

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_hiqa.questions import CleanQuestions
from llama_index_hiqa.retrievers.settings import ChainBudget


def share_budget(
    first: List[NodeWithScore], chain: List[NodeWithScore], budget: Optional[ChainBudget] = None
) -> List[NodeWithScore]:
    """``first``'s head, then ``chain`` nodes not yet listed up to k, then the rest of both.

    Each node appears once (its first occurrence); scores are left as each retriever gave
    them, so the order, not the score, carries the ranking.

    Args:
        first: the first retriever's results, best first.
        chain: the chain retriever's results, best first.
        budget: k and ``head_share`` (``None``: the defaults; k: ``len(first)``).

    Returns:
        The merged list.
    """
    budget = budget or ChainBudget()
    k = budget.top_k or len(first)
    n_head = math.ceil(budget.head_share * k)
    out: List[NodeWithScore] = []
    seen = set()

    def take(nodes: List[NodeWithScore], limit: int) -> None:
        for node in nodes:
            if len(out) >= limit:
                return
            if node.node.node_id not in seen:
                seen.add(node.node.node_id)
                out.append(node)

    take(first[:n_head], n_head)
    take(chain, k)
    unbounded = len(first) + len(chain)
    take(first, unbounded)
    take(chain, unbounded)
    return out


class ChainAugmentedRetriever(CleanQuestions, BaseRetriever):
    """``first``'s best nodes and the ``graph`` retriever's chain nodes in one top-k budget.

    Both run on every question (concurrently in ``aretrieve``); see `share_budget`::

        retriever = ChainAugmentedRetriever(multi_route_retriever, chunk_graph_retriever, head_share=0.2)

    Settings are [`ChainBudget`][llama_index_hiqa.retrievers.settings.ChainBudget] fields, validated here (a bad value is a pydantic
    ``ValidationError`` naming the setting).
    """

    def __init__(self, first: BaseRetriever, graph: BaseRetriever, **settings: Any) -> None:
        self.budget = ChainBudget(**settings)
        self.first, self.graph = first, graph
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return share_budget(self.first.retrieve(query_bundle), self.graph.retrieve(query_bundle), self.budget)

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        first, chain = await asyncio.gather(
            self.first.aretrieve(query_bundle), self.graph.aretrieve(query_bundle)
        )
        return share_budget(first, chain, self.budget)
