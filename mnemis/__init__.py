"""Mnemis: dual-route retrieval on hierarchical memory graphs (arXiv 2602.15313), a research framework."""

__version__ = "0.1.0"

__all__ = ["__version__"]
