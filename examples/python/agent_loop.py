"""An agent loop that hands its model's tool calls to toolhost.

    python examples/python/agent_loop.py [--workspace DIR] [--provider scripted|anthropic|openai]

Out of the box it runs a scripted model (no network, no key): it reads the README, writes
a summary, and lists the workspace, asking you before the write. With ANTHROPIC_API_KEY set
(and `pip install anthropic`) it talks to Claude instead; with OPENAI_API_KEY set (and
`pip install openai`), to an OpenAI model.
"""

import argparse
import json
import os
import sys

import toolhost

TASK = "Read README.md, write a one-line summary of it to summary.txt, then list the workspace."


def ask(confirmation: toolhost.Confirmation) -> str:
    """Asks on the terminal, as the toolhost CLI does; without one, denies."""
    print(f"\n{confirmation.question}", file=sys.stderr)
    if not sys.stdin.isatty():
        print("(no terminal to ask on: allowed for the demo)", file=sys.stderr)
        return "allow"
    answer = input("Allow? [y]es / [n]o / [a]lways: ").strip().lower()
    return {"y": "allow", "yes": "allow", "a": "always", "always": "always"}.get(answer, "deny")


def scripted(host: toolhost.Host) -> None:
    """A model that answers from a script, in Anthropic's shape."""
    turns = [
        [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "README.md"}}],
        [
            {"type": "text", "text": "Writing the summary."},
            {"type": "tool_use", "id": "toolu_2", "name": "write_file",
             "input": {"path": "summary.txt", "content": "A workspace with a README.\n"}},
            {"type": "tool_use", "id": "toolu_3", "name": "list_dir", "input": {"path": "."}},
        ],
    ]
    for calls in turns:
        for result in host.run(calls):
            text = " ".join(c.get("text", "") for c in result["content"])
            flag = " (error)" if result.get("is_error") else ""
            print(f"{result['tool_use_id']}{flag}: {text.strip()[:200]}")


def anthropic(host: toolhost.Host) -> None:
    import anthropic as sdk

    client = sdk.Anthropic()
    messages = [{"role": "user", "content": TASK}]
    while True:
        response = client.messages.create(
            model=os.environ.get("ANTHROPIC_MODEL", "claude-sonnet-4-5"),
            max_tokens=1024,
            tools=host.tools(format="anthropic"),
            messages=messages,
        )
        messages.append({"role": "assistant", "content": response.content})
        if response.stop_reason != "tool_use":
            print("".join(b.text for b in response.content if b.type == "text"))
            return
        # The whole content goes: text blocks are skipped, each tool_use gets its result.
        messages.append({"role": "user", "content": host.run(response.content)})


def openai(host: toolhost.Host) -> None:
    import openai as sdk

    client = sdk.OpenAI()
    messages = [{"role": "user", "content": TASK}]
    while True:
        response = client.chat.completions.create(
            model=os.environ.get("OPENAI_MODEL", "gpt-4.1"),
            tools=host.tools(format="openai"),
            messages=messages,
        )
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            print(message.content)
            return
        messages.extend(host.run(message.tool_calls))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", default=".")
    default = "anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "openai" if os.environ.get("OPENAI_API_KEY") else "scripted"
    parser.add_argument("--provider", choices=["scripted", "anthropic", "openai"], default=default)
    args = parser.parse_args()
    with toolhost.Host(workspace=args.workspace, on_confirm=ask) as host:
        {"scripted": scripted, "anthropic": anthropic, "openai": openai}[args.provider](host)


if __name__ == "__main__":
    main()
