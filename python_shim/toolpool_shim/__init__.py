"""The worker side of toolpool: what runs inside each python3 worker process.

Module map (dependencies point down the list):
    worker      the process: channel protection, imports, hello, the request loop
    channel     frames in and out, worker-originated calls, exit on hang-up
    frames      4-byte big-endian length + body
    codec       MessagePack: the msgpack extension if importable, else minipack
    minipack    MessagePack in pure Python, byte-identical to msgpack
    catalog     the catalog reply, from discovery + schema + docstrings
    discovery   finding and importing the tool modules
    invoke      one call: find, check and coerce arguments, run, convert the result
    content     attachment results (MessageBlock, AttachmentRecord) as content blocks
    standins    the classes of the _context services: the project's own, or toolpool's
    proxies     the _context services: attachment store and human prompt, over callbacks
    records     toolpool's record types (MessageBlock, AttachmentRecord, PromptResult, ...)
    coerce      JSON arguments → the annotated types
    schema      annotations → JSON Schema
    results     return values → JSON-able data
    slots       parameters and nested fields, from resolved type hints
    typeinfo    what kind of type an annotation is
    docstrings  descriptions from docstrings
The protocol is docs/protocol.md; the catalog's type mapping is docs/catalog.md;
the path of a call through both sides is docs/architecture.md.
"""
