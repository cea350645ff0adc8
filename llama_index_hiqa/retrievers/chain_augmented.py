"""ChainAugmentedRetriever: a retriever's top-k followed by IIER evidence-chain nodes.

"Improving Retrieval-Augmented Generation with Chunk Interaction" (IIER), §3.3: evidence
chains found by walking the chunk interaction graph from a question's seed chunks carry the
bridge evidence a multi-hop question needs, which a single similarity ranking misses. The
first retriever (HiQA's multi-route retriever in the pack) answers single-hop questions best,
so its ranking comes first, untouched; the chain nodes it did not already return follow, in
traversal order.
"""

from __future__ import annotations

import asyncio
from typing import List

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle


class ChainAugmentedRetriever(BaseRetriever):
    """``first``'s nodes, then the ``graph`` retriever's nodes ``first`` did not return.

    Both run on every question (concurrently in ``aretrieve``)::

        retriever = ChainAugmentedRetriever(multi_route_retriever, chunk_graph_retriever)
    """

    def __init__(self, first: BaseRetriever, graph: BaseRetriever) -> None:
        self.first, self.graph = first, graph
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return self._merge(self.first.retrieve(query_bundle), self.graph.retrieve(query_bundle))

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        first, second = await asyncio.gather(
            self.first.aretrieve(query_bundle), self.graph.aretrieve(query_bundle)
        )
        return self._merge(first, second)

    @staticmethod
    def _merge(first: List[NodeWithScore], second: List[NodeWithScore]) -> List[NodeWithScore]:
        seen = {n.node.node_id for n in first}
        return list(first) + [n for n in second if n.node.node_id not in seen]
