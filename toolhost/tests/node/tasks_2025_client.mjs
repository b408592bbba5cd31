// A 2025-11-25 MCP client that uses the experimental tasks of that revision, written with
// the TypeScript SDK (the copy cargo xtask test installs with server-everything), against
// toolhost. Usage: node tasks_2025_client.mjs SDK_DIR http URL
//                  node tasks_2025_client.mjs SDK_DIR stdio COMMAND ARG...
// Prints one JSON object: what it saw.
const [sdk, mode, target, ...rest] = process.argv.slice(2);
const { Client } = await import(`${sdk}/dist/esm/client/index.js`);
const { ElicitRequestSchema } = await import(`${sdk}/dist/esm/types.js`);
let transport;
if (mode === 'http') {
  const { StreamableHTTPClientTransport } = await import(`${sdk}/dist/esm/client/streamableHttp.js`);
  transport = new StreamableHTTPClientTransport(new URL(target));
} else {
  const { StdioClientTransport } = await import(`${sdk}/dist/esm/client/stdio.js`);
  // The SDK passes a child only HOME, PATH and a few more unless told: this test's own
  // XDG_STATE_HOME keeps the server's pins in the test's workspace.
  transport = new StdioClientTransport({ command: target, args: rest, stderr: 'inherit', env: { ...process.env } });
}
const client = new Client(
  { name: 'tasks-2025-test', version: '1.0.0' },
  { capabilities: { elicitation: {}, tasks: { list: {}, cancel: {} } } },
);
const asked = [];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params.message);
  return { action: 'accept', content: { decision: 'allow' } };
});
await client.connect(transport);
const out = { capabilities: client.getServerCapabilities().tasks ?? null };
const tools = await client.listTools();
out.taskSupport = tools.tools.find((t) => t.name === 'shell')?.execution?.taskSupport ?? null;

// A task to its end, through the SDK's own polling.
const messages = [];
for await (const m of client.experimental.tasks.callToolStream(
  { name: 'shell', arguments: { command: 'sleep 1; echo from-a-2025-task' } },
  undefined,
  { task: { ttl: 60000 } },
)) {
  messages.push({
    type: m.type,
    status: m.task?.status,
    text: m.result?.content?.[0]?.text,
    error: m.error?.message,
  });
}
out.messages = messages;
out.asked = asked;

// A task cancelled while it runs.
const stream = client.experimental.tasks.callToolStream(
  { name: 'shell', arguments: { command: 'sleep 30; echo never' } },
  undefined,
  { task: { ttl: 60000 } },
);
const first = (await stream.next()).value;
out.created = first.type;
const cancelled = await client.experimental.tasks.cancelTask(first.task.taskId);
out.cancelled = cancelled.status;
out.after = (await client.experimental.tasks.getTask(first.task.taskId)).status;
out.listed = (await client.experimental.tasks.listTasks()).tasks.map((t) => t.status);
try {
  await client.experimental.tasks.getTaskResult(first.task.taskId);
  out.resultOfCancelled = 'a result';
} catch (e) {
  out.resultOfCancelled = e.message;
}
// A mounted server's tool that asks in a task of its own (MOUNTED_TOOL, when set): its
// question reaches this client as an elicitation/create.
if (process.env.MOUNTED_TOOL) {
  const seen = [];
  for await (const m of client.experimental.tasks.callToolStream(
    { name: process.env.MOUNTED_TOOL, arguments: { filename: 'notes.txt' } },
    undefined,
    { task: { ttl: 60000 } },
  )) {
    seen.push(m.type === 'result' ? m.result.content[0].text : m.type);
  }
  out.mounted = seen;
  out.askedByMounted = asked.slice(2);
}
console.log(JSON.stringify(out));
await stream.return();
await client.close();
process.exit(0);
