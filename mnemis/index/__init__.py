"""Search indexes: exact and FAISS vector search, BM25, reciprocal rank fusion, and the per-group catalog."""
