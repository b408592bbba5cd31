"""The tool dispatcher of toolhost's specification, as its Python design describes it,
written for this project as the peer toolhost's figures are measured against.

It follows the spec's dispatch flow for one call: look the tool up, validate the input
with jsonschema's Draft7Validator, check workspace scoping, apply the confirmation policy
by side-effect class, emit tool.called, make a fresh tool from its factory with a
ToolContext, execute under a timeout (asyncio.wait_for), emit tool.completed or
tool.failed with an error class, and build the canonical ToolResultBlock. File access goes
through a WorkspaceFileAPI that resolves paths under the workspace root (realpath, so `..`
and symbolic links leading outside are refused).

    python spec_dispatcher.py BENCH_DIR [CALLS]

measures a no-op call (a `none` tool whose input schema is the one of toolhost's dispatch
bench) and `read_file` of a 4 KB file; prints one JSON line,
{"noop_us": median µs, "read_file_4k_us": median µs}.
"""

import asyncio
import dataclasses
import json
import os
import statistics
import sys
import time
from enum import Enum
from typing import Callable, Dict, List, Optional

from jsonschema import Draft7Validator


class SideEffect(str, Enum):
    NONE = "none"
    READ = "read"
    WRITE = "write"
    EXECUTE = "execute"
    NETWORK = "network"


class ErrorClass(str, Enum):
    NOT_FOUND = "not_found"
    VALIDATION = "validation_error"
    PERMISSION_DENIED = "permission_denied"
    USER_DENIED = "user_denied"
    TIMEOUT = "timeout"
    EXECUTION = "execution_error"
    CANCELLED = "cancelled"


class ToolError(Exception):
    error_class = ErrorClass.EXECUTION


class WorkspaceEscape(ToolError):
    error_class = ErrorClass.PERMISSION_DENIED


@dataclasses.dataclass
class ToolDefinition:
    name: str
    description: str
    input_schema: dict
    side_effects: SideEffect
    timeout_s: Optional[float] = None


@dataclasses.dataclass
class ToolOutput:
    content: List[dict]
    success: bool = True
    metadata: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ToolResultBlock:
    tool_use_id: str
    content: List[dict]
    is_error: bool = False


class WorkspaceFileAPI:
    def __init__(self, root: str):
        self.workspace_root = os.path.realpath(root)

    def _resolve(self, path: str) -> str:
        joined = path if os.path.isabs(path) else os.path.join(self.workspace_root, path)
        real = os.path.realpath(joined)
        if real != self.workspace_root and not real.startswith(self.workspace_root + os.sep):
            raise WorkspaceEscape(f"path {path!r} is outside the workspace")
        return real

    def read(self, path: str) -> str:
        with open(self._resolve(path), encoding="utf-8") as f:
            return f.read()


@dataclasses.dataclass
class Session:
    session_id: str
    workspace: str


@dataclasses.dataclass
class ToolContext:
    session_id: str
    turn_id: str
    tool_use_id: str
    workspace_path: str
    cancel_event: asyncio.Event
    workspace_files: WorkspaceFileAPI


class ReadFile:
    definition = ToolDefinition(
        name="read_file",
        description="Read a text file of the workspace.",
        input_schema={
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": False,
        },
        side_effects=SideEffect.READ,
    )

    async def execute(self, input: dict, context: ToolContext) -> ToolOutput:
        return ToolOutput(content=[{"type": "text", "text": context.workspace_files.read(input["path"])}])

    async def cancel(self) -> bool:
        return False


class NoOp:
    """The dispatch bench's no-op: three typed fields in, "ok" out."""

    definition = ToolDefinition(
        name="noop",
        description="Do nothing.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "boolean"}},
            "required": ["a"],
            "additionalProperties": False,
        },
        side_effects=SideEffect.NONE,
    )

    async def execute(self, input: dict, context: ToolContext) -> ToolOutput:
        return ToolOutput(content=[{"type": "text", "text": "ok"}])

    async def cancel(self) -> bool:
        return False


#: Side-effect classes that run without asking.
AUTO = {SideEffect.NONE, SideEffect.READ}


