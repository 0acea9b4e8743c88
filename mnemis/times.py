"""One rule for the times a memory stores, so times of one group can always be compared.

``Memory`` stores every message time as an aware datetime in its time zone (``time_zone``, UTC by default):
a naive input is read as a time in that zone, an aware one is converted to it, and a message without a time
gets "now" in it. The benchmark loaders give naive times (the datasets carry no zone); a group built from
them stays naive, and a message added to such a group is stored naive in the memory's zone, so no group ever
mixes both kinds. :func:`comparable` orders times of either kind (naive read as UTC) for code that meets a
store written before this rule.
"""

from __future__ import annotations

from datetime import datetime, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def zone(name: str | tzinfo | None) -> tzinfo:
    """A time zone from a name (``"UTC"``, ``"Europe/Paris"``) or a ``tzinfo``; None = UTC."""
    if name is None or (isinstance(name, str) and name.upper() in ("UTC", "Z")):
        return timezone.utc
    if isinstance(name, tzinfo):
        return name
    if not isinstance(name, str):
        raise TypeError(f"time_zone: expected a zone name or a tzinfo, got {type(name).__name__}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"time_zone={name!r}: not a known time zone (e.g. 'UTC', 'Europe/Paris')") from None


def in_zone(dt: datetime, tz: tzinfo) -> datetime:
    """``dt`` as an aware time in ``tz`` (a naive ``dt`` is read as a time in ``tz``)."""
    return dt.replace(tzinfo=tz) if dt.tzinfo is None else dt.astimezone(tz)


def like(dt: datetime, ref: datetime) -> datetime:
    """``dt`` of the same kind as ``ref``: naive read in ``ref``'s zone when ``ref`` is aware; an aware
    ``dt`` made naive UTC when ``ref`` is naive (how LLM-written aware dates are stored next to naive ones)."""
    if ref.tzinfo is not None:
        return in_zone(dt, ref.tzinfo)
    return dt if dt.tzinfo is None else dt.astimezone(timezone.utc).replace(tzinfo=None)


def comparable(dt: datetime) -> datetime:
    """A sort key for times of either kind (a naive time is read as UTC)."""
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt
