"""Postprocessors: the retrieved nodes as the context an answer reads.

The last layer of the pack's flow: TextRAG's relevant segment extraction merges retrieved
chunks into contiguous segments (``SegmentIntegrationPostprocessor``), for any LlamaIndex
response synthesizer, query engine or chat engine.
"""
