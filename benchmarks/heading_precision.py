"""Heading precision of the product path on FinanceBench, from a hand-labelled sample.

A detected heading is right when it is a title a reader would call a section, note,
statement, item or exhibit-article heading; wrong when it is body text in a larger or bold
type (a run-in article heading with its sentence, a clause fragment), a table row label, a
bullet or a lone letter, a second line of a title taken as a title of its own, or cover-page
noise ("UNITED STATES").

The sample: 120 headings drawn with ``random.Random(0)`` from the distinct (filing, heading
path) pairs of a pack built by ``HiQAPack.from_directory`` on the 46 FinanceBench PDFs with
defaults (the store ``bench_product.py`` leaves in ``--store-dir``/defaults). Each was judged by
reading its label and the text under it; the judgments are in
``benchmarks/heading_precision_labels.json`` (index -> "ok" or the error's kind), written for this
sample. A different store (another reader version) draws a different sample: re-label it.

Run: ``.venv/bin/python benchmarks/heading_precision.py --store /tmp/hiqa_bench_product/defaults``
(``--print`` lists the sample for labelling).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

LABELS = HERE / "heading_precision_labels.json"
SAMPLE_SIZE = 120


def sample_headings(pack, size: int = SAMPLE_SIZE, seed: int = 0):
    """``size`` distinct (document, heading path) pairs, each with its label and first node."""
    from llama_index_hiqa import schema

    first = {}
    for node in pack.nodes:
        path = schema.get_heading_path(node)
        for depth, heading in enumerate(path):
            key = (schema.get_document_id(node), tuple(h.label() for h in path[: depth + 1]))
            first.setdefault(key, (heading, node))
    keys = sorted(first)
    return len(keys), [(key, *first[key]) for key in random.Random(seed).sample(keys, size)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path, default=Path("/tmp/hiqa_bench_product/defaults"))
    parser.add_argument("--print", action="store_true", help="list the sample (for labelling)")
    args = parser.parse_args(argv)
    from llama_index_hiqa import HiQAPack, schema

    total, sample = sample_headings(HiQAPack.load(args.store))
    labels = json.loads(LABELS.read_text(encoding="utf-8"))
    if args.print or len(labels["judgments"]) != len(sample):
        for i, (key, heading, node) in enumerate(sample):
            text = node.get_content()[:160].replace("\n", " ")
            print(f"[{i}] {key[0]} p{schema.get_page_range(node)} L{heading.level} {heading.label()[:100]!r}\n      {text}")
        return
    for i, (key, heading, _) in enumerate(sample):
        if labels["judgments"][str(i)]["label"] != heading.label()[:100]:
            raise SystemExit(f"sample {i} is {heading.label()[:60]!r}, labelled for another store: re-label it")
    kinds = Counter(j["kind"] for j in labels["judgments"].values())
    ok = kinds.pop("ok", 0)
    print(f"{total:,} distinct headings; sample of {len(sample)}: precision {ok}/{len(sample)} = {ok / len(sample):.3f}")
    for kind, count in kinds.most_common():
        print(f"  wrong: {kind}: {count}")


if __name__ == "__main__":
    main()
