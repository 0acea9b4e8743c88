"""The one error type of the data loaders: names the file or item path and what is wrong."""

from __future__ import annotations


class DataError(ValueError):
    """Bad input data. ``where`` is a file name and/or an item path such as ``conv-26 session_3[4].text``."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem
