"""The example under examples/python runs as a user runs it, with its scripted model."""

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python" / "agent_loop.py"


def test_the_example_agent_loop_runs_with_its_scripted_model(workspace):
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--workspace", str(workspace), "--provider", "scripted"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "toolu_1: hello from the workspace" in done.stdout
    assert "toolu_3" in done.stdout and "summary.txt" in done.stdout
    assert "'write_file' (write) asks to run" in done.stderr
    assert (workspace / "summary.txt").read_text() == "A workspace with a README.\n"
