"""llama-index-hiqa: LlamaIndex components for QA over many structurally similar documents.

Every public component is importable from here; imports are lazy so that
``import llama_index_hiqa`` stays fast and loads torch, spaCy or pymupdf only when the
component that needs them is first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Dict, List

__version__ = "0.1.0"

# Public name -> module that defines it. Each issue adds its block; keep the blocks apart.
_EXPORTS: Dict[str, str] = {
    # -- foundation: schema, defaults, reader, errors
    "PDFLayoutReader": "llama_index_hiqa.readers.pdf",
    "document_title": "llama_index_hiqa.readers.titles",  # a title from cover, metadata, file name
    "CoverLine": "llama_index_hiqa.readers.titles",
    "CachedEmbedding": "llama_index_hiqa.models.embedding_cache",
    "HiQAError": "llama_index_hiqa.errors",
    "DocumentReadError": "llama_index_hiqa.errors",
    "EncryptedDocumentError": "llama_index_hiqa.errors",
    "CorruptDocumentError": "llama_index_hiqa.errors",
    "EmptyDocumentError": "llama_index_hiqa.errors",
    "UnsupportedDocumentError": "llama_index_hiqa.errors",
    "OfflineModelError": "llama_index_hiqa.errors",
    "LLMOutputError": "llama_index_hiqa.errors",
    "UnknownNodeError": "llama_index_hiqa.errors",
    "UnserializedPartError": "llama_index_hiqa.errors",  # from_dict without a part to_dict leaves out
    #
    # -- HiQA Markdown formatter and layout parser
    "MarkdownFormatterParser": "llama_index_hiqa.parsers.markdown_formatter",
    "MarkdownCoverageWarning": "llama_index_hiqa.parsers.markdown_formatter",
    "LayoutMarkdownParser": "llama_index_hiqa.parsers.layout_markdown",
    #
    # -- TextRAG sectioning and context headers
    "LineNumberSegmentParser": "llama_index_hiqa.parsers.line_number_segment",
    "ContextHeaderTransform": "llama_index_hiqa.transforms.context_header",
    #
    # -- HiQA cascading metadata
    "CascadingMetadataTransform": "llama_index_hiqa.transforms.cascading_metadata",
    "HCATableNode": "llama_index_hiqa.transforms.table_view",
    "InvalidMetadataError": "llama_index_hiqa.errors",
    #
    # -- HiQA multi-route retrieval and critical keywords
    "CriticalKeywordExtractor": "llama_index_hiqa.transforms.critical_keywords",
    "KeywordIndex": "llama_index_hiqa.indexes.keyword_index",
    "normalize_keyword": "llama_index_hiqa.indexes.keyword_index",
    "MultiRouteRetriever": "llama_index_hiqa.retrievers.multi_route",
    "MultiRouteSettings": "llama_index_hiqa.retrievers.multi_route",
    "RetrievalRouteError": "llama_index_hiqa.errors",
    "ExpertVocabulary": "llama_index_hiqa.vocabularies",
    "VocabularyExpansion": "llama_index_hiqa.vocabularies",
    "load_vocabulary": "llama_index_hiqa.vocabularies",
    "VocabularyFileError": "llama_index_hiqa.errors",
    "DocumentFocusRetriever": "llama_index_hiqa.retrievers.document_focus",
    "DocumentFocusSettings": "llama_index_hiqa.retrievers.settings",
    "FocusChoice": "llama_index_hiqa.retrievers.document_focus",
    "QuestionRewriter": "llama_index_hiqa.retrievers.question_rewrite",
    "QuestionRewriteSettings": "llama_index_hiqa.retrievers.settings",
    "DocumentPeriod": "llama_index_hiqa.retrievers.document_period",
    "QuestionPeriod": "llama_index_hiqa.retrievers.document_period",
    "document_period": "llama_index_hiqa.retrievers.document_period",
    "question_period": "llama_index_hiqa.retrievers.document_period",
    "preferred_document": "llama_index_hiqa.retrievers.document_period",
    "implied_documents": "llama_index_hiqa.retrievers.document_period",
    "PeriodChoice": "llama_index_hiqa.retrievers.document_period",
    "FocusRewrite": "llama_index_hiqa.retrievers.question_rewrite",
    "cross_document_questions": "llama_index_hiqa.evaluation.cross_document",
    "CrossDocumentQuestion": "llama_index_hiqa.evaluation.cross_document",
    #
    # -- IIER chunk graph
    "ChunkInteractionGraph": "llama_index_hiqa.retrievers.chunk_interaction_graph",
    "ChunkGraphRetriever": "llama_index_hiqa.retrievers.chunk_graph",
    "DefaultChainScorer": "llama_index_hiqa.retrievers.chain_scorers",
    "TrainedChainScorer": "llama_index_hiqa.retrievers.chain_scorers",
    "chain_training_examples": "llama_index_hiqa.retrievers.chain_training",
    "fit_chain_scorer": "llama_index_hiqa.retrievers.chain_training",
    "ChainAugmentedRetriever": "llama_index_hiqa.retrievers.chain_augmented",
    "ChainBudget": "llama_index_hiqa.retrievers.settings",
    "GraphBuildError": "llama_index_hiqa.errors",
    #
    # -- TextRAG segment integration
    "SegmentIntegrationPostprocessor": "llama_index_hiqa.postprocessors.segment_integration",
    "RerankerError": "llama_index_hiqa.errors",
    #
    # -- evaluation
    "FaithfulnessScoreEvaluator": "llama_index_hiqa.evaluation.faithfulness",
    "EvaluationInputError": "llama_index_hiqa.errors",
    "AblationRunner": "llama_index_hiqa.evaluation.runner",
    #
    # -- the pack
    "HiQAPack": "llama_index_hiqa.pack.hiqa_pack",
    "HiQAPackSettings": "llama_index_hiqa.pack.config",
    # -- one typed settings tree: the parts of HiQAPackSettings and the helper that updates them
    "PackKeywordSettings": "llama_index_hiqa.pack.config",
    "PackRouteSettings": "llama_index_hiqa.pack.config",
    "KeywordSettings": "llama_index_hiqa.transforms.keyword_settings",
    "RouteFusionSettings": "llama_index_hiqa.retrievers.settings",
    "ChunkGraphSettings": "llama_index_hiqa.retrievers.settings",
    "InteractionGraphSettings": "llama_index_hiqa.retrievers.settings",
    "ChainSearchSettings": "llama_index_hiqa.retrievers.settings",
    "updated": "llama_index_hiqa.settings",
    "SettingsModel": "llama_index_hiqa.settings",
    "PackStoreError": "llama_index_hiqa.errors",
    # -- drop-in: any LlamaIndex vector store, the demo data from an installed wheel
    "VectorStoreFeatureError": "llama_index_hiqa.errors",
    "index_nodes": "llama_index_hiqa.storage.vector_store_access",
    "demo_data_dir": "llama_index_hiqa.demo",
    "EmptyCorpusError": "llama_index_hiqa.errors",
    "StoreConflictError": "llama_index_hiqa.errors",
    "InvalidSettingError": "llama_index_hiqa.errors",
    "InvalidQuestionError": "llama_index_hiqa.errors",
    "question_text": "llama_index_hiqa.questions",
    "PathAccessError": "llama_index_hiqa.errors",
    #
    # -- real collections: stores, batch ingestion, reader errors
    "MatrixVectorStore": "llama_index_hiqa.storage.vector_store",
    "StoreBackend": "llama_index_hiqa.storage.backends.base",
    "FolderBackend": "llama_index_hiqa.storage.backends.folder",
    "RouteFailedEvent": "llama_index_hiqa.events",
    "MultiRouteRetrievalEndEvent": "llama_index_hiqa.events",
    "IngestionReport": "llama_index_hiqa.pack.ingestion",
    "RayExecutor": "llama_index_hiqa.pack.ray_ingestion",
    "DocumentChain": "llama_index_hiqa.transforms.document_chain",
    "UndecodableTextError": "llama_index_hiqa.errors",
    "SkippedDocumentError": "llama_index_hiqa.errors",
    "IngestionWorkerError": "llama_index_hiqa.errors",
    "ExtraNotInstalledError": "llama_index_hiqa.errors",
    "UnserializableComponentError": "llama_index_hiqa.errors",
    #
    # -- LLMs over HTTP, streaming, figures
    "llm_from_spec": "llama_index_hiqa.models.llm_spec",
    "LLMConfigError": "llama_index_hiqa.errors",
    "LLMCallPolicy": "llama_index_hiqa.models.llm_calls",
    "LLMCallFailedEvent": "llama_index_hiqa.events",
    "OpenAICompatibleServer": "llama_index_hiqa.testing.openai_server",
    "save_figures": "llama_index_hiqa.figures",
    "figures_for": "llama_index_hiqa.figures",
    #
    # -- embedding backends: ONNX / int8 builds of the packaged MiniLM
    "ONNXEmbedding": "llama_index_hiqa.models.embedding_backends",
    "UnknownEmbedBackendError": "llama_index_hiqa.errors",
    #
    # -- embedded store: SQLite docstore and postings, memory-mapped vectors
    "EmbeddedBackend": "llama_index_hiqa.storage.backends.embedded",
    "EmbeddedMultiRouteRetriever": "llama_index_hiqa.storage.backends.embedded_routes",
    "EmbeddedStore": "llama_index_hiqa.storage.embedded",
    "MemmapVectorStore": "llama_index_hiqa.storage.memmap_vectors",
    "SQLiteKVStore": "llama_index_hiqa.storage.sqlite_kv",
    "SQLiteDocumentStore": "llama_index_hiqa.storage.sqlite_kv",
    #
    # -- the document focus's heading-path vectors, stored at ingestion by every store
    "HeadingVectors": "llama_index_hiqa.storage.backends.heading_vectors",
    "SQLiteHeadingVectors": "llama_index_hiqa.storage.backends.heading_vectors",
    "PostgresHeadingVectors": "llama_index_hiqa.storage.backends.heading_vectors",
    #
    # -- PostgreSQL store (pip install llama-index-hiqa[postgres])
    "PostgresBackend": "llama_index_hiqa.storage.backends.postgres",
    "PostgresStore": "llama_index_hiqa.storage.postgres",
    "PostgresStoreSettings": "llama_index_hiqa.storage.pg_connection",
    "PostgresMultiRouteRetriever": "llama_index_hiqa.storage.backends.pg_routes",
    "StoredChunkGraph": "llama_index_hiqa.storage.backends.pg_graph",
    "StoredGraphRetriever": "llama_index_hiqa.storage.backends.pg_graph",
    #
    # -- See why: the evidence on its page, in a notebook and in the browser
    "Explanation": "llama_index_hiqa.views.explanation",
    "explain_nodes": "llama_index_hiqa.views.explanation",
    "PageRenderer": "llama_index_hiqa.views.page_images",
    "PageImageError": "llama_index_hiqa.views.page_images",
    "create_app": "llama_index_hiqa.serve.app",  # pip install llama-index-hiqa[serve]
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    # The same names as real imports, for type checkers and IDEs (``import llama_index_hiqa``
    # stays lazy at run time). ``X as X`` re-exports under mypy's ``--no-implicit-reexport``.
    # tests/test_public_api.py fails when this block and _EXPORTS disagree and prints the
    # block to paste.
    from llama_index_hiqa.readers.pdf import PDFLayoutReader as PDFLayoutReader
    from llama_index_hiqa.readers.titles import (
        document_title as document_title,
        CoverLine as CoverLine,
    )
    from llama_index_hiqa.models.embedding_cache import CachedEmbedding as CachedEmbedding
    from llama_index_hiqa.errors import (
        HiQAError as HiQAError,
        DocumentReadError as DocumentReadError,
        EncryptedDocumentError as EncryptedDocumentError,
        CorruptDocumentError as CorruptDocumentError,
        EmptyDocumentError as EmptyDocumentError,
        UnsupportedDocumentError as UnsupportedDocumentError,
        OfflineModelError as OfflineModelError,
        LLMOutputError as LLMOutputError,
        UnknownNodeError as UnknownNodeError,
        UnserializedPartError as UnserializedPartError,
        InvalidMetadataError as InvalidMetadataError,
        RetrievalRouteError as RetrievalRouteError,
        GraphBuildError as GraphBuildError,
        RerankerError as RerankerError,
        EvaluationInputError as EvaluationInputError,
        PackStoreError as PackStoreError,
        VectorStoreFeatureError as VectorStoreFeatureError,
        EmptyCorpusError as EmptyCorpusError,
        StoreConflictError as StoreConflictError,
        InvalidSettingError as InvalidSettingError,
        InvalidQuestionError as InvalidQuestionError,
        PathAccessError as PathAccessError,
        UndecodableTextError as UndecodableTextError,
        SkippedDocumentError as SkippedDocumentError,
        IngestionWorkerError as IngestionWorkerError,
        ExtraNotInstalledError as ExtraNotInstalledError,
        UnserializableComponentError as UnserializableComponentError,
        LLMConfigError as LLMConfigError,
        UnknownEmbedBackendError as UnknownEmbedBackendError,
    )
    from llama_index_hiqa.parsers.markdown_formatter import (
        MarkdownFormatterParser as MarkdownFormatterParser,
        MarkdownCoverageWarning as MarkdownCoverageWarning,
    )
    from llama_index_hiqa.parsers.layout_markdown import (
        LayoutMarkdownParser as LayoutMarkdownParser,
    )
    from llama_index_hiqa.parsers.line_number_segment import (
        LineNumberSegmentParser as LineNumberSegmentParser,
    )
    from llama_index_hiqa.transforms.context_header import (
        ContextHeaderTransform as ContextHeaderTransform,
    )
    from llama_index_hiqa.transforms.cascading_metadata import (
        CascadingMetadataTransform as CascadingMetadataTransform,
    )
    from llama_index_hiqa.transforms.table_view import HCATableNode as HCATableNode
    from llama_index_hiqa.transforms.critical_keywords import (
        CriticalKeywordExtractor as CriticalKeywordExtractor,
    )
    from llama_index_hiqa.indexes.keyword_index import (
        KeywordIndex as KeywordIndex,
        normalize_keyword as normalize_keyword,
    )
    from llama_index_hiqa.retrievers.multi_route import (
        MultiRouteRetriever as MultiRouteRetriever,
        MultiRouteSettings as MultiRouteSettings,
    )
    from llama_index_hiqa.vocabularies import (
        ExpertVocabulary as ExpertVocabulary,
        VocabularyExpansion as VocabularyExpansion,
        load_vocabulary as load_vocabulary,
    )
    from llama_index_hiqa.errors import VocabularyFileError as VocabularyFileError
    from llama_index_hiqa.retrievers.document_focus import (
        DocumentFocusRetriever as DocumentFocusRetriever,
        FocusChoice as FocusChoice,
    )
    from llama_index_hiqa.retrievers.question_rewrite import (
        FocusRewrite as FocusRewrite,
        QuestionRewriter as QuestionRewriter,
    )
    from llama_index_hiqa.retrievers.document_period import (
        DocumentPeriod as DocumentPeriod,
        PeriodChoice as PeriodChoice,
        QuestionPeriod as QuestionPeriod,
        document_period as document_period,
        implied_documents as implied_documents,
        preferred_document as preferred_document,
        question_period as question_period,
    )
    from llama_index_hiqa.evaluation.cross_document import (
        cross_document_questions as cross_document_questions,
        CrossDocumentQuestion as CrossDocumentQuestion,
    )
    from llama_index_hiqa.retrievers.chunk_interaction_graph import (
        ChunkInteractionGraph as ChunkInteractionGraph,
    )
    from llama_index_hiqa.retrievers.chunk_graph import ChunkGraphRetriever as ChunkGraphRetriever
    from llama_index_hiqa.retrievers.chain_scorers import (
        DefaultChainScorer as DefaultChainScorer,
        TrainedChainScorer as TrainedChainScorer,
    )
    from llama_index_hiqa.retrievers.chain_training import (
        chain_training_examples as chain_training_examples,
        fit_chain_scorer as fit_chain_scorer,
    )
    from llama_index_hiqa.retrievers.chain_augmented import (
        ChainAugmentedRetriever as ChainAugmentedRetriever,
    )
    from llama_index_hiqa.postprocessors.segment_integration import (
        SegmentIntegrationPostprocessor as SegmentIntegrationPostprocessor,
    )
    from llama_index_hiqa.evaluation.faithfulness import (
        FaithfulnessScoreEvaluator as FaithfulnessScoreEvaluator,
    )
    from llama_index_hiqa.evaluation.runner import AblationRunner as AblationRunner
    from llama_index_hiqa.pack.hiqa_pack import HiQAPack as HiQAPack
    from llama_index_hiqa.pack.config import (
        HiQAPackSettings as HiQAPackSettings,
        PackKeywordSettings as PackKeywordSettings,
        PackRouteSettings as PackRouteSettings,
    )
    from llama_index_hiqa.transforms.keyword_settings import KeywordSettings as KeywordSettings
    from llama_index_hiqa.retrievers.settings import (
        RouteFusionSettings as RouteFusionSettings,
        ChunkGraphSettings as ChunkGraphSettings,
        InteractionGraphSettings as InteractionGraphSettings,
        ChainSearchSettings as ChainSearchSettings,
        DocumentFocusSettings as DocumentFocusSettings,
        QuestionRewriteSettings as QuestionRewriteSettings,
        ChainBudget as ChainBudget,
    )
    from llama_index_hiqa.settings import (
        updated as updated,
        SettingsModel as SettingsModel,
    )
    from llama_index_hiqa.storage.vector_store_access import index_nodes as index_nodes
    from llama_index_hiqa.demo import demo_data_dir as demo_data_dir
    from llama_index_hiqa.questions import question_text as question_text
    from llama_index_hiqa.storage.vector_store import MatrixVectorStore as MatrixVectorStore
    from llama_index_hiqa.storage.backends.base import StoreBackend as StoreBackend
    from llama_index_hiqa.storage.backends.folder import FolderBackend as FolderBackend
    from llama_index_hiqa.events import (
        RouteFailedEvent as RouteFailedEvent,
        MultiRouteRetrievalEndEvent as MultiRouteRetrievalEndEvent,
        LLMCallFailedEvent as LLMCallFailedEvent,
    )
    from llama_index_hiqa.pack.ingestion import IngestionReport as IngestionReport
    from llama_index_hiqa.pack.ray_ingestion import RayExecutor as RayExecutor
    from llama_index_hiqa.transforms.document_chain import DocumentChain as DocumentChain
    from llama_index_hiqa.models.llm_spec import llm_from_spec as llm_from_spec
    from llama_index_hiqa.models.llm_calls import LLMCallPolicy as LLMCallPolicy
    from llama_index_hiqa.testing.openai_server import (
        OpenAICompatibleServer as OpenAICompatibleServer,
    )
    from llama_index_hiqa.figures import (
        save_figures as save_figures,
        figures_for as figures_for,
    )
    from llama_index_hiqa.models.embedding_backends import ONNXEmbedding as ONNXEmbedding
    from llama_index_hiqa.storage.backends.embedded import EmbeddedBackend as EmbeddedBackend
    from llama_index_hiqa.storage.backends.embedded_routes import (
        EmbeddedMultiRouteRetriever as EmbeddedMultiRouteRetriever,
    )
    from llama_index_hiqa.storage.embedded import EmbeddedStore as EmbeddedStore
    from llama_index_hiqa.storage.memmap_vectors import MemmapVectorStore as MemmapVectorStore
    from llama_index_hiqa.storage.sqlite_kv import (
        SQLiteKVStore as SQLiteKVStore,
        SQLiteDocumentStore as SQLiteDocumentStore,
    )
    from llama_index_hiqa.storage.backends.heading_vectors import (
        HeadingVectors as HeadingVectors,
        SQLiteHeadingVectors as SQLiteHeadingVectors,
        PostgresHeadingVectors as PostgresHeadingVectors,
    )
    from llama_index_hiqa.storage.backends.postgres import PostgresBackend as PostgresBackend
    from llama_index_hiqa.storage.postgres import PostgresStore as PostgresStore
    from llama_index_hiqa.storage.pg_connection import (
        PostgresStoreSettings as PostgresStoreSettings,
    )
    from llama_index_hiqa.storage.backends.pg_routes import (
        PostgresMultiRouteRetriever as PostgresMultiRouteRetriever,
    )
    from llama_index_hiqa.storage.backends.pg_graph import (
        StoredChunkGraph as StoredChunkGraph,
        StoredGraphRetriever as StoredGraphRetriever,
    )
    from llama_index_hiqa.views.explanation import (
        Explanation as Explanation,
        explain_nodes as explain_nodes,
    )
    from llama_index_hiqa.views.page_images import (
        PageImageError as PageImageError,
        PageRenderer as PageRenderer,
    )
    from llama_index_hiqa.serve.app import create_app as create_app
else:
    # Run time only: a type checker sees the imports above, so a misspelt name is an error
    # for it rather than ``Any``.
    def __getattr__(name: str) -> Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'llama_index_hiqa' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
