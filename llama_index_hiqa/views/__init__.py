"""What a user looks at to see why the pack returned a node: its page rendered with the node's
text highlighted ([`page_images`][llama_index_hiqa.views.page_images]) and the ranking's reasons
([`explanation`][llama_index_hiqa.views.explanation]), one renderer for the notebook and the web app."""
