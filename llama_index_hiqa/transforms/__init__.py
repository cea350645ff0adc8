"""Transforms: what each node is embedded and matched by.

The third layer of the pack's flow, LlamaIndex ``TransformComponent``s over segment nodes: the
heading cascade (HiQA's hierarchical contextual augmentation), TextRAG's contextual chunk
headers, and the critical keywords the keyword route and the chunk graph match on.
"""
