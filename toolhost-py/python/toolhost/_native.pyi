"""The native module of the toolhost wheel: use the API of ``toolhost`` instead."""

from typing import Any, Callable, List, Optional

__version__: str

class ToolhostError(Exception):
    """Misuse of the toolhost API (a tool's failure is a result, never this)."""

class ConfigError(ToolhostError):
    """The configuration, workspace or plugin directories cannot make a host."""

class HostClosedError(ToolhostError):
    """The host was closed; make a new one."""

class Confirmation:
    """What the user is asked: the call that needs their answer."""

    question: str
    """The question, as the toolhost CLI asks it on a terminal."""
    tool: str
    """The tool's name."""
    side_effects: str
    """Its class: ``none``, ``read``, ``write``, ``execute`` or ``network``."""
    input_summary: str
    """A short rendering of the input."""
    modifications: List[str]
    """What the call would change (``will modify src/a.rs``, …)."""
    reason: str
    """The configuration key that asks (``tool_confirmation.default.write``, …)."""
    tool_use_id: str
    """The id of the tool call."""
    mid_call: bool
    """Asked by the tool while it runs, not by the policy before it starts."""

class NativeBatch:
    def cancel(self) -> None: ...

class NativeEvents:
    def next(self, timeout: float) -> Optional[dict]: ...
    def close(self) -> None: ...

class NativeHost:
    def __init__(
        self,
        workspace: str,
        config: Optional[str],
        plugins: List[str],
        on_confirm: Optional[Callable[[Confirmation], Any]],
        session: str,
        worker: List[str],
    ) -> None: ...
    @property
    def report(self) -> List[str]: ...
    def tools(self, format: str) -> List[dict]: ...
    def search_tools(self, query: str, limit: int, format: str) -> List[dict]: ...
    def run(self, blocks: List[Any]) -> List[dict]: ...
    def start(self, blocks: List[Any], event_loop: Any, future: Any, resolve: Any) -> NativeBatch: ...
    def cancel(self) -> int: ...
    def events(self) -> NativeEvents: ...
    def close(self) -> None: ...

def plugin_worker(args: List[str]) -> None: ...
def cli(args: List[str], worker: List[str], this: List[str]) -> None: ...
