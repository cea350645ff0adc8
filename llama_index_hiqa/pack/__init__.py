"""The pack: [`HiQAPack`][llama_index_hiqa.HiQAPack], the default path from a folder of files to
cited answers.

One module per responsibility: ``hiqa_pack`` (the pack: its constructors, ingestion, answers
and persistence, every read and write through its store backend), ``ingestion`` (the report,
batches and upsert plan of documents going through the pipeline), ``answers`` (the no-LLM query
and chat engines, citations), ``config`` (the pack's settings, which the store backends also read), ``arguments``
(constructor arguments checked before any work), ``store_sync`` (a folder kept in step with a
store) and ``workers`` (ingestion in worker processes).

Import the pack from the package root (``from llama_index_hiqa import HiQAPack``); this
``__init__`` imports nothing, so that the store backends can read ``pack.config`` without
loading the pack above them.
"""
