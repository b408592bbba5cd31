#!/usr/bin/env node
// A dependency-free MCP server over stdio (2025-11-25): one tool, `node_version`, which
// answers with the Node.js version running it and where its executable lives.
const readline = require("node:readline");

const send = (message) => process.stdout.write(JSON.stringify(message) + "\n");

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  let m;
  try {
    m = JSON.parse(line);
  } catch {
    return;
  }
  if (m.id === undefined) return;
  let result;
  if (m.method === "initialize") {
    result = {
      protocolVersion: "2025-11-25",
      capabilities: { tools: {} },
      serverInfo: { name: "local-mcp", version: "1.0.0" },
    };
  } else if (m.method === "tools/list") {
    result = {
      tools: [
        {
          name: "node_version",
          description: "The Node.js version running this server, and its executable.",
          inputSchema: { type: "object", properties: {} },
          annotations: { readOnlyHint: true },
        },
      ],
    };
  } else if (m.method === "tools/call") {
    result = {
      content: [{ type: "text", text: `${process.version} ${process.execPath}` }],
      isError: false,
    };
  } else {
    send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: `no method ${m.method}` } });
    return;
  }
  send({ jsonrpc: "2.0", id: m.id, result });
});
