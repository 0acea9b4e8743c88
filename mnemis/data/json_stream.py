"""Read the items of a top-level JSON array one at a time, in memory bounded by the largest item.

``iter_json_array(path)`` reads the file in blocks and decodes one array element at a time with the standard
library's ``JSONDecoder.raw_decode``; consumed text is dropped from the buffer, so memory stays at about one
item plus one block whatever the file's size (LongMemEval-M: 2.7 GB, a few MB per item). An element that is
cut by the end of the buffer is retried with a buffer twice as large; one larger than ``max_item_chars``, or
text that is not a JSON array, is a ``DataError`` naming the file and the item's index.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mnemis.data.errors import DataError

BLOCK_CHARS = 1 << 20
MAX_ITEM_CHARS = 512 << 20
_WS = " \t\n\r"
_AFTER = _WS + ",]"


class _Reader:
    def __init__(self, f, block: int) -> None:
        self.f, self.block = f, block
        self.buf, self.pos, self.eof = "", 0, False

    def fill(self, want: int) -> bool:
        """Drop consumed text and read at least ``want`` more characters (False at end of file)."""
        if self.eof:
            return False
        more = self.f.read(max(want, self.block))
        self.buf, self.pos = self.buf[self.pos:] + more, 0
        if len(more) < max(want, self.block):
            self.eof = True
        return bool(more)

    def skip_ws(self) -> str | None:
        """The next non-space character (not consumed), or None at end of file."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill(self.block):
                return None


def iter_json_array(path: str | Path, *, block: int = BLOCK_CHARS,
                    max_item_chars: int = MAX_ITEM_CHARS) -> Iterator[Any]:
    """Each element of the JSON array in ``path``, decoded, in order."""
    path = Path(path)
    decoder = json.JSONDecoder()
    with open(path, encoding="utf-8") as f:
        r = _Reader(f, block)
        if r.skip_ws() != "[":
            raise DataError(str(path), "top level must be a JSON array")
        r.pos += 1
        index = 0
        while True:
            c = r.skip_ws()
            if c is None:
                raise DataError(f"{path}: item {index}", "file ends inside the top-level array")
            if c == "]":
                r.pos += 1
                if r.skip_ws() is not None:
                    raise DataError(str(path), "text after the end of the top-level array")
                return
            if index:
                if c != ",":
                    raise DataError(f"{path}: item {index}", f"expected ',' or ']' between items, got {c!r}")
                r.pos += 1
                if r.skip_ws() is None:
                    raise DataError(f"{path}: item {index}", "file ends after ','")
            yield _decode_one(r, decoder, path, index, max_item_chars)
            index += 1


def _decode_one(r: _Reader, decoder: json.JSONDecoder, path: Path, index: int, max_item_chars: int) -> Any:
    while True:
        problem = None  # only the message is kept: an exception would hold the buffer (and a frame cycle)
        try:
            obj, end = decoder.raw_decode(r.buf, r.pos)
        except json.JSONDecodeError as exc:
            if r.eof:
                raise DataError(f"{path}: item {index}", f"malformed JSON: {exc.msg}") from None
            problem = exc.msg
        else:
            # a number or literal that reaches the buffer's end, or runs into a non-delimiter, may be cut
            if r.eof or (end < len(r.buf) and r.buf[end] in _AFTER):
                r.pos = end
                return obj
        held = len(r.buf) - r.pos
        if held > max_item_chars:
            raise DataError(f"{path}: item {index}", f"item larger than {max_item_chars:,} characters, or malformed"
                            + (f" ({problem})" if problem else ""))
        r.fill(held)  # at least double what is held
