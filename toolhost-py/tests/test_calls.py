"""What a call meets: confirmations through the callback (sync and async), bad blocks as
readable results, plugins and MCP servers as tools, cancellation from asyncio, and Python
threads that go on while tools run."""

import asyncio
import threading
import time

import pytest

import toolhost
from conftest import anthropic_turn, config_allowing, text_of


def write(path, content="x"):
    return anthropic_turn(("write_file", {"path": path, "content": content}))


@pytest.mark.parametrize("answer,written", [("allow", True), ("deny", False), (True, True), (False, False), (toolhost.Decision.ALLOW, True)])
def test_a_write_runs_only_when_the_callback_allows_it(workspace, answer, written):
    with toolhost.Host(workspace=workspace, on_confirm=lambda c: answer) as host:
        (result,) = host.run(write("out.txt"))
    assert (workspace / "out.txt").exists() == written
    assert bool(result.get("is_error")) == (not written)
    if not written:
        assert "denied" in text_of(result).lower()


def test_always_stops_the_asking_for_the_rest_of_the_session(workspace):
    asked = []
    with toolhost.Host(workspace=workspace, on_confirm=lambda c: asked.append(c) or "always") as host:
        host.run(write("a.txt"))
        host.run(write("b.txt"))
    assert len(asked) == 1
    assert (workspace / "b.txt").exists()


def test_without_a_callback_a_write_is_denied_saying_how_to_allow_it(workspace):
    with toolhost.Host(workspace=workspace) as host:
        (result,) = host.run(write("out.txt"))
    assert result["is_error"] is True
    said = text_of(result)
    assert "no on_confirm callback" in said and "[tool_confirmation.per_tool]" in said


def test_a_callback_that_raises_or_answers_nonsense_denies_saying_why(workspace):
    def broken(confirmation):
        raise RuntimeError("the dialog crashed")

    for callback, said in [(broken, "the dialog crashed"), (lambda c: "perhaps", "perhaps")]:
        with toolhost.Host(workspace=workspace, on_confirm=callback) as host:
            (result,) = host.run(write("out.txt"))
        assert result["is_error"] is True
        assert said in text_of(result)
    assert not (workspace / "out.txt").exists()


def test_an_async_callback_runs_on_the_loop_of_run_async(workspace):
    loops = []

    async def ask(confirmation):
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0.01)
        return "allow"

    async def main():
        with toolhost.Host(workspace=workspace, on_confirm=ask) as host:
            results = await host.run_async(write("async.txt"))
        return results, asyncio.get_running_loop()

    (result,), loop = asyncio.run(main())
    assert not result.get("is_error"), result
    assert loops == [loop]
    assert (workspace / "async.txt").exists()


def test_an_async_callback_works_from_the_blocking_run_too(workspace):
    async def ask(confirmation):
        return "allow"

    with toolhost.Host(workspace=workspace, on_confirm=ask) as host:
        (result,) = host.run(write("sync.txt"))
    assert not result.get("is_error"), result


def test_bad_blocks_become_readable_results_and_the_others_run(workspace):
    blocks = [
        {"type": "tool_use", "id": "t1", "name": "no_such_tool", "input": {}},
        {"type": "tool_use", "id": "t2", "name": "read_file", "input": {"path": 42}},
        {"type": "tool_use", "id": "t3", "name": "read_file"},
        {"type": "function", "id": "c4", "function": {"name": "read_file", "arguments": "{not json"}},
        {"type": "tool_result", "tool_use_id": "x"},
        "a string",
        {"type": "tool_use", "id": "t7", "name": "read_file", "input": {"path": "../outside.txt"}},
        {"type": "tool_use", "id": "t8", "name": "read_file", "input": {"path": "README.md"}},
    ]
    with toolhost.Host(workspace=workspace) as host:
        results = host.run(blocks)
    said = [text_of(r) for r in results]
    assert len(results) == len(blocks)
    assert "Tool 'no_such_tool' not found" in said[0] and "read_file" in said[0]
    assert "/path" in said[1]
    assert "path" in said[2]
    assert "not valid JSON" in said[3]
    assert "not a tool call" in said[4] and "not a tool call" in said[5]
    assert "outside" in said[6].lower() or "workspace" in said[6].lower()
    assert all(r.get("is_error") or r.get("role") == "tool" for r in results[:7])
    assert not results[7].get("is_error") and "hello" in said[7]


