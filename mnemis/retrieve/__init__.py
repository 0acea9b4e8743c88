"""Retrieval: System-1 similarity search, System-2 global selection, fusion, context rendering."""
