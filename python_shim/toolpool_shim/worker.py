"""The worker process: imports the tools, then answers catalog and invoke requests, one at a time.

Started by toolpool_boot.py in the forked child; see docs/protocol.md.
"""

import faulthandler
import json
import marshal
import os
import signal
import sys

from . import codec, discovery, minipack, standins, trace_env
from .catalog import build_catalog
from .channel import Channel
from .frames import FrameTooLarge
from .invoke import Invoker, ToolFailure, hear_deadlines
from .results import Encoded

PROTOCOL_VERSION = 7
SHIM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(config: dict) -> None:
    frame_in, frame_out = _protect_channel()
    channel = Channel(frame_in, frame_out, int(config["max_frame"]))
    # Watching starts before the tools are imported: a supervisor that goes
    # away during a slow or hanging import still ends this process.
    channel.watch_for_hangup()
    _enable_stack_dumps(config.get("dump_fd"))
    hear_deadlines()
    # Behind the project (whose own `utils` or `entity` wins over the compat
    # ones) but ahead of the session's installed packages, so that nothing a
    # session installs can shadow them.
    sys.path.append(os.path.join(SHIM_DIR, "compat"))
    for entry in config.get("extra_sys_path") or ():
        sys.path.append(entry)
    toolset = _import_tools(channel, config)
    # After the tools' imports: the project's own context classes, if it has them.
    classes = standins.resolve()
    channel.send({
        "t": "hello",
        "protocol": PROTOCOL_VERSION,
        "pid": os.getpid(),
        "python": sys.version.split()[0],
        "codec": codec.NAME,
        "executable": sys.executable,
    })
    _serve(channel, toolset, classes, Invoker(toolset, config, channel.call, classes))


def _import_tools(channel: Channel, config: dict):
    """Import the tool modules, each announced first and bounded in time.

    A module that hangs past `import_timeout` gets every thread's stack
    written to the dump fd and the process ended (faulthandler's watchdog
    runs without the GIL, so a C loop cannot stop it); one that exits or
    kills the process does so after its `importing` message. Either way the
    supervisor knows which module it was, and the next worker skips it.
    """
    limit = config.get("import_timeout")
    dump_fd = config.get("dump_fd")
    dump_to = dump_fd if dump_fd is not None else sys.stderr

    def before(module: str, file: str) -> None:
        channel.send({"t": "importing", "module": module, "file": file})
        if limit:
            faulthandler.dump_traceback_later(float(limit), exit=True, file=dump_to)

    def after() -> None:
        if limit:
            faulthandler.cancel_dump_traceback_later()

    discovery.CODE_CACHE = config.get("code_cache")
    return discovery.load_tools(
        config["functions_dir"], before, after, config.get("skip_modules") or (),
    )



def _protect_channel() -> tuple:
    """Keep private copies of stdin/stdout for frames; point fd 0 at /dev/null and fd 1 at stderr.

    Whatever a tool writes to stdout (print, os.write(1, ...), C code) then
    lands on stderr, which the supervisor logs, and never inside a frame.
    """
    frame_in, frame_out = os.dup(0), os.dup(1)  # os.dup: not inherited by the tools' children
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    if sys.stdout is not None:
        # Line by line, so that output is logged next to the call that made it
        # and is not lost in a buffer when the worker is killed on a timeout.
        sys.stdout.reconfigure(line_buffering=True)
    return frame_in, frame_out


def _enable_stack_dumps(dump_fd) -> None:
    # Crashes (SIGSEGV, ...) print the Python stack to stderr before the worker dies.
    faulthandler.enable(file=sys.stderr, all_threads=True)
    if dump_fd is not None:
        # The supervisor sends SIGUSR1 just before a timeout kill and reads
        # where the tool was from this descriptor.
        os.set_inheritable(dump_fd, False)
        faulthandler.register(signal.SIGUSR1, file=dump_fd, all_threads=True)


