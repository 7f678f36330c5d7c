"""The catalog reply: every tool with its JSON Schema, and every module that could not be used."""

import json
import sys

from . import discovery, docstrings, schema


# MCP's behaviour hints, as a tool author sets them on the function.
HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
# Whether a call of the tool may (or must) run as a task (MCP's tasks extension).
TASK_SUPPORT = ("forbidden", "optional", "required")


def _presentation(func) -> dict:
    """A tool's `title` and behaviour `annotations`, and the MCP resource a
    function serves instead of being a tool, from plain attributes of the
    function (`func.mcp_title = "..."`, `func.mcp_annotations = {...}` with
    any of the four MCP hints as booleans, `func.mcp_resource = "uri"` and
    `func.mcp_mime_type = "..."`, `func.mcp_execution = {"taskSupport":
    "optional"}`, toolpool's own `func.mcp_task_after = 1.5` and
    `func.mcp_timeout = 300`, the tool's own timeout, and
    `func.mcp_timeout_grace = 5`, its grace after it; `toolpool.tool(...)`
    sets these): a folder sets
    them without depending on
    toolpool, and other runtimes ignore them. Anything else in them is left
    out."""
    found = {}
    title = getattr(func, "mcp_title", None)
    if isinstance(title, str) and title.strip():
        found["title"] = title.strip()
    hints = getattr(func, "mcp_annotations", None)
    if isinstance(hints, dict):
        kept = {name: value for name, value in hints.items() if name in HINTS and isinstance(value, bool)}
        if kept:
            found["annotations"] = kept
    execution = getattr(func, "mcp_execution", None)
    if isinstance(execution, dict) and execution.get("taskSupport") in TASK_SUPPORT:
        found["task_support"] = execution["taskSupport"]
    timeout = getattr(func, "mcp_timeout", None)
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and 0 < timeout <= 86400:
        found["timeout"] = float(timeout)
    grace = getattr(func, "mcp_timeout_grace", None)
    if isinstance(grace, (int, float)) and not isinstance(grace, bool) and 0 < grace <= 3600:
        found["timeout_grace"] = float(grace)
    task_after = getattr(func, "mcp_task_after", None)
    if isinstance(task_after, (int, float)) and not isinstance(task_after, bool) and 0 <= task_after <= 3600:
        found["task_after"] = float(task_after)
    uri = getattr(func, "mcp_resource", None)
    if isinstance(uri, str) and uri.strip():
        resource = {"uri": uri.strip()}
        mime_type = getattr(func, "mcp_mime_type", None)
        if isinstance(mime_type, str) and mime_type.strip():
            resource["mime_type"] = mime_type.strip()
        found["resource"] = resource
    return found


def _given_schema(func):
    """The input schema the author wrote (`func.mcp_input_schema = {...}`), for
    what type hints cannot say (`$defs`, `allOf`, `if`/`then`/`else`, ...): a
    JSON object schema, kept as written; None when there is none. Arguments
    are still converted by the type hints."""
    given = getattr(func, "mcp_input_schema", None)
    if given is None:
        return None
    if not isinstance(given, dict) or given.get("type") != "object":
        raise ValueError('mcp_input_schema must be a JSON Schema of "type": "object"')
    try:
        return json.loads(json.dumps(given))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"mcp_input_schema is not JSON: {exc}") from None


def _mark_header_params(func, parameters: dict) -> None:
    """`func.mcp_param_headers = {"region": "Region"}`: each named parameter is
    marked `"x-mcp-header": "Region"` in the schema, so that clients also send
    its value as the `Mcp-Param-Region` HTTP header (SEP-2243) and the server
    checks the two agree."""
    headers = getattr(func, "mcp_param_headers", None)
    if headers is None:
        return
    if not isinstance(headers, dict):
        raise ValueError("mcp_param_headers must map parameter names to header names")
    properties = parameters.get("properties") or {}
    for param, header in headers.items():
        prop = properties.get(param)
        if not isinstance(prop, dict):
            raise ValueError(f"mcp_param_headers names '{param}', which is not a parameter")
        if not isinstance(header, str) or not header or not all(c.isascii() and (c.isalnum() or c == "-") for c in header):
            raise ValueError(f"mcp_param_headers: the header of '{param}' must be letters, digits and '-', got {header!r}")
        prop["x-mcp-header"] = header


def build_catalog(toolset, warnings=(), content_classes: tuple = ()) -> dict:
    """The catalog reply; `warnings`: what the worker could not do as the project expects (standins.py);
    `content_classes`: the attachment result classes (their tools get no output schema)."""
    functions = []
    errors = [error.as_dict() for error in toolset.errors]
    for tool in toolset.tools.values():
        doc = tool.func.__doc__
        try:
            parameters = _given_schema(tool.func)
            if parameters is None:
                parameters = schema.parameters_schema(tool.signature, docstrings.param_docs(doc))
            _mark_header_params(tool.func, parameters)
            output, wrapped = schema.output_schema(tool.signature.returns, content_classes)
        except Exception as exc:
            # A schema this code cannot build must cost one function, not the catalog.
            error = f"cannot describe function '{tool.name}': {discovery.describe_exception(exc)}"
            print(f"toolpool: {tool.module}: {error}", file=sys.stderr)
            errors.append({"module": tool.module, "file": tool.file, "error": error})
            continue
        entry = {
            "name": tool.name,
            "module": tool.module,
            "description": docstrings.summary(doc),
            "parameters": parameters,
            "file": tool.file,
            "line": tool.line,
        }
        if output is not None:
            entry["output_schema"] = output
            if wrapped:
                entry["output_wrapped"] = True
        entry.update(_presentation(tool.func))
        functions.append(entry)
    functions.sort(key=lambda entry: (entry["module"], entry["name"]))
    errors.sort(key=lambda entry: entry["module"])
    return {"functions": functions, "errors": errors, "warnings": list(warnings)}
