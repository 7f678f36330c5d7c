"""A call's W3C trace context, for tools that continue the caller's trace.

The supervisor sends `traceparent` (and `tracestate`, when there is one) in
the invoke frame of a call that continues a trace; it checked them. While
the call runs they are `TRACEPARENT` and `TRACESTATE` in `os.environ`, the
names OpenTelemetry's environment-variable carriers read, so that a tool's
own OpenTelemetry code (or a process it starts) makes its spans children of
the call's. Afterwards the environment is put back as it was: the next call
does not see this one's trace.
"""

import contextlib
import os

TRACEPARENT = "TRACEPARENT"
TRACESTATE = "TRACESTATE"

# Most calls continue no trace: one shared do-nothing context for them.
_NOTHING = contextlib.nullcontext()


def of(request: dict):
    """(traceparent, tracestate or None) the request carries, or None."""
    traceparent = request.get("traceparent")
    if not isinstance(traceparent, str) or not traceparent:
        return None
    tracestate = request.get("tracestate")
    return traceparent, tracestate if isinstance(tracestate, str) and tracestate else None


def exported(trace):
    """A context that puts `trace` into os.environ while it is open (and
    takes a TRACESTATE of the worker's own out, when the call has none);
    one that does nothing when `trace` is None."""
    if trace is None:
        return _NOTHING
    return _exporting(*trace)


@contextlib.contextmanager
def _exporting(traceparent: str, tracestate):
    saved = {name: os.environ.get(name) for name in (TRACEPARENT, TRACESTATE)}
    os.environ[TRACEPARENT] = traceparent
    if tracestate is None:
        os.environ.pop(TRACESTATE, None)
    else:
        os.environ[TRACESTATE] = tracestate
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
