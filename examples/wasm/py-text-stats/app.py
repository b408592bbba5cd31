"""text-stats: a toolhost plugin written in Python, built into a WebAssembly component.

From the toolhost checkout, `cargo xtask plugin package examples/wasm/py-text-stats` builds
it with componentize-py (the `plugin` world of tool-api/wit/plugin.wit), then describes,
packages and verifies it. By hand:
    componentize-py -d ../../../tool-api/wit -w plugin componentize app -o text_stats.wasm
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host
from wit_world.imports.types import (
    Content_Text,
    Level,
    PluginInfo,
    SideEffect,
    ToolDefinition,
    ToolError_Failed,
    ToolError_InvalidInput,
    ToolOutput,
)

WORD_STATS_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "The text to count."}},
    "required": ["text"],
    "additionalProperties": False,
}

FILE_STATS_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "A UTF-8 file in the workspace."}
    },
    "required": ["path"],
    "additionalProperties": False,
}


def stats(text: str) -> dict:
    return {
        "lines": len(text.splitlines()),
        "words": len(text.split()),
        "chars": len(text),
    }


def text_output(value: dict) -> ToolOutput:
    return ToolOutput(
        content=[Content_Text(json.dumps(value, sort_keys=True))],
        success=True,
        metadata=json.dumps(value),
    )


class Tools(exports.Tools):
    def describe(self) -> PluginInfo:
        return PluginInfo(
            name="text-stats",
            version="0.1.0",
            tools=[
                ToolDefinition(
                    name="word_stats",
                    description="Counts the lines, words and characters of a text.",
                    input_schema=json.dumps(WORD_STATS_SCHEMA),
                    side_effects=SideEffect.NONE,
                    concurrency_safe=None,
                    timeout_ms=None,
                    path_params=[],
                ),
                ToolDefinition(
                    name="file_stats",
                    description="Counts the lines, words and characters of a workspace file.",
                    input_schema=json.dumps(FILE_STATS_SCHEMA),
                    side_effects=SideEffect.READ,
                    concurrency_safe=None,
                    timeout_ms=None,
                    path_params=["path"],
                ),
            ],
        )

    def execute(self, tool: str, input: str) -> ToolOutput:
        args = json.loads(input)
        if tool == "word_stats":
            return text_output(stats(args["text"]))
        if tool == "file_stats":
            data = host.read_file(args["path"])
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise Err(ToolError_Failed(f"'{args['path']}' is not UTF-8 text ({e.reason} at byte {e.start})"))
            host.log(Level.DEBUG, f"read {len(data)} bytes of {args['path']}")
            return text_output(stats(text))
        raise Err(ToolError_InvalidInput(f"text-stats has no tool '{tool}'"))
