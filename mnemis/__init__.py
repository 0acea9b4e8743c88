"""Mnemis: dual-route retrieval on hierarchical memory graphs (arXiv 2602.15313), a research framework."""

__version__ = "0.1.0"

__all__ = ["Memory", "Message", "__version__"]


def __getattr__(name: str):  # `from mnemis import Memory` without importing the pipeline on `import mnemis`
    if name in ("Memory", "Message"):
        from mnemis import memory

        return getattr(memory, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
