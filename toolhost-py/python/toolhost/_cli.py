"""The wheel's ``toolhost`` command (also ``toolhost-mcp``, the wheel's name, for
``uvx toolhost-mcp serve --mcp``; and ``python -m toolhost``): the CLI of the ``toolhost``
binary, every subcommand, run by the native module this wheel already carries.
"""

import os
import signal
import sys


def main() -> None:
    # Ctrl-C stops the command as it stops the binary: Python's own handler only sets a
    # flag, which nothing reads while the command runs.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    from toolhost import _native

    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "toolhost"
    if name in ("__main__.py", "-m", "-c"):
        name = "toolhost"
    _native.cli(
        [name, *sys.argv[1:]],
        [sys.executable, "-m", "toolhost._worker"],
        [sys.executable, "-m", "toolhost"],
    )


if __name__ == "__main__":
    main()
