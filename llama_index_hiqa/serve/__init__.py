"""``hiqa serve``: a local web app and JSON API over a loaded pack ([`app`][llama_index_hiqa.serve.app])."""