def _serve(channel: Channel, toolset, classes, invoker: Invoker) -> None:
    catalog = None
    while True:
        request = channel.next_request()
        request_id = request.get("id")
        kind = request.get("t")
        blocks = None
        error = None
        try:
            if kind == "invoke" and isinstance(request.get("name"), str):
                value, blocks = invoker.invoke(
                    request["name"], _arguments(request), _context(request), trace_env.of(request)
                )
            elif kind == "ping":
                value = Encoded()  # null; exercises the whole request path: warms a spare
            elif kind == "catalog":
                if catalog is None:
                    catalog = build_catalog(toolset, classes.warnings, classes.blocks + classes.records)
                value = Encoded(value=catalog)
            else:
                raise ToolFailure("ProtocolError", f"not a request this worker understands: {kind!r} (protocol {PROTOCOL_VERSION})")
        except ToolFailure as failure:
            error = failure.error
        except Exception as exc:
            error = ToolFailure.from_exception(exc).error
        # Everything the call printed is in the stderr pipe before its reply:
        # the supervisor logs the pipe to its end, as this call's, once the
        # reply is read (src/worker/stderr.rs).
        _flush_tool_output()
        if error is not None:
            _reply_error(channel, request_id, error)
        else:
            _reply_value(channel, request_id, value, blocks)


def _arguments(request: dict):
    """The call's arguments: one marshal blob the supervisor wrote (made into
    objects in C), or a MessagePack value."""
    blob = request.get("args_marshal")
    if blob == b"{0":
        return {}  # a call without arguments: no parse
    if isinstance(blob, bytes):
        try:
            return marshal.loads(blob)
        except (ValueError, EOFError, TypeError) as exc:
            raise ToolFailure("InvalidArguments", f"the arguments are not a marshal blob: {exc}") from None
    return request.get("args")


# Parsed `context_json` texts: a session's calls all send the same one.
_CONTEXTS: dict = {}
_MAX_CONTEXTS = 64


def _context(request: dict) -> dict:
    """The call's context from its JSON text, parsed once per distinct text."""
    text = request.get("context_json")
    if text is None:
        return {}
    if not isinstance(text, str):
        raise ToolFailure("ProtocolError", "the call's context_json is not text")
    context = _CONTEXTS.get(text)
    if context is None:
        try:
            context = json.loads(text)
        except ValueError as exc:
            raise ToolFailure("ProtocolError", f"the call's context is not JSON: {exc}") from None
        if not isinstance(context, dict):
            raise ToolFailure("ProtocolError", "the call's context is not a JSON object")
        if len(_CONTEXTS) >= _MAX_CONTEXTS:
            _CONTEXTS.clear()
        _CONTEXTS[text] = context
    return context


def _reply_value(channel: Channel, request_id, value: Encoded, blocks=None) -> None:
    key, held = value.reply_field()
    try:
        if blocks is None and key != "value":
            # The common reply, a blob under its key, encoded by hand.
            channel.send_body(minipack.reply_body(request_id, key, held))
        else:
            reply = {"t": "reply", "id": request_id, "ok": True, key: held}
            if blocks is not None:
                reply["content"] = blocks
            channel.send(reply)
    except FrameTooLarge as too_large:
        _reply_error(channel, request_id, {
            "type": "ResultTooLarge",
            "message": (
                f"result is {too_large.size / 2**20:.1f} MB encoded, "
                f"over the {too_large.max_frame / 2**20:.1f} MB frame limit"
            ),
            "traceback": None,
        })
    except Exception as exc:  # a value MessagePack cannot carry, e.g. a str with a lone surrogate
        _reply_error(channel, request_id, {
            "type": type(exc).__name__,
            "message": f"the result cannot be encoded: {exc}",
            "traceback": None,
        })


def _reply_error(channel: Channel, request_id, error: dict) -> None:
    error = {key: _encodable(text) for key, text in error.items()}
    try:
        channel.send({"t": "reply", "id": request_id, "ok": False, "error": error})
    except FrameTooLarge:
        # An enormous exception message or traceback: keep the start of each,
        # small enough to fit whatever the characters' UTF-8 length.
        limit = channel.max_frame // 16
        clipped = {key: _clip(text, limit) for key, text in error.items()}
        channel.send({"t": "reply", "id": request_id, "ok": False, "error": clipped})


def _encodable(text):
    """Text that UTF-8 can encode: lone surrogates (from undecodable file names) escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8") if isinstance(text, str) else text


def _clip(text, limit: int):
    if not isinstance(text, str) or len(text) <= limit:
        return text
    return text[:limit] + f"… ({len(text) - limit} more characters cut)"


def _flush_tool_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # a tool replaced or closed the stream: nothing to flush then
            pass
