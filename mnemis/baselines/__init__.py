"""Baselines sharing the loaders, answerer and judges: full context, RAG."""
