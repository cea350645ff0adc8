"""Retrievers: ranked nodes for a question.

The layer above the indexes: route objects (vector, BM25, critical keywords) behind one small
interface and fused by pure functions (``fusion``), composed by ``MultiRouteRetriever`` (HiQA's
multi-route retrieval); the document focus over its ranking; the IIER chunk-interaction graph
and its evidence chains; the typed settings of all of them (``retrievers.settings``).
"""
