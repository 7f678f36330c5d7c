"""Small general-purpose tools: waiting and telling the time."""

import datetime as _dt
import math
import re
import time
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from utils.function_catalog import ParamMeta

_OFFSET_RE = re.compile(r"^(?:UTC|GMT)?\s*([+-])(\d{1,2})(?::?(\d{2}))?$", re.IGNORECASE)


def wait(
    seconds: Annotated[float, ParamMeta(description="How long to wait, in seconds (0 or more)")],
) -> str:
    """Wait for the given number of seconds, then say how long the wait took.

    Useful to demonstrate timeouts: a call that runs past its configured timeout
    is stopped and its worker replaced, e.g.
    ``toolpool call wait --args '{"seconds": 10}' --timeout 1``.
    """
    seconds = float(seconds)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds must be a finite number, 0 or more (got {seconds!r})")
    start = time.monotonic()
    time.sleep(seconds)
    return f"waited {time.monotonic() - start:.3f} seconds"


def _zone(name: str) -> _dt.tzinfo:
    key = name.strip()
    if key.upper() in ("UTC", "Z", "GMT", "ZULU"):
        return _dt.timezone.utc
    match = _OFFSET_RE.match(key)
    if match:
        sign, hours, minutes = match.groups()
        delta = _dt.timedelta(hours=int(hours), minutes=int(minutes or 0))
        if delta >= _dt.timedelta(hours=24):
            raise ValueError(f"timezone offset {name!r} is out of range")
        return _dt.timezone(-delta if sign == "-" else delta)
    try:
        return ZoneInfo(key)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(
            f"unknown timezone {name!r}: use an IANA name such as 'Asia/Shanghai' or"
            " 'Europe/Paris', 'UTC', or an offset such as '+08:00'"
        ) from None


def get_current_time(
    timezone: Annotated[
        str | None,
        ParamMeta(description="IANA timezone name (e.g. 'Asia/Shanghai', 'America/New_York'), 'UTC', or an offset like '+08:00'; omit for the machine's local time"),
    ] = None,
    fmt: Annotated[
        Literal["iso", "date", "time", "datetime", "unix"],
        ParamMeta(description="Output form: 'iso' (ISO 8601 with UTC offset), 'date' (YYYY-MM-DD), 'time' (HH:MM:SS), 'datetime' (YYYY-MM-DD HH:MM:SS), 'unix' (seconds since the epoch)"),
    ] = "iso",
) -> str:
    """Get the current date and time, by default as ISO 8601 with the UTC offset (e.g. 2024-05-01T14:03:07+08:00)."""
    now = _dt.datetime.now(_zone(timezone)) if timezone else _dt.datetime.now().astimezone()
    if fmt == "iso":
        return now.isoformat(timespec="seconds")
    if fmt == "date":
        return now.strftime("%Y-%m-%d")
    if fmt == "time":
        return now.strftime("%H:%M:%S")
    if fmt == "datetime":
        return now.strftime("%Y-%m-%d %H:%M:%S")
    if fmt == "unix":
        return str(int(now.timestamp()))
    raise ValueError(f"unknown fmt {fmt!r}: use one of iso, date, time, datetime, unix")


# Titles and MCP behaviour hints: plain attributes, read by toolpool and
# ignored by runtimes that do not know them.
wait.mcp_title = 'Wait'
wait.mcp_annotations = {'readOnlyHint': True, 'idempotentHint': True, 'openWorldHint': False}
get_current_time.mcp_title = 'Get the current time'
get_current_time.mcp_annotations = {'readOnlyHint': True, 'openWorldHint': False}
