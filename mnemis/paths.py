"""Names from data (group ids, question ids, model names) made safe to use as one path component.

A name that is already a plain file name (letters, digits, ``_``, ``.``, ``-``; not starting with a dot; at
most ``max_len`` characters) is kept as it is, so the folders of ordinary ids (``conv-26``) stay where they
were. Anything else (``../x``, ``a/b``, spaces, control characters, an empty or over-long name) becomes its
plain characters plus a short hash of the whole name: two different names never share a path, and no name
leaves the folder it is joined to.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

_PLAIN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")
_OTHER = re.compile(r"[^A-Za-z0-9_.-]")


def safe_name(name: str, *, max_len: int = 64, hashed: bool = False) -> str:
    """``name`` as one safe path component (see the module docstring); ``hashed=True`` always appends the
    hash (for names whose case or length may collide on some file systems)."""
    if not isinstance(name, str):
        raise TypeError(f"a name used as a file name must be a string, got {type(name).__name__}")
    if not hashed and len(name) <= max_len and _PLAIN.fullmatch(name):
        return name
    digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{_OTHER.sub('_', name).lstrip('.')[: max(1, max_len - 16)]}-{digest}"  # never hidden, never ".."


def child_path(folder: str | Path, name: str, suffix: str = "") -> Path:
    """``folder / (safe_name(name) + suffix)``; always a direct child of ``folder``."""
    if "/" in suffix or "\\" in suffix or suffix in (".", ".."):
        raise ValueError(f"suffix {suffix!r} is not a file-name ending")
    return Path(folder) / f"{safe_name(name)}{suffix}"
