"""toolhost: run an LLM agent's tool calls safely, from Python.

Hand toolhost the tool calls your model answered with; get back the results to send it::

    import toolhost

    def ask(confirmation: toolhost.Confirmation) -> str:
        print(confirmation.question)
        return "allow" if input("allow? [y/N] ") == "y" else "deny"

    with toolhost.Host(workspace="ws", on_confirm=ask) as host:
        tools = host.tools(format="anthropic")        # or "openai", "openai_responses", "mcp"
        ...                                            # the model answers with tool_use blocks
        results = host.run(tool_use_blocks)            # tool_result blocks, in order

Every call is validated against its tool's JSON Schema, kept inside the workspace, asked
about before side effects (``on_confirm``), run concurrently where that is safe, and ends in
a result: a tool's failure, an unknown tool or a malformed block is a result the model
reads (``is_error``), never an exception. Exceptions are for misuse of this API:
:class:`ConfigError`, :class:`HostClosedError`, ``TypeError`` and ``ValueError``.

The host is made from the same configuration as the ``toolhost`` CLI (``toolhost.toml``:
plugin directories, MCP servers, the confirmation policy, timeouts).
"""

from __future__ import annotations

import asyncio
import enum
import os
import sys
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Sequence,
    Union,
)

from . import _native
from ._native import Confirmation, ConfigError, HostClosedError, ToolhostError

__all__ = [
    "Host",
    "Events",
    "Decision",
    "Confirmation",
    "ToolhostError",
    "ConfigError",
    "HostClosedError",
]

__version__: str = _native.__version__


class Decision(str, enum.Enum):
    """An answer to a confirmation: run this call, do not, or run this tool without asking
    for the rest of the session."""

    ALLOW = "allow"
    DENY = "deny"
    ALWAYS = "always"


#: What ``on_confirm`` may answer: a :class:`Decision`, ``"allow"`` / ``"deny"`` /
#: ``"always"``, or a bool; from a plain function or a coroutine function.
Answer = Union[Decision, str, bool]
OnConfirm = Callable[[Confirmation], Union[Answer, Awaitable[Answer]]]

Block = Union[Dict[str, Any], Any]
Result = Dict[str, Any]


def _as_dict(block: Any) -> Any:
    """A block as a dict: provider SDK objects (pydantic models) are dumped."""
    if isinstance(block, dict):
        return block
    for dump in ("model_dump", "to_dict", "dict"):
        method = getattr(block, dump, None)
        if callable(method):
            try:
                return method()
            except TypeError:
                continue
    return block


def _blocks(blocks: Iterable[Block]) -> List[Any]:
    if isinstance(blocks, (str, bytes, dict)):
        raise TypeError(
            "run() takes a list of tool call blocks (a model's tool_use blocks or tool calls), not one block"
        )
    return [_as_dict(b) for b in blocks]


def _resolve(future: "asyncio.Future[Any]", value: Any) -> None:
    if future.done():
        return
    if isinstance(value, BaseException):
        future.set_exception(value)
    else:
        future.set_result(value)


def _worker_command() -> List[str]:
    """How a plugin worker (isolation ``process``) starts: this interpreter, this package."""
    return [sys.executable, "-m", "toolhost._worker"]


