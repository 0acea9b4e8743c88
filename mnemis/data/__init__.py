"""Dataset loaders and slicing."""

from mnemis.data.errors import DataError

__all__ = ["DataError"]
