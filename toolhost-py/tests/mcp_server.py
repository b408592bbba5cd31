"""An MCP server written with the official Python SDK (mcp 2.x), for the wheel's tests:
`shout` upper-cases a text, `slow_echo` answers after a moment."""

import asyncio

from mcp.server.mcpserver import MCPServer

server = MCPServer("py-fixture")


@server.tool()
def shout(text: str) -> str:
    """Upper-cases the text."""
    return text.upper() + "!"


@server.tool()
async def slow_echo(text: str, seconds: float = 0.2) -> str:
    """Answers with the text after `seconds`."""
    await asyncio.sleep(seconds)
    return text


if __name__ == "__main__":
    server.run()
