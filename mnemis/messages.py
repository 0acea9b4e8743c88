"""What ``Memory.add`` accepts: the group id, the message records, and each message's stable identity.

A message's identity is its ``id`` when the caller gives one, else a hash of the group, the whole ``add``
batch (speakers, texts, the times and sessions as given) and the message's index in it. Repeating an
``add`` (after a crash, or by mistake) therefore names the same episodes, and the memory stores each
message once. Two calls with the same messages and no times or ids are one call repeated; to store the
same words twice, give them times or ids.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, ValidationError

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_ID = 256


class Message(BaseModel):
    """One message to remember. ``time`` defaults to now; ``session`` to the group's last one; ``id`` (your
    own, unique in the group) makes a repeated ``add`` recognise the message. Stored as the episode text
    ``"<speaker>: <text>"``, as the benchmark loaders store a turn, with the episode id ``<group>:<id>``."""

    model_config = {"extra": "forbid"}

    speaker: str = Field(min_length=1)
    text: str = Field(min_length=1)
    time: datetime | None = None
    session: int | None = Field(None, ge=0)
    id: str | None = Field(None, min_length=1, max_length=MAX_ID, pattern=r"^[^\x00-\x1f\x7f]+$")


def check_group(group: Any, where: str = "group") -> str:
    """``group`` if it is a usable group id, else a ``TypeError`` / ``ValueError`` naming it."""
    if not isinstance(group, str):
        raise TypeError(f"{where}: expected a non-empty string, got {type(group).__name__} {group!r:.60}")
    if not group.strip():
        raise ValueError(f"{where}: expected a non-empty string, got {group!r}")
    if _CONTROL.search(group) or len(group) > MAX_ID:
        raise ValueError(f"{where}: {group!r:.80} has control characters or more than {MAX_ID} characters")
    return group


def parse_message(item: Any, where: str) -> Message:
    if isinstance(item, Message):
        return item
    if not isinstance(item, Mapping):
        raise TypeError(f"{where}: expected a dict with speaker, text (and optional time, session, id), "
                        f"got {type(item).__name__}")
    item = dict(item)
    if "content" in item and "text" not in item:  # the Episode / chat-message spelling: "<speaker>: <text>"
        content, speaker = item.pop("content"), item.get("speaker")
        if isinstance(content, str) and isinstance(speaker, str) and content.startswith(f"{speaker}: "):
            content = content[len(speaker) + 2:]
        item["text"] = content
    try:
        return Message.model_validate(item)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(x) for x in first["loc"]) or "message"
        raise ValueError(f"{where}.{field}: {first['msg']}") from None


def parse_messages(messages: Any) -> list[Message]:
    """Every message of one ``add``, validated before anything is stored (errors name the item)."""
    if messages is None or isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise TypeError("messages: expected a list of messages (dicts with speaker and text), got "
                        f"{type(messages).__name__}" + (" (wrap a single message in [...])"
                                                       if isinstance(messages, (Mapping, Message)) else ""))
    parsed = [parse_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
    seen: dict[str, int] = {}
    for i, m in enumerate(parsed):
        if m.id is not None:
            if m.id in seen:
                raise ValueError(f"messages[{i}].id: {m.id!r} is also the id of messages[{seen[m.id]}]")
            seen[m.id] = i
    return parsed


def source_ids(group: str, messages: Sequence[Message]) -> list[str]:
    """Each message's id inside its group (see the module docstring)."""
    batch = json.dumps([[m.speaker, m.text, m.time.isoformat() if m.time else None, m.session, m.id]
                        for m in messages], ensure_ascii=False)
    digest = hashlib.sha1(f"{group}\x1f{batch}".encode("utf-8", "surrogatepass")).hexdigest()
    return [m.id if m.id is not None else
            "m" + hashlib.sha1(f"{digest}\x1f{i}".encode()).hexdigest()[:16] for i, m in enumerate(messages)]
