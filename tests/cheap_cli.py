"""``python tests/cheap_cli.py ARGS`` (or ``-m tests.cheap_cli``): the ``hiqa`` command with a hashing embedding and
rules-only keywords (no model loads), for tests that run the command in several processes."""

from __future__ import annotations

import sys

from llama_index_hiqa import cli
from llama_index_hiqa.pack import hiqa_pack as pack_module
from llama_index_hiqa.settings import updated
from tests.pack_helpers import HashEmbedding

_real_keyword_extractor = pack_module.keyword_extractor


def _rules_only(config):
    return _real_keyword_extractor(updated(config, keywords={"use_ner": False}))


def main(argv=None) -> int:
    pack_module.default_embed_model = lambda m=None, backend=None: m or HashEmbedding()
    pack_module.keyword_extractor = _rules_only
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
