"""An agent loop as a user writes one: a scripted model asks for tools over several turns,
in the Anthropic and the OpenAI shapes, and toolhost answers each turn's calls."""

import pytest

import toolhost
from conftest import (
    ScriptedModel,
    anthropic_turn,
    config_allowing,
    openai_turn,
    responses_turn,
    text_of,
)


def loop(host, model):
    """Runs the model to its end; returns every batch of results it was sent."""
    calls = model.respond()
    while calls:
        calls = model.respond(host.run(calls))
    return model.sent


def test_an_anthropic_loop_reads_lists_and_writes_over_three_turns(workspace):
    asked = []

    def allow(confirmation):
        asked.append(confirmation)
        return "allow"

    model = ScriptedModel([
        anthropic_turn(("read_file", {"path": "README.md"})),
        anthropic_turn(("write_file", {"path": "notes.txt", "content": "read it"}), ("list_dir", {"path": "."})),
    ])
    with toolhost.Host(workspace=workspace, on_confirm=allow) as host:
        sent = loop(host, model)
    first, second = sent
    # Text blocks beside the calls are skipped: one result per tool_use, in order.
    assert [r["tool_use_id"] for r in first] == ["toolu_read_file_0"]
    assert first[0]["type"] == "tool_result"
    assert "hello from the workspace" in text_of(first[0])
    assert [r["tool_use_id"] for r in second] == ["toolu_write_file_0", "toolu_list_dir_1"]
    assert not any(r.get("is_error") for r in second)
    assert (workspace / "notes.txt").read_text() == "read it"
    # Only the write was asked about, with the question the terminal asks.
    assert [c.tool for c in asked] == ["write_file"]
    assert asked[0].side_effects == "write"
    assert "'write_file' (write) asks to run" in asked[0].question
    assert "will create notes.txt" in asked[0].modifications[0]


def test_an_openai_chat_loop_gets_tool_messages(workspace, tmp_path):
    model = ScriptedModel([
        openai_turn(("shell", {"command": "echo from-openai"})),
        openai_turn(("read_file", {"path": "README.md"})),
    ])
    with toolhost.Host(workspace=workspace, config=config_allowing(tmp_path, "shell")) as host:
        first, second = loop(host, model)
    assert first[0]["role"] == "tool" and first[0]["tool_call_id"] == "call_shell_0"
    assert "from-openai" in first[0]["content"]
    assert "hello from the workspace" in second[0]["content"]


def test_an_openai_responses_loop_gets_function_call_outputs(workspace):
    model = ScriptedModel([responses_turn(("list_dir", {"path": "."}))])
    with toolhost.Host(workspace=workspace) as host:
        (results,) = loop(host, model)
    assert results == [{"type": "function_call_output", "call_id": "call_0", "output": results[0]["output"]}]
    assert "README.md" in results[0]["output"]


def test_sdk_objects_are_taken_as_they_come():
    class ToolUseBlock:  # what an SDK's pydantic model offers
        def model_dump(self):
            return {"type": "tool_use", "id": "toolu_1", "name": "list_dir", "input": {}}

    assert toolhost._as_dict(ToolUseBlock())["id"] == "toolu_1"


@pytest.mark.parametrize("fmt,key", [("anthropic", "input_schema"), ("openai", "function"), ("openai_responses", "parameters"), ("mcp", "inputSchema")])
def test_tool_definitions_come_in_each_providers_shape(workspace, fmt, key):
    with toolhost.Host(workspace=workspace) as host:
        tools = host.tools(format=fmt)
    assert {"read_file", "write_file", "shell"} <= {t.get("name") or t["function"]["name"] for t in tools}
    assert all(key in t for t in tools)
