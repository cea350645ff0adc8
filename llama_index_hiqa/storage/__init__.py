"""Where a pack's indexes live: crash-safe snapshot folders and a float32 vector store."""

from llama_index_hiqa.storage.vector_store import MatrixVectorStore

__all__ = ["MatrixVectorStore"]
