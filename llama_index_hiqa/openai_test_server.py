"""The scripted OpenAI-compatible server's earlier import path, kept so code written against it
runs unchanged; the server lives in [`llama_index_hiqa.testing.openai_server`][llama_index_hiqa.testing.openai_server]."""

from llama_index_hiqa.testing.openai_server import *  # noqa: F401,F403
from llama_index_hiqa.testing.openai_server import __all__  # noqa: F401
