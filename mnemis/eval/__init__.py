"""Evaluation harness: answering, judging, metrics, reports, tracking."""
