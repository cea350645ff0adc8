"""The settings of [`CriticalKeywordExtractor`][llama_index_hiqa.transforms.critical_keywords.CriticalKeywordExtractor], in a light module
(pydantic only): the extractor's fields and the ``keywords`` part of
[`HiQAPackConfig`][llama_index_hiqa.pack_config.HiQAPackConfig].
"""

from __future__ import annotations

from typing import Dict, List, Optional

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field

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


class KeywordSettings(BaseModel):
    """What counts as a critical keyword (HiQA CNED): NER, rules, expert keywords."""

    model_config = ConfigDict(extra="forbid")

    use_ner: bool = Field(
        default=True,
        description="Run the local spaCy NER model (CNED). Off: rules and expert keywords only "
        "(about 50x faster on long corpora).",
    )
    ner_max_nodes: Optional[int] = Field(
        default=5000, ge=0,
        description="At ingestion, run NER over the nodes' text only when a call holds at most this "
        "many nodes (spaCy costs about a CPU-minute per 1,000 filing-sized chunks); above it NER "
        "still reads every document title (copied onto its nodes) and every question, the rules "
        "read all text. None: always.",
    )
    ner_labels: List[str] = Field(
        default_factory=lambda: list(DEFAULT_NER_LABELS),
        description="spaCy entity labels kept as critical keywords (dates, money and "
        "cardinals are left to the period rules: they would match everywhere).",
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
    llm_num_workers: int = Field(default=4, ge=1, description="Concurrent LLM calls in acall.")
    min_length: int = Field(default=2, ge=1, description="Shortest normalised keyword kept.")
    ner_batch_size: int = Field(default=64, ge=1, description="Texts per spaCy nlp.pipe batch.")