def test_a_plugin_packages_tools_run_through_the_wheel(workspace, plugins_dir):
    with toolhost.Host(workspace=workspace, plugins=[plugins_dir]) as host:
        names = {t["name"] for t in host.tools()}
        assert "word_count" in names, host.report
        (result,) = host.run(anthropic_turn(("word_count", {"text": "one two three"}))[1:])
    assert not result.get("is_error"), result
    assert "3" in text_of(result)


def test_an_mcp_servers_tools_run_through_the_wheel(workspace, mcp_config):
    # Tools without annotations count as `execute`: asked about, and allowed here.
    with toolhost.Host(workspace=workspace, config=mcp_config, on_confirm=lambda c: "allow") as host:
        names = {t["name"] for t in host.tools()}
        assert {"py__shout", "py__slow_echo"} <= names, host.report
        results = host.run(anthropic_turn(("py__shout", {"text": "hi"}), ("py__slow_echo", {"text": "later"}))[1:])
    assert [text_of(r) for r in results] == ["HI!", "later"], results


def test_cancelling_the_awaiting_task_cancels_the_calls(workspace, tmp_path):
    config = config_allowing(tmp_path, "shell")

    async def main(host):
        task = asyncio.ensure_future(host.run_async(anthropic_turn(("shell", {"command": "sleep 20; touch finished"}))))
        await asyncio.sleep(0.5)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    with toolhost.Host(workspace=workspace, config=config) as host:
        events = host.events()
        took = asyncio.run(main(host))
        failed = next(e for e in events if e["type"] == "tool.failed")
    assert took < 2
    assert failed["error_class"] == "cancelled"
    time.sleep(0.3)
    assert not (workspace / "finished").exists()


def test_python_threads_keep_running_while_a_slow_tool_runs(workspace, tmp_path):
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    with toolhost.Host(workspace=workspace, config=config_allowing(tmp_path, "shell")) as host:
        counter.start()
        host.run(anthropic_turn(("shell", {"command": "sleep 1"})))
        stop.set()
    counter.join()
    # A thread starved by a held GIL would tick a handful of times, not hundreds.
    assert len(ticks) > 200, len(ticks)


def test_the_event_stream_tells_each_step_of_a_call(workspace):
    with toolhost.Host(workspace=workspace) as host:
        events = host.events()
        host.run(anthropic_turn(("read_file", {"path": "README.md"})))
        seen = [next(events)["type"] for _ in range(2)]
    assert seen == ["tool.called", "tool.completed"]


def test_the_async_event_stream_ends_when_the_host_closes(workspace):
    async def main():
        host = toolhost.Host(workspace=workspace)
        events = host.events()
        await host.run_async(anthropic_turn(("list_dir", {"path": "."})))
        host.close()
        return [e["type"] async for e in events]

    assert asyncio.run(main()) == ["tool.called", "tool.completed"]


def test_a_search_finds_the_tool_for_the_words_and_a_found_tool_runs_as_any_other(workspace):
    (workspace / "notes.txt").write_text("hello\n")
    with toolhost.Host(workspace=workspace) as host:
        found = host.search_tools("run a command in a shell", limit=2)
        assert found[0]["name"] == "shell" and len(found) <= 2
        # In the format asked for, whole: what a model API's deferred loading takes.
        (openai,) = host.search_tools("list_dir", limit=1, format="openai")
        assert openai["function"]["name"] == "list_dir"
        assert "parameters" in openai["function"]
        assert host.search_tools("zzqx") == []
        (result,) = host.run(anthropic_turn(("read_file", {"path": "notes.txt"})))
        assert "hello" in text_of(result)
        with pytest.raises(ValueError, match="limit must be at least 1"):
            host.search_tools("file", limit=0)
        with pytest.raises(ValueError, match="unknown format"):
            host.search_tools("file", format="yaml")
