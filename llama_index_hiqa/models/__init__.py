"""The models the pack runs and how it calls them: the packaged MiniLM (its ONNX graph and
embedding backends), the embedding cache by content hash, the default models, and the LLM
call policy and settings.

The packaged ONNX graph of all-MiniLM-L6-v2 is written into ``all_minilm_l6_v2/`` next to
these modules when the wheel is built (a checkout builds it into the local cache instead).
"""
