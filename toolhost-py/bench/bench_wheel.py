"""What a call costs through the wheel: `read_file` of a 4 KB file, one call per batch,
through `Host.run` (blocking) and `Host.run_async`, the median of 20 rounds.

    python bench_wheel.py WORKSPACE [CALLS]

Prints one JSON line: {"run_us": …, "run_async_us": …} (microseconds per call). `cargo
xtask bench` runs it beside the same call in Rust and in the spec's Python design.
"""

import asyncio
import json
import os
import statistics
import sys
import time

import toolhost

BLOCK = [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.txt"}}]


def rounds(one_round):
    return statistics.median(one_round() for _ in range(20))


def main() -> None:
    workspace = sys.argv[1]
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    with open(os.path.join(workspace, "a.txt"), "w") as f:
        f.write("x" * 4096)
    with toolhost.Host(workspace=workspace) as host:
        assert not host.run(BLOCK)[0].get("is_error")

        def blocking():
            started = time.perf_counter_ns()
            for _ in range(calls):
                host.run(BLOCK)
            return (time.perf_counter_ns() - started) / calls / 1000

        async def in_loop():
            started = time.perf_counter_ns()
            for _ in range(calls):
                await host.run_async(BLOCK)
            return (time.perf_counter_ns() - started) / calls / 1000

        run_us = rounds(blocking)
        run_async_us = rounds(lambda: asyncio.run(in_loop()))
    print(json.dumps({"run_us": run_us, "run_async_us": run_async_us}))


if __name__ == "__main__":
    main()
