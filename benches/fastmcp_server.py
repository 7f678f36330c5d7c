"""FastMCP serving the benchmark's functions (benches/tools/bench_tools.py), the
peer of `toolpool serve` in benches/mcp_peers.py.

    python benches/fastmcp_server.py                 # stdio
    python benches/fastmcp_server.py --http PORT     # streamable HTTP on 127.0.0.1

`spin` gets FastMCP's own tool timeout of 1 s (M5), as `--timeout 1` is
toolpool's.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))

import bench_tools  # noqa: E402
from fastmcp import FastMCP  # noqa: E402

server = FastMCP("fastmcp-bench")
for function in (bench_tools.noop, bench_tools.records, bench_tools.sleep):
    server.tool(function)
server.tool(bench_tools.spin, timeout=1.0)

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run(transport="http", host="127.0.0.1", port=int(sys.argv[2]), show_banner=False)
    else:
        server.run(show_banner=False)
