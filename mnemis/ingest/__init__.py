"""Base-graph construction: extraction, entity resolution, fact dedup/invalidation, attributes, embeddings.

Entry point: :class:`mnemis.ingest.pipeline.BaseGraphBuilder` (``ingest`` for bulk, ``add`` for incremental).
"""
