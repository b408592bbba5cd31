"""Drives toolhost with the official MCP Python SDK (mcp 2.3): `Client(mode="auto")`
probes with server/discover and speaks 2026-07-28, and its elicitation callback answers
toolhost's confirmation form. One confirmed write_file, one denied.

usage: sdk_client.py stdio TOOLHOST WORKSPACE | sdk_client.py http URL
Prints one JSON line: what happened.
"""

import asyncio
import json
import os
import sys

import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters

ASKED = []


async def answer(context, params):
    """Allows writes to allowed.txt, denies the rest; records what it was asked."""
    ASKED.append(params.message)
    decision = "allow" if "allowed.txt" in params.message else "deny"
    return types.ElicitResult(action="accept", content={"decision": decision})


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def main():
    if sys.argv[1] == "stdio":
        # The SDK gives a server only HOME, PATH and a few more unless told: the test's
        # environment (its XDG_STATE_HOME among it) goes to toolhost whole.
        server = StdioServerParameters(
            command=sys.argv[2],
            args=["serve", "--mcp", "--workspace", sys.argv[3]],
            env=dict(os.environ),
        )
    else:
        server = sys.argv[2]
    async with Client(server, mode="auto", elicitation_callback=answer) as client:
        allowed = await client.call_tool(
            "write_file", {"path": "allowed.txt", "content": "written by the Python SDK"}
        )
        denied = await client.call_tool("write_file", {"path": "denied.txt", "content": "no"})
        version = getattr(client, "protocol_version", None)
        print(
            json.dumps(
                {
                    "protocol": str(version) if version else None,
                    "allowed": {"is_error": allowed.is_error, "text": text(allowed)},
                    "denied": {"is_error": denied.is_error, "text": text(denied)},
                    "asked": ASKED,
                }
            )
        )


asyncio.run(main())
