"""A call's log records for a caller that asked for them (an MCP client's
`logging/setLevel` or `_meta` log level, the library's `InvokeOptions::logs`).

While such a call runs, a handler on the root logger sends every record at or
above the caller's level (from any logger and thread of the worker) to the
supervisor as a `log.record` callback. Python's default root level
(WARNING) would drop INFO records before any handler sees them, so the root
level is lowered to the caller's for the call and put back after. The tool's
own handlers keep working; a record that would have reached no handler but
this one goes to Python's last-resort handler (stderr, WARNING and up) as it
did before, so the supervisor's log still has it.
"""

import contextlib
import logging

LOG = "log.record"


class _Forwarder(logging.Handler):
    def __init__(self, transport, threshold: int):
        super().__init__(level=threshold)
        self._transport = transport

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
            self._transport(LOG, {"level": record.levelno, "logger": record.name, "message": message})
        except Exception:
            pass  # a log record never fails the tool
        if not _has_other_handlers(record, self) and record.levelno >= logging.lastResort.level:
            logging.lastResort.handle(record)


def _has_other_handlers(record: logging.LogRecord, mine: logging.Handler) -> bool:
    """Whether the record reaches a handler besides `mine` on its way up."""
    logger = logging.getLogger(record.name) if record.name != "root" else logging.getLogger()
    while logger is not None:
        if any(handler is not mine for handler in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


# Most calls ask for no records: one shared do-nothing context for them.
_NOTHING = contextlib.nullcontext()


def forwarded(transport, threshold):
    """A context that forwards the records from `threshold` (a Python levelno)
    up while it is open; one that does nothing when `threshold` is None."""
    if not isinstance(threshold, int) or isinstance(threshold, bool):
        return _NOTHING
    return _forwarding(transport, threshold)


@contextlib.contextmanager
def _forwarding(transport, threshold: int):
    root = logging.getLogger()
    handler = _Forwarder(transport, threshold)
    level = root.level
    root.addHandler(handler)
    if root.level > threshold:
        root.setLevel(threshold)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
