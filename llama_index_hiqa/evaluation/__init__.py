"""Evaluation: datasets with gold evidence, ranking metrics, faithfulness, benchmark runner."""
