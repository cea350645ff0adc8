"""What every benchmark shares: the data, the baseline chunks, the cached embedding model.

All variants use the same embedding model (the packaged all-MiniLM-L6-v2), wrapped in
:class:`~llama_index_hiqa.CachedEmbedding` so text embedded once (by any benchmark, in any
checkout of the project) is never embedded again: the cache lives in
``~/.cache/llama_index_hiqa`` (``HIQA_CACHE_DIR``).

The LlamaIndex baseline is what a user has today: ``SentenceSplitter(chunk_size=256,
chunk_overlap=32)`` per page (FinanceBench) or per passage (multi-hop), the same embedding
model, exact cosine top-k.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
from llama_index.core.node_parser import SentenceSplitter  # noqa: E402
from llama_index.core.schema import TextNode  # noqa: E402

from llama_index_hiqa import schema  # noqa: E402
from llama_index_hiqa.models.embedding_cache import CachedEmbedding  # noqa: E402
import shared_data as datasets  # noqa: E402

DEMO_DIR = ROOT / "examples" / "data"
BASELINE_CHUNK_SIZE = 256
BASELINE_CHUNK_OVERLAP = 32

_embed: Optional[CachedEmbedding] = None


def embed_model() -> CachedEmbedding:
    """The packaged MiniLM behind the shared on-disk cache (one instance per process)."""
    global _embed
    if _embed is None:
        _embed = CachedEmbedding.from_defaults()
    return _embed


def require_shared_data(what: str) -> Optional[Path]:
    """The shared data folder, or ``None`` after printing why the benchmark skips it."""
    root = datasets.shared_data_dir()
    if root is None:
        print(f"SKIP {what}: ../shared/data not found (set HIQA_DATA_DIR to its path)")
    return root


def financebench_keyword_extractor():
    """Critical keywords for FinanceBench as every benchmark extracts them: the rules plus the
    company names as expert keywords (with the aliases the questions use), no spaCy NER —
    NER over 25k chunks takes hours on 2 cores."""
    from llama_index_hiqa import CriticalKeywordExtractor

    return CriticalKeywordExtractor(
        use_ner=False,
        expert_keywords=datasets.financebench_companies(),
        keyword_aliases=datasets.FINANCEBENCH_COMPANY_ALIASES,
    )


def baseline_page_chunks(pages: List[Dict]) -> List[TextNode]:
    """SentenceSplitter(256, 32) over every page; each chunk knows its filing and page."""
    splitter = SentenceSplitter(
        chunk_size=BASELINE_CHUNK_SIZE, chunk_overlap=BASELINE_CHUNK_OVERLAP
    )
    nodes: List[TextNode] = []
    position: Dict[str, int] = {}
    for page in pages:
        if not page["text"].strip():
            continue
        for text in splitter.split_text(page["text"]):
            doc = page["doc_name"]
            node = TextNode(text=text, id_=f"{doc}:p{page['page']}:{position.get(doc, 0)}")
            schema.set_segment_facts(
                node,
                document_id=doc,
                document_title=doc,
                position=position.get(doc, 0),
                page_range=(page["page"], page["page"]),
                parse_path="text",
            )
            position[doc] = position.get(doc, 0) + 1
            nodes.append(node)
    return nodes


def embed_nodes(nodes: List[TextNode], show_progress: bool = True, batch: int = 256) -> np.ndarray:
    """Embed ``get_content(EMBED)`` of every node through the cache; sets ``node.embedding``.

    Returns the L2-normalised matrix (rows in node order) for exact cosine top-k.
    """
    from llama_index.core.schema import MetadataMode

    model = embed_model()
    texts = [n.get_content(MetadataMode.EMBED) for n in nodes]
    vectors: List[List[float]] = []
    steps = range(0, len(texts), batch)
    if show_progress:
        from tqdm import tqdm

        steps = tqdm(steps, desc="embedding (cached)", unit="batch")
    for start in steps:
        vectors.extend(model.get_text_embedding_batch(texts[start : start + batch]))
    for node, vector in zip(nodes, vectors):
        node.embedding = vector
    matrix = np.asarray(vectors, dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-12
    return matrix


def embed_queries(questions: List[str]) -> np.ndarray:
    model = embed_model()
    matrix = np.asarray([model.get_query_embedding(q) for q in questions], dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True) + 1e-12
    return matrix
