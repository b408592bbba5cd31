"""Only misuse of the API raises, with an exception named for what went wrong."""

import pytest

import toolhost


def test_a_closed_host_says_so(workspace):
    host = toolhost.Host(workspace=workspace)
    host.close()
    host.close()  # idempotent
    with pytest.raises(toolhost.HostClosedError, match="closed"):
        host.run([])
    with pytest.raises(toolhost.HostClosedError):
        host.tools()


def test_a_missing_workspace_or_a_bad_config_is_a_config_error(tmp_path):
    with pytest.raises(toolhost.ConfigError, match="not a directory"):
        toolhost.Host(workspace=tmp_path / "nope")
    bad = tmp_path / "toolhost.toml"
    bad.write_text("[timeouts]\ndefualt = 5\n")
    with pytest.raises(toolhost.ConfigError, match="defualt"):
        toolhost.Host(workspace=tmp_path, config=bad)
    assert issubclass(toolhost.ConfigError, toolhost.ToolhostError)


def test_wrong_arguments_are_type_and_value_errors(workspace):
    with toolhost.Host(workspace=workspace) as host:
        with pytest.raises(ValueError, match="anthropic"):
            host.tools(format="gemini")
        with pytest.raises(TypeError, match="list of tool call blocks"):
            host.run({"type": "tool_use", "id": "t", "name": "list_dir", "input": {}})
    with pytest.raises(TypeError, match="on_confirm"):
        toolhost.Host(workspace=workspace, on_confirm="allow")