class Host:
    """The tools of a workspace, as a toolhost configuration describes them.

    :param workspace: the directory the tools are confined to (it must exist).
    :param config: a ``toolhost.toml``; default: ``./toolhost.toml``, else the user's
        config directory, else the defaults.
    :param on_confirm: asked before a call the policy wants confirmed (by default writes,
        commands and network access); gets a :class:`Confirmation` and answers
        ``"allow"``, ``"deny"`` or ``"always"``. Without it, such calls are denied, and
        their results say why.
    :param plugins: more plugin directories, besides the configuration's ``plugin_dirs``.
    :param session: the session id, in events and logs.

    Use it as a context manager, or call :meth:`close`: closing cancels what still runs and
    stops its plugin workers and MCP servers.
    """

    def __init__(
        self,
        workspace: Union[str, "os.PathLike[str]"] = ".",
        config: Optional[Union[str, "os.PathLike[str]"]] = None,
        *,
        on_confirm: Optional[OnConfirm] = None,
        plugins: Sequence[Union[str, "os.PathLike[str]"]] = (),
        session: str = "python",
    ) -> None:
        if on_confirm is not None and not callable(on_confirm):
            raise TypeError("on_confirm must be a function (or coroutine function) of a Confirmation")
        self._native = _native.NativeHost(
            os.fspath(workspace),
            None if config is None else os.fspath(config),
            [os.fspath(p) for p in plugins],
            on_confirm,
            session,
            _worker_command(),
        )

    def __enter__(self) -> "Host":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Cancels what still runs, stops the plugin workers and MCP servers. Idempotent."""
        self._native.close()

    @property
    def report(self) -> List[str]:
        """One line per plugin package and MCP server: loaded (with its tools) or refused
        (with why)."""
        return self._native.report

    def tools(self, format: str = "anthropic") -> List[Dict[str, Any]]:
        """The tool definitions, ready to put in a request.

        :param format: ``"anthropic"`` (Messages ``tools``), ``"openai"`` (Chat
            Completions function tools), ``"openai_responses"`` (Responses function tools)
            or ``"mcp"`` (``tools/list`` entries).
        """
        return self._native.tools(format)

    def search_tools(
        self, query: str, limit: int = 5, format: str = "anthropic"
    ) -> List[Dict[str, Any]]:
        """The tools that best match ``query`` (what the model wants done, in words, or a
        tool's name), best first, at most ``limit``, as :meth:`tools` gives them: for an
        agent that sends its model a few tools and finds the rest when asked (with a model
        API's deferred tool loading, or a search tool of its own). A found tool's call runs
        with :meth:`run` as any other. With ``[mcp.discovery] model`` configured it ranks
        by meaning too, and the first search starts a thread in this process that encodes
        the model's vocabulary ahead of later queries (a core's minute or so, once per
        ``Host``; about 40 MB).
        """
        return self._native.search_tools(query, limit, format)

    def run(self, blocks: Iterable[Block]) -> List[Result]:
        """Runs the tool calls of one model message and returns their results, in order.

        ``blocks`` are the model's calls as the SDKs return them (dicts or SDK objects):
        Anthropic ``tool_use`` blocks, OpenAI Chat Completions ``tool_calls``, or OpenAI
        Responses ``function_call`` items; each result has the matching shape
        (``tool_result``, a ``tool`` message, ``function_call_output``). Calls that may run
        together do; the others run in order. Python threads go on meanwhile (the GIL is
        released while tools run).
        """
        return self._native.run(_blocks(blocks))

    async def run_async(self, blocks: Iterable[Block]) -> List[Result]:
        """:meth:`run` for asyncio: the event loop goes on while the tools run, an async
        ``on_confirm`` runs on it, and cancelling the awaiting task cancels the calls."""
        loop = asyncio.get_running_loop()
        future: "asyncio.Future[List[Result]]" = loop.create_future()
        batch = self._native.start(_blocks(blocks), loop, future, _resolve)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            batch.cancel()
            raise

    def cancel(self) -> int:
        """Cancels every call of the session that is running (a user's interrupt); returns
        how many were."""
        return self._native.cancel()

    def events(self) -> "Events":
        """The session's events from now on (``tool.called``, ``tool.completed``,
        ``tool.failed``, ``tool.confirmation_requested``, …), as dicts: iterate it, or
        ``async for`` over it."""
        return Events(self._native.events())


_ENDED = object()


def _next_or_end(native: Any, timeout: float) -> Any:
    # StopIteration cannot cross an executor's future: the end is a value here.
    try:
        return native.next(timeout)
    except StopIteration:
        return _ENDED


class Events:
    """The events of a host's session, as they come: an iterator and an async iterator of
    dicts, ending when the host is closed or :meth:`close` is called."""

    #: How long one wait for an event lasts before a check for closing, in seconds.
    POLL = 0.25

    def __init__(self, native: Any) -> None:
        self._native = native

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return self

    def __next__(self) -> Dict[str, Any]:
        while True:
            event = self._native.next(self.POLL)
            if event is not None:
                return event

    def __aiter__(self) -> AsyncIterator[Dict[str, Any]]:
        return self

    async def __anext__(self) -> Dict[str, Any]:
        loop = asyncio.get_running_loop()
        while True:
            event = await loop.run_in_executor(None, _next_or_end, self._native, self.POLL)
            if event is _ENDED:
                raise StopAsyncIteration
            if event is not None:
                return event

    def close(self) -> None:
        """Stops following the events."""
        self._native.close()
