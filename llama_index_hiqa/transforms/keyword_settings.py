"""The settings of [`CriticalKeywordExtractor`][llama_index_hiqa.transforms.critical_keywords.CriticalKeywordExtractor], in a light module
(pydantic only): the extractor's fields and the ``keywords`` part of
[`HiQAPackSettings`][llama_index_hiqa.pack.config.HiQAPackSettings].
"""

from __future__ import annotations

import importlib.util
import json
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from llama_index.core.bridge.pydantic import Field, field_validator

from llama_index_hiqa.models.defaults import NER_MODEL_NAME
from llama_index_hiqa.settings import SettingsModel

DEFAULT_NER_LABELS = (
    "ORG",
    "PRODUCT",
    "PERSON",
    "GPE",
    "LOC",
    "FAC",
    "NORP",
    "EVENT",
    "LAW",
    "WORK_OF_ART",
)


# Upper bounds (stated in the fields' descriptions).
MAX_NER_NODES = 1_000_000_000  # a node count threshold: above it means "always"


@lru_cache(maxsize=1)
def ner_model_labels() -> Optional[Tuple[str, ...]]:
    """The entity labels of the packaged spaCy model, read from its ``meta.json`` without
    loading the model.

    Returns:
        The labels, or ``None`` when the model is not installed (nothing to check against).
    """
    spec = importlib.util.find_spec(NER_MODEL_NAME)
    if spec is None or spec.origin is None:
        return None
    meta = Path(spec.origin).parent / "meta.json"
    try:
        labels = json.loads(meta.read_text(encoding="utf-8")).get("labels", {}).get("ner")
    except (OSError, ValueError):
        return None
    return tuple(labels) if labels else None


class KeywordSettings(SettingsModel):
    """What counts as a critical keyword (HiQA CNED): NER, rules, expert keywords."""

    use_ner: bool = Field(
        default=True,
        description="Run the local spaCy NER model (CNED). Off: rules and expert keywords only "
        "(about 50x faster on long corpora).",
    )
    ner_max_nodes: Optional[int] = Field(
        default=5000, ge=0, le=MAX_NER_NODES,
        description="At ingestion, run NER over the nodes' text only when a call holds at most this "
        "many nodes (spaCy costs about a CPU-minute per 1,000 filing-sized chunks); above it NER "
        "still reads every document title (copied onto its nodes) and every question, the rules "
        "read all text. None: always (at most 10^9).",
    )
    ner_labels: List[str] = Field(
        default_factory=lambda: list(DEFAULT_NER_LABELS),
        description="spaCy entity labels kept as critical keywords (dates, money and "
        "cardinals are left to the period rules: they would match everywhere); each one the "
        "packaged NER model knows (ORG, PRODUCT, PERSON, GPE, LOC, FAC, NORP, EVENT, LAW, "
        "WORK_OF_ART, LANGUAGE, DATE, TIME, PERCENT, MONEY, QUANTITY, ORDINAL, CARDINAL).",
    )
    use_rules: bool = Field(
        default=True,
        description="Identifier, product-number, year and fiscal-period patterns.",
    )
    expert_keywords: List[str] = Field(
        default_factory=list,
        description="Keywords a domain expert sets (HiQA): matched as phrases, whatever the "
        "case, hyphens or spacing.",
    )
    keyword_aliases: Dict[str, str] = Field(
        default_factory=dict,
        description="Alternative spelling -> canonical keyword (e.g. {'JnJ': 'Johnson & "
        "Johnson'}); aliases are matched like expert keywords and counted as the canonical one.",
    )
    include_document_keywords: bool = Field(
        default=True,
        description="Add the keywords of the node's document title to every node of it.",
    )
    llm_num_workers: int = Field(default=4, ge=1, le=64, description="Concurrent LLM calls in acall (1 to 64).")
    min_length: int = Field(default=2, ge=1, le=100, description="Shortest normalised keyword kept (1 to 100).")
    ner_batch_size: int = Field(default=64, ge=1, le=10_000, description="Texts per spaCy nlp.pipe batch (1 to 10,000).")

    @field_validator("ner_labels")
    @classmethod
    def _labels_the_model_knows(cls, labels: List[str]) -> List[str]:
        known = ner_model_labels()
        unknown = [label for label in labels if known is not None and label not in known]
        if unknown:
            raise ValueError(f"the NER model has no label {', '.join(map(repr, unknown))}; its labels: {', '.join(known or ())}")
        return labels
