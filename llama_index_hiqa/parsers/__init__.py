"""Parsers: ``Document``s to segment nodes.

The second layer of the pack's flow: ``LayoutMarkdownParser`` (no LLM), the HiQA Markdown
formatter ("HiQA: A Hierarchical Contextual Augmentation RAG for Multi-Documents QA", §Markdown Formatter, Algorithm 1)
and TextRAG's line-numbered segmentation each give one node per segment with its document,
position, heading path, pages and kind (text, table, image).
"""
