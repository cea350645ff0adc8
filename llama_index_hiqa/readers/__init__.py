"""Readers: files to LlamaIndex ``Document``s.

The first layer of the pack's flow (files → readers → parsers → transforms → indexes →
retrievers → postprocessors): one ``Document`` per PDF, scanned PDF, HTML, DOCX, Markdown or
text file, with its page spans, layout facts, tables, figures and a title read from the
document itself, all written through ``schema``'s typed accessors.
"""