class ToolDispatcher:
    def __init__(self) -> None:
        self._factories: Dict[str, Callable[[], object]] = {}
        self._definitions: Dict[str, ToolDefinition] = {}
        self._validators: Dict[str, Draft7Validator] = {}
        self._subscribers: List[Callable[[dict], None]] = []

    def register(self, factory: Callable[[], object]) -> None:
        definition = factory().definition
        Draft7Validator.check_schema(definition.input_schema)
        self._factories[definition.name] = factory
        self._definitions[definition.name] = definition
        self._validators[definition.name] = Draft7Validator(definition.input_schema)

    def subscribe(self, callback: Callable[[dict], None]) -> None:
        self._subscribers.append(callback)

    def _emit(self, kind: str, tool_use_id: str, name: str, **fields) -> None:
        event = {"type": kind, "tool_use_id": tool_use_id, "tool_name": name, "at": time.time(), **fields}
        for callback in self._subscribers:
            callback(event)

    async def dispatch(self, tool_use: dict, session: Session) -> ToolResultBlock:
        call_id, name, args = tool_use["id"], tool_use["name"], tool_use.get("input", {})
        definition = self._definitions.get(name)
        if definition is None:
            self._emit("tool.failed", call_id, name, error_class=ErrorClass.NOT_FOUND)
            return self._error(call_id, f"Tool {name!r} not found. Available: {', '.join(sorted(self._definitions))}")
        errors = sorted(self._validators[name].iter_errors(args), key=lambda e: list(e.path))
        if errors:
            self._emit("tool.input_invalid", call_id, name)
            return self._error(call_id, "; ".join(f"/{'/'.join(map(str, e.path))}: {e.message}" for e in errors))
        files = WorkspaceFileAPI(session.workspace)
        if isinstance(args.get("path"), str):
            try:
                files._resolve(args["path"])
            except WorkspaceEscape as e:
                self._emit("tool.failed", call_id, name, error_class=e.error_class)
                return self._error(call_id, str(e))
        if definition.side_effects not in AUTO:
            self._emit("tool.failed", call_id, name, error_class=ErrorClass.USER_DENIED)
            return self._error(call_id, "User denied this operation.")
        self._emit("tool.called", call_id, name)
        tool = self._factories[name]()
        context = ToolContext(session.session_id, "turn-1", call_id, files.workspace_root, asyncio.Event(), files)
        timeout = definition.timeout_s or (600.0 if definition.side_effects in (SideEffect.EXECUTE, SideEffect.NETWORK) else 60.0)
        started = time.perf_counter()
        try:
            output = await asyncio.wait_for(tool.execute(args, context), timeout)
        except asyncio.TimeoutError:
            self._emit("tool.failed", call_id, name, error_class=ErrorClass.TIMEOUT)
            return self._error(call_id, f"Tool {name!r} timed out after {timeout} s")
        except ToolError as e:
            self._emit("tool.failed", call_id, name, error_class=e.error_class)
            return self._error(call_id, str(e))
        except Exception as e:  # an unexpected failure: logged in full, redacted for the model
            self._emit("tool.failed", call_id, name, error_class=ErrorClass.EXECUTION, detail=repr(e))
            return self._error(call_id, f"Tool {name!r} failed")
        self._emit("tool.completed", call_id, name, duration_ms=(time.perf_counter() - started) * 1000)
        return ToolResultBlock(call_id, output.content, is_error=not output.success)

    @staticmethod
    def _error(call_id: str, message: str) -> ToolResultBlock:
        return ToolResultBlock(call_id, [{"type": "text", "text": message}], is_error=True)


async def measure(workspace: str, calls: int, block: dict) -> float:
    """Median µs per call of `block` over 20 rounds of `calls` calls."""
    dispatcher = ToolDispatcher()
    dispatcher.register(ReadFile)
    dispatcher.register(NoOp)
    seen = []
    dispatcher.subscribe(seen.append)
    session = Session("bench", workspace)
    rounds = []
    for _ in range(20):
        started = time.perf_counter_ns()
        for _ in range(calls):
            result = await dispatcher.dispatch(block, session)
        rounds.append((time.perf_counter_ns() - started) / calls / 1000)
        assert not result.is_error, result
        seen.clear()
    return statistics.median(rounds)


def main() -> None:
    workspace = sys.argv[1]
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    with open(os.path.join(workspace, "a.txt"), "w") as f:
        f.write("x" * 4096)
    noop = {"type": "tool_use", "id": "toolu_1", "name": "noop", "input": {"a": "x", "b": 1, "c": True}}
    read = {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {"path": "a.txt"}}
    print(json.dumps({
        "noop_us": asyncio.run(measure(workspace, calls, noop)),
        "read_file_4k_us": asyncio.run(measure(workspace, calls, read)),
    }))


if __name__ == "__main__":
    main()
