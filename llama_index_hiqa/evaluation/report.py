"""Ablation results: one [`VariantResult`][llama_index_hiqa.evaluation.report.VariantResult] per variant, the `AblationResult`
table (HiQA Table 2 columns: the Log-Rank Index mean/max/min/std, plus the usual ranking
metrics), saved as JSON and Markdown, and plotted when matplotlib is installed."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

logger = logging.getLogger(__name__)

STATUS_OK = "ok"
STATUS_MISSING = "not yet available"


@dataclass
class VariantResult:
    name: str
    label: str
    status: str
    n_units: int = 0
    metrics: Dict[str, float] = field(default_factory=dict)
    log_rank_stats: Dict[str, float] = field(default_factory=dict)  # Table 2: mean/max/min/std
    per_query: List[Dict[str, Any]] = field(default_factory=list)
    notes: str = ""
    seconds: float = 0.0


@dataclass
class AblationResult:
    dataset: str
    n_questions: int
    gamma: float
    ks: Tuple[int, ...]
    variants: List[VariantResult]

    def variant(self, name: str) -> VariantResult:
        """The result of the variant named ``name``.

        Args:
            name: the variant's name.

        Returns:
            Its [`VariantResult`][llama_index_hiqa.evaluation.report.VariantResult].

        Raises:
            KeyError: no variant has that name.
        """
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)

    def headline_metrics(self) -> List[str]:
        ks = self.ks
        picks = ["log_rank", "mrr"] + [f"hit@{k}" for k in ks[:3]] + [f"recall@{ks[-1]}", f"ndcg@{ks[min(2, len(ks) - 1)]}"]
        picks += [f"precision@{ks[0]}"]
        ok = [v for v in self.variants if v.status == STATUS_OK]
        if ok and f"doc_hit@{ks[0]}" in ok[0].metrics:
            picks += [f"doc_hit@{ks[0]}", f"doc_hit@{ks[1]}" if len(ks) > 1 else f"doc_hit@{ks[0]}"]
        if ok and self.dataset in ("musique", "hotpotqa"):
            picks += [f"all_gold@{k}" for k in ks[1:3]]
        return list(dict.fromkeys(picks))

    def to_markdown(self) -> str:
        cols = self.headline_metrics()
        head = ["variant", "units N"] + cols + ["LRI max", "LRI min", "LRI std"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for v in self.variants:
            if v.status != STATUS_OK:
                lines.append(f"| {v.label} | {v.status} |" + " |" * (len(head) - 2))
                continue
            cells = [v.label, f"{v.n_units:,}"] + [f"{v.metrics.get(c, float('nan')):.3f}" for c in cols]
            cells += [f"{v.log_rank_stats[s]:.3f}" for s in ("max", "min", "std")]
            lines.append("| " + " | ".join(cells) + " |")
        notes = [f"- `{v.name}`: {v.notes}" for v in self.variants if v.notes]
        return "\n".join(lines) + ("\n\n" + "\n".join(notes) if notes else "")

    def to_json(self) -> Dict[str, Any]:
        return {
            "dataset": self.dataset,
            "n_questions": self.n_questions,
            "gamma": self.gamma,
            "ks": list(self.ks),
            "variants": [v.__dict__ for v in self.variants],
        }

    def save(self, out_dir: Path, plots: bool = True) -> List[Path]:
        """Write ``ablation_<dataset>.json`` / ``.md`` and, with ``plots``, two PNGs.

        Without matplotlib the plots are skipped with a warning.

        Args:
            out_dir: the folder to write into (created when needed).
            plots: whether to draw the plots (only when a variant ran).

        Returns:
            The paths written.
        """
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        stem = out_dir / f"ablation_{self.dataset}"
        written = [stem.with_suffix(".json"), stem.with_suffix(".md")]
        written[0].write_text(json.dumps(self.to_json(), indent=1), encoding="utf-8")
        written[1].write_text(self.to_markdown() + "\n", encoding="utf-8")
        if plots and any(v.status == STATUS_OK for v in self.variants):
            try:
                import matplotlib  # noqa: F401 - a dev extra, not a dependency of the pack
            except ImportError:
                logger.warning(
                    "AblationRunner: no plots (matplotlib is not installed: pip install matplotlib); "
                    "the JSON and Markdown results are written"
                )
                return written
            written += self.plot(out_dir)
        return written

    def plot(self, out_dir: Path) -> List[Path]:
        """A bar chart per headline metric and the distribution of gold ranks per variant.

        Args:
            out_dir: the folder to write the two PNGs into.

        Returns:
            The two paths.
        """
        # matplotlib: a dev extra, not a dependency of the pack.
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        ok = [v for v in self.variants if v.status == STATUS_OK]
        cols = self.headline_metrics()
        n_cols = 4
        n_rows = math.ceil(len(cols) / n_cols)
        fig, axes = plt.subplots(n_rows, n_cols, figsize=(4 * n_cols, 3.2 * n_rows), squeeze=False)
        colors = plt.cm.tab10(np.arange(len(ok)) % 10)
        for ax, metric in zip(axes.flat, cols):
            values = [v.metrics.get(metric, 0.0) for v in ok]
            ax.bar(range(len(ok)), values, color=colors)
            ax.set_title(metric)
            ax.set_xticks(range(len(ok)))
            ax.set_xticklabels([v.name for v in ok], rotation=45, ha="right", fontsize=7)
            ax.set_ylim(0, 1)
        for ax in list(axes.flat)[len(cols) :]:
            ax.axis("off")
        fig.suptitle(f"HiQA ablation on {self.dataset} ({self.n_questions} questions)")
        fig.tight_layout()
        bars = Path(out_dir) / f"ablation_{self.dataset}_metrics.png"
        fig.savefig(bars, dpi=110)
        plt.close(fig)

        fig, ax = plt.subplots(figsize=(7, 4.2))
        for v, color in zip(ok, colors):
            ranks = np.sort([r for q in v.per_query for r in q["gold_ranks"]])
            if ranks.size:
                ax.step(ranks, np.arange(1, ranks.size + 1) / ranks.size, where="post", label=v.name, color=color)
        ax.set_xscale("log")
        ax.set_xlabel("r: rank of the gold evidence among all N units (log scale)")
        ax.set_ylabel("share of gold items ranked <= r")
        ax.set_title(f"Gold rank distribution, {self.dataset}")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        dist = Path(out_dir) / f"ablation_{self.dataset}_ranks.png"
        fig.savefig(dist, dpi=110)
        plt.close(fig)
        return [bars, dist]
