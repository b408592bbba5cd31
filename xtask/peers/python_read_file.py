"""The Python SDK's high-level server (`MCPServer`, formerly FastMCP) with one tool,
`read_file`, as its documentation shows: a peer row of `cargo xtask bench`, written for
this project.

Usage: python_read_file.py WORKSPACE (serves MCP over stdio). The file is opened beneath
the workspace as the bench's floor server opens it where `openat2` is missing: absolute
paths and `..` refused, the last component not followed if it is a symlink.
"""

import os
import sys

from mcp.server.mcpserver import MCPServer

ROOT = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)

server = MCPServer("read-file")


@server.tool()
def read_file(path: str) -> str:
    """Reads a text file beneath the workspace."""
    if path.startswith("/") or ".." in path.split("/"):
        raise ValueError(f"{path}: outside the workspace")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=ROOT)
    with os.fdopen(fd, encoding="utf-8") as file:
        return file.read()


if __name__ == "__main__":
    server.run()
