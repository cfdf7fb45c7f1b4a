// The official TypeScript SDK (1.x, as hosts and agent frameworks embed it) against Runway:
// it opens with the 2025 initialize handshake. RUNWAY_URL names the endpoint (run.sh starts
// `runway serve` with this directory's Workflows and tokens, or the e2e tier points it at an
// operator replica on the real control plane); SDK_CACHE is where the pinned
// SDK is installed.
import assert from "node:assert/strict";
import { test } from "node:test";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const cache = createRequire(join(process.env.SDK_CACHE, "package.json"));
const load = (name) => import(pathToFileURL(cache.resolve(name)).href);
const { Client } = await load("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = await load("@modelcontextprotocol/sdk/client/streamableHttp.js");
const types = await load("@modelcontextprotocol/sdk/types.js");

const URL_ = new URL(process.env.RUNWAY_URL);
// A caller, and someone who may list every Run of the namespace (run.sh's auth file, or the
// e2e tier's users).
const ALICE = process.env.RUNWAY_TOKEN || "alice-token-0123456789abcdef";
const BOB = process.env.RUNWAY_LISTER_TOKEN || "bob-token-0123456789abcdef";
const PATIENCE = 20_000;

async function connect(token, capabilities = {}, setup = () => {}) {
  const client = new Client({ name: "runway-sdk-test", version: "1.0.0" }, { capabilities });
  setup(client);
  const transport = new StreamableHTTPClientTransport(URL_, {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  return client;
}

/** The Runs of `workflow` that `client` may see, through Runway's own list tool. */
async function runsOf(client, workflow) {
  const r = await client.callTool({ name: "runway_list_runs", arguments: { workflow } });
  return r.structuredContent.runs;
}

/** Poll `check` (an MCP read) until it returns something truthy. */
async function eventually(what, check) {
  const until = Date.now() + PATIENCE;
  for (;;) {
    const got = await check();
    if (got) return got;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test("connects with initialize and lists the Workflows as tools", async () => {
  const client = await connect(ALICE);
  assert.equal(client.getServerVersion().name, "runway");
  const { tools } = await client.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.equal(byName.steps.description, 'Three short steps, then "done".');
  assert.equal(byName.steps.execution.taskSupport, "forbidden");
  assert.equal(byName.nap.execution.taskSupport, "optional");
  await client.ping();
  await client.setLoggingLevel("info");
  await client.close();
});

test("a blocking call streams progress and returns the result", async () => {
  const client = await connect(ALICE);
  const progress = [];
  const result = await client.callTool({ name: "steps", arguments: {} }, undefined, {
    onprogress: (p) => progress.push(p.progress),
  });
  assert.equal(result.content[0].text, "done");
  assert.ok(progress.length >= 2, `progress: ${progress}`);
  assert.deepEqual([...progress].sort((a, b) => a - b), progress);
  await client.close();
});

test("an input step is answered through the client's elicitation handler", async () => {
  const asked = [];
  const client = await connect(ALICE, { elicitation: {} }, (c) =>
    c.setRequestHandler(types.ElicitRequestSchema, async (req) => {
      asked.push(req.params.message);
      return { action: "accept", content: { name: "Ada" } };
    }),
  );
  const result = await client.callTool({ name: "ask-name", arguments: {} });
  assert.equal(result.content[0].text, "hello Ada");
  assert.deepEqual(asked, ["Your name?"]);
  await client.close();
});

test("a sample step is answered through the client's sampling handler", async () => {
  const client = await connect(ALICE, { sampling: {} }, (c) =>
    c.setRequestHandler(types.CreateMessageRequestSchema, async (req) => {
      assert.equal(req.params.maxTokens, 10);
      return { role: "assistant", content: { type: "text", text: "teal" }, model: "test", stopReason: "endTurn" };
    }),
  );
  const result = await client.callTool({ name: "ask-model", arguments: {} });
  assert.equal(result.content[0].text, "the model said teal");
  await client.close();
});

test("a call the client drops cancels its Run", async () => {
  const client = await connect(ALICE);
  const before = new Set((await runsOf(client, "nap")).map((r) => r.taskId));
  const abort = new AbortController();
  const call = client.callTool({ name: "nap", arguments: {} }, undefined, {
    signal: abort.signal,
    onprogress: () => abort.abort(),
  });
  await assert.rejects(call);
  const run = await eventually("the dropped call's Run to be cancelled", async () => {
    const fresh = (await runsOf(client, "nap")).find((r) => !before.has(r.taskId));
    return fresh && fresh.phase === "Cancelled" ? fresh : null;
  });
  assert.equal(run.phase, "Cancelled");
  await client.close();
});

test("tasks: created, followed to the result, listed, cancelled", async () => {
  const client = await connect(ALICE, { tasks: {} });
  await client.listTools(); // the SDK learns which tools run as tasks
  const seen = [];
  let taskId;
  for await (const message of client.experimental.tasks.callToolStream({ name: "quick", arguments: {} })) {
    seen.push(message.type);
    if (message.type === "taskCreated") taskId = message.task.taskId;
    if (message.type === "result") assert.equal(message.result.content[0].text, "quick done");
    if (message.type === "error") throw message.error;
  }
  assert.equal(seen[0], "taskCreated");
  assert.equal(seen.at(-1), "result");
  assert.match(taskId, /^quick-[a-z2-7]{26}$/);
  const got = await client.experimental.tasks.getTask(taskId);
  assert.equal(got.status, "completed");

  const created = await client.request(
    { method: "tools/call", params: { name: "nap", arguments: {}, task: { ttl: 60_000 } } },
    types.CreateTaskResultSchema,
  );
  const napping = created.task.taskId;
  assert.equal(created.task.status, "working");
  const { tasks } = await client.experimental.tasks.listTasks();
  const listed = tasks.map((t) => t.taskId);
  assert.ok(listed.includes(taskId) && listed.includes(napping), `${listed}`);
  await client.experimental.tasks.cancelTask(napping);
  await eventually("the cancelled task to end", async () => {
    const t = await client.experimental.tasks.getTask(napping);
    return t.status === "cancelled";
  });

  // An operator who may list Runs sees them too.
  const bob = await connect(BOB, { tasks: {} });
  const bobs = (await bob.experimental.tasks.listTasks()).tasks.map((t) => t.taskId);
  assert.ok(bobs.includes(napping), "bob may list every Run");
  await bob.close();
  await client.close();
});
