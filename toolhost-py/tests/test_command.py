"""The wheel's `toolhost` command: the binary's CLI, from `pip install` or `uvx` alone."""

import asyncio
import contextlib
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import toolhost
from conftest import required

BIN = Path(sys.executable).parent


def command(name="toolhost"):
    path = BIN / name
    assert path.exists(), f"the wheel installed no {name} command into {BIN}"
    return str(path)


def run(*args, name="toolhost", cwd=None):
    return subprocess.run(
        [command(name), *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


@pytest.mark.parametrize("name", ["toolhost", "toolhost-mcp"])
def test_the_command_is_installed_under_both_names_and_tells_its_version(name):
    out = run("--version", name=name)
    assert out.returncode == 0, out.stderr
    assert toolhost.__version__ in out.stdout


def test_python_dash_m_toolhost_is_the_same_command():
    out = subprocess.run(
        [sys.executable, "-m", "toolhost", "--version"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert toolhost.__version__ in out.stdout


def test_a_mistyped_option_is_bad_usage_with_the_binarys_exit_status():
    out = run("--no-such-option")
    assert out.returncode == 2
    assert "--no-such-option" in out.stderr


def test_call_runs_a_tool_and_a_failed_call_exits_1(workspace, tmp_path):
    config = tmp_path / "toolhost.toml"
    config.write_text("")
    ok = run("--config", str(config), "call", "read_file", "--input", '{"path": "README.md"}',
             "--workspace", str(workspace))
    assert ok.returncode == 0, ok.stderr
    assert "hello from the workspace" in ok.stdout
    missing = run("--config", str(config), "call", "read_file", "--input", '{"path": "nope.md"}',
                  "--workspace", str(workspace))
    assert missing.returncode == 1, missing.stdout + missing.stderr


def test_policies_decide_the_wheels_calls_naming_the_policy(workspace, tmp_path):
    (tmp_path / "calls.cedar").write_text(
        'permit(principal, action, resource);\n\n'
        '@id("no-readme")\n'
        'forbid(principal, action == Action::"read_file", resource)\n'
        '  when { context.arguments.path like "*README.md" };\n'
    )
    config = tmp_path / "toolhost.toml"
    config.write_text('[policies]\nfiles = ["calls.cedar"]\n')
    refused = run("--config", str(config), "call", "read_file", "--input",
                  '{"path": "README.md"}', "--workspace", str(workspace))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert 'policy "no-readme"' in refused.stdout + refused.stderr
    listed = run("--config", str(config), "call", "list_dir", "--input", "{}",
                 "--workspace", str(workspace))
    assert listed.returncode == 0, listed.stderr
    assert "README.md" in listed.stdout


def test_plugins_in_worker_processes_start_from_the_wheel(workspace, plugins_dir, tmp_path):
    # Isolation `process`: the worker is `python -m toolhost._worker`, not this command.
    config = tmp_path / "toolhost.toml"
    config.write_text('plugin_isolation = "process"\n')
    out = run("--config", str(config), "--plugins", plugins_dir, "call", "word_count",
              "--input", '{"text": "one two three"}', "--workspace", str(workspace))
    assert out.returncode == 0, out.stderr
    assert "3" in out.stdout


def test_an_authors_commands_run_from_the_wheel(plugins_dir, tmp_path):
    # `plugin verify` loads the library in a child process: `python -m toolhost __verify`.
    archive = next(Path(plugins_dir).glob("*.tar.gz"))
    copy = tmp_path / archive.name
    shutil.copy(archive, copy)
    key = tmp_path / "signing.key"
    made = run("plugin", "keygen", str(key))
    assert made.returncode == 0, made.stderr
    signed = run("plugin", "sign", str(copy), "--key", str(key))
    assert signed.returncode == 0, signed.stderr
    verified = run("plugin", "verify", str(copy))
    assert verified.returncode == 0, verified.stderr
    assert "signature: valid" in verified.stdout, verified.stdout
    assert "word_count" in verified.stdout and "verdict: OK" in verified.stdout, verified.stdout


def served(command_line, env=None):
    """The tool names `serve --mcp` lists and its `read_file` of README.md, asked by the
    official Python SDK's client over stdio."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=command_line[0], args=command_line[1:], env=env)

    async def session():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                listed = await client.list_tools()
                called = await client.call_tool("read_file", {"path": "README.md"})
                return [t.name for t in listed.tools], called.model_dump(by_alias=True)

    return asyncio.run(asyncio.wait_for(session(), 90))


def serve_args(workspace, tmp_path):
    config = tmp_path / "toolhost.toml"
    config.write_text("")
    return ["serve", "--mcp", "--workspace", str(workspace), "--config", str(config)]


def test_serve_mcp_answers_the_official_python_sdk_client(workspace, tmp_path):
    names, result = served([command("toolhost-mcp"), *serve_args(workspace, tmp_path)])
    assert "read_file" in names
    assert not result.get("isError"), result
    assert "hello from the workspace" in json.dumps(result)


@contextlib.contextmanager
def package_index(root, wheel):
    """A package index as PyPI serves one (PEP 503's simple API, over HTTP on loopback)
    holding only `wheel`; yields its URL and the paths it was asked for."""
    files = root / "files"
    files.mkdir(parents=True)
    shutil.copy(wheel, files / wheel.name)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    project = root / "simple" / "toolhost-mcp"
    project.mkdir(parents=True)
    (root / "simple" / "index.html").write_text('<a href="toolhost-mcp/">toolhost-mcp</a>\n')
    (project / "index.html").write_text(
        f'<a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>\n'
    )
    asked = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self):
            asked.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple", asked
    finally:
        server.shutdown()
        server.server_close()


def test_uvx_runs_the_wheel_from_a_package_index_as_an_mcp_clients_config_would(workspace, tmp_path):
    # `uvx toolhost-mcp serve --mcp`: the wheel found in a package index that stands in for
    # PyPI and installed into a fresh environment of uv's; no other network.
    wheel = Path(required("TOOLHOST_TEST_WHEEL"))
    uvx = command("uvx")
    env = {
        **os.environ,
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "UV_TOOL_DIR": str(tmp_path / "uv-tools"),
        "UV_NO_CONFIG": "1",
    }
    env.pop("VIRTUAL_ENV", None)
    with package_index(tmp_path / "index", wheel) as (url, asked):
        line = [uvx, "--default-index", url, "toolhost-mcp"]
        names, result = served([*line, *serve_args(workspace, tmp_path)], env=env)
        assert "read_file" in names
        assert "hello from the workspace" in json.dumps(result)
        version = subprocess.run([*line, "--version"], capture_output=True, text=True, env=env, timeout=120)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"toolhost {toolhost.__version__}"
    # What uv installed came from the index: the wheel under test, not one from elsewhere.
    assert f"/files/{wheel.name}" in asked, asked
