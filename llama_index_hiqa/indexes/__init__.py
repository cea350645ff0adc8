"""Indexes over the nodes that are not vector stores: the inverted keyword index.

A leaf layer: its modules import only the foundation (``schema``), so transforms, retrievers
and every store backend can use them.
"""
