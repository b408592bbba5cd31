"""What the tests of the toolhost wheel share: a workspace, the fixtures `cargo xtask test`
prepares (a plugin package directory), an MCP server written with the official Python SDK,
and scripted models that answer in the providers' shapes, as a user's agent loop sees them.
"""

import json
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("hello from the workspace\n")
    return ws


def required(var):
    """An environment variable `cargo xtask test` sets; the test is skipped without it,
    unless the run requires it (TOOLHOST_TEST_REQUIRE_PEERS)."""
    value = os.environ.get(var)
    if not value:
        if os.environ.get("TOOLHOST_TEST_REQUIRE_PEERS"):
            pytest.fail(f"{var} is not set: run the tests with cargo xtask test, which prepares it")
        pytest.skip(f"{var} is not set (cargo xtask test prepares it)")
    return value


@pytest.fixture
def plugins_dir():
    return required("TOOLHOST_TEST_PLUGINS")


@pytest.fixture
def mcp_config(tmp_path):
    """A toolhost.toml mounting tests/mcp_server.py (the official Python SDK) as `py`."""
    config = tmp_path / "toolhost.toml"
    server = HERE / "mcp_server.py"
    config.write_text(
        "[[mcp_servers]]\n"
        'id = "py"\n'
        'prefix = "py"\n'
        f"command = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(server))}]\n"
        f"readable_roots = [{json.dumps(sys.prefix)}, {json.dumps(sys.base_prefix)}, {json.dumps(str(HERE))}]\n"
    )
    return config


def config_allowing(tmp_path, *tools, more=""):
    """A toolhost.toml whose policy runs `tools` without asking."""
    config = tmp_path / "allow.toml"
    lines = ["[tool_confirmation.per_tool]"] + [f'{t} = "auto"' for t in tools]
    config.write_text("\n".join(lines) + "\n" + more)
    return config


class ScriptedModel:
    """A model that answers from a script: each turn's tool calls, in a provider's shape;
    it records the results it was sent."""

    def __init__(self, turns):
        self.turns = list(turns)
        self.sent = []

    def respond(self, results=None):
        if results is not None:
            self.sent.append(results)
        return self.turns.pop(0) if self.turns else []


def anthropic_turn(*calls):
    """An assistant message's content: a text block, then tool_use blocks."""
    content = [{"type": "text", "text": "Let me use my tools."}]
    for i, (name, args) in enumerate(calls):
        content.append({"type": "tool_use", "id": f"toolu_{name}_{i}", "name": name, "input": args})
    return content


def openai_turn(*calls):
    """A Chat Completions message's tool_calls (arguments as JSON text)."""
    return [
        {"id": f"call_{name}_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (name, args) in enumerate(calls)
    ]


def responses_turn(*calls):
    """A Responses API output: function_call items beside a message."""
    out = [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}]
    for i, (name, args) in enumerate(calls):
        out.append({"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{i}", "name": name, "arguments": json.dumps(args)})
    return out


def text_of(result):
    """The text of a result block of any shape."""
    if result.get("type") == "tool_result":
        return "\n".join(c.get("text", "") for c in result["content"])
    if result.get("role") == "tool":
        return result["content"]
    return result["output"]
