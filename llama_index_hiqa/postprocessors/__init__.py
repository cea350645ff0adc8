"""Postprocessors of llama-index-hiqa (see DESIGN: the flow of data)."""
