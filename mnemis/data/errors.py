"""The one error type of the data loaders: names the file or item path and what is wrong."""

from __future__ import annotations


class DataError(ValueError):
    """Bad input data. ``where`` is a file name and/or an item path such as ``conv-26 session_3[4].text``."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


def require(obj: object, key: str, typ: type | tuple[type, ...], where: str):
    """``obj[key]`` checked to be of ``typ``; a ``DataError`` naming ``where.key`` otherwise."""
    if not isinstance(obj, dict):
        raise DataError(where, f"expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise DataError(f"{where}.{key}", "missing field")
    value = obj[key]
    if not isinstance(value, typ):
        raise DataError(f"{where}.{key}", f"expected {getattr(typ, '__name__', typ)}, got {type(value).__name__}")
    return value
