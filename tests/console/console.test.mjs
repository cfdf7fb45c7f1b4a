// The web console and the MCP Apps view, driven in headless Chromium against `runway serve`
// with the Workflows and tokens of this directory. Screenshots go to target/console/.
//
// People: alice (dev) requests releases, olga (ops) approves them, mallory (dev) may read Runs
// in team-a but requested none and is asked nothing, sam (sre) may list every Run.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
// Packages come from the cache run.sh installs them into, not from beside this file.
const cache = createRequire(join(process.env.CONSOLE_CACHE || join(root, ".cache", "console"), "package.json"));
const load = (name) => import(pathToFileURL(cache.resolve(name)).href);
const { chromium } = (await load("playwright-core")).default;
const apps = await load("@modelcontextprotocol/ext-apps/app-bridge");
const runway = process.env.RUNWAY_BIN || join(root, "target", "debug", "runway");
const port = await freePort();
const base = `http://127.0.0.1:${port}`;
const shots = join(root, "target", "console");
const TOKENS = {
  alice: "alice-token-0123456789abcdef",
  olga: "olga-token-0123456789abcdef",
  mallory: "mallory-token-0123456789abcdef",
  sam: "sam-token-0123456789abcdef",
};
const TASKS = { extensions: { "io.modelcontextprotocol/tasks": {} } };
const UI = {
  extensions: {
    "io.modelcontextprotocol/tasks": {},
    "io.modelcontextprotocol/ui": { mimeTypes: [apps.RESOURCE_MIME_TYPE] },
  },
};
const WAIT = 15_000;

// ---- the server ----------------------------------------------------------------------------

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

const work = mkdtempSync(join(tmpdir(), "runway-console-"));
const log = openSync(join(work, "server.log"), "w");
const server = spawn(runway, [
  "serve", "--workflows", join(here, "workflows"), "--db", join(work, "runs.db"),
  "--listen", `127.0.0.1:${port}`, "--auth-file", join(here, "auth.yaml"),
], { stdio: ["ignore", log, log] });
let serverExit = null;
server.on("exit", (code) => { serverExit = code; });

async function healthy() {
  for (let i = 0; i < 200; i++) {
    if (serverExit !== null) throw new Error(`runway serve exited with ${serverExit}`);
    try {
      if ((await fetch(`${base}/healthz`)).ok) return;
    } catch { /* not listening yet */ }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("runway serve did not become healthy");
}

/** One MCP request as `who`; the JSON-RPC response. */
async function mcp(who, method, params, name, caps = TASKS) {
  const headers = {
    "Content-Type": "application/json",
    Accept: "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": method,
    Authorization: `Bearer ${TOKENS[who]}`,
  };
  if (name) headers["Mcp-Name"] = name;
  const body = {
    jsonrpc: "2.0", id: 1, method,
    params: {
      ...params,
      _meta: {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
      },
    },
  };
  const res = await fetch(`${base}/namespaces/team-a/mcp`, { method: "POST", headers, body: JSON.stringify(body) });
  return res.json();
}

async function call(who, tool, args, caps = TASKS) {
  const r = await mcp(who, "tools/call", { name: tool, arguments: args }, tool, caps);
  assert.ok(r.result, JSON.stringify(r));
  return r.result;
}

async function task(who, taskId) {
  const r = await mcp(who, "tasks/get", { taskId }, taskId);
  assert.ok(r.result, JSON.stringify(r));
  return r.result;
}

// ---- the browser ---------------------------------------------------------------------------

let browser = null;
const launch = () => chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});

async function signedIn(who) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.errors = errors;
  await page.goto(`${base}/ui/`);
  await page.fill("#token", TOKENS[who]);
  await page.click("button[type=submit]");
  await page.waitForSelector(`.who:text-is("${who}")`, { timeout: WAIT });
  // The page's first look, before the token, was answered 401 on purpose (it tells a server
  // without authentication from one with it); from here on any error is a fault.
  errors.length = 0;
  return page;
}

async function shot(page, name) {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

let failures = 0;
async function test(name, body) {
  try {
    await body();
    console.log(`ok - ${name}`);
  } catch (e) {
    failures++;
    console.log(`not ok - ${name}\n  ${String(e.stack || e).split("\n").join("\n  ")}`);
  }
}

// The list is busy from a filter's change until the answer to the newest ask is drawn.
async function settled(page) {
  await page.locator("#runs:not([aria-busy])").waitFor({ timeout: WAIT });
}

function awaiting(runs, taskId) {
  return runs.find((r) => r.taskId === taskId);
}

// ---- the tests ---------------------------------------------------------------------------------

mkdirSync(shots, { recursive: true });
try {
  await healthy();
  browser = await launch();

  await test("the console needs a valid token, and says so", async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(`${base}/ui/`);
    await page.fill("#token", "not-a-token");
    await page.click("button[type=submit]");
    await page.waitForSelector("text=That token was not accepted.", { timeout: WAIT });
    await shot(page, "0-sign-in-refused");
    await context.close();
  });

  let release;
  await test("an approver sees a waiting Run appear live, answers it, and sees it complete", async () => {
    const page = await signedIn("olga");
    await page.waitForSelector("#runs .empty", { timeout: WAIT });
    release = (await call("alice", "release", { service: "api" })).taskId;
    // No reload: the list follows the namespace.
    const row = page.locator(`tr[data-task="${release}"]`);
    await row.waitFor({ timeout: WAIT });
    await row.locator(".tag.you").waitFor({ timeout: WAIT });
    await shot(page, "1-waiting-run-appears");

    await row.locator("a").click();
    const form = page.locator('form.answer[data-key="approval.decision"]');
    await form.waitFor({ timeout: WAIT });
    assert.equal(await page.locator(".run-head .cancel").count(), 0, "an approver may not cancel");
    await form.locator("button.submit").click();
    await form.locator(".error:text('window: required')").waitFor({ timeout: WAIT });
    await form.locator(".error:text('replicas: required')").waitFor({ timeout: WAIT });
    await form.locator('input[type="number"]').fill("11");
    await form.locator("button.submit").click();
    await form.locator(".error:text('replicas: must be at most 10')").waitFor({ timeout: WAIT });
    await shot(page, "2-answer-form-validation");
    assert.equal((await task("alice", release)).status, "input_required", "nothing was sent yet");

    await form.locator('input[type="checkbox"]').check();
    await form.locator("select").selectOption({ label: "tonight" });
    await form.locator('input[type="number"]').fill("3");
    await form.locator('[name="comment"]').fill("ship it");
    await form.locator("button.submit").click();
    await page.locator('.run-head .phase[data-phase="Succeeded"]').waitFor({ timeout: WAIT });
    await page.locator(".answers li:has-text('by olga')").waitFor({ timeout: WAIT });
    await page.locator("section.result pre:text('Released api tonight with 3 replicas.')").waitFor({ timeout: WAIT });
    await page.locator(`tr[data-task="${release}"] .phase[data-phase="Succeeded"]`).waitFor({ timeout: WAIT });
    await shot(page, "3-run-completed");

    const done = await task("alice", release);
    assert.equal(done.status, "completed");
    assert.equal(done.result.content[0].text, "Released api tonight with 3 replicas.");
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  let soak;
  await test("a requester cancels a Run of hers in the console", async () => {
    soak = (await call("alice", "soak", {})).taskId;
    const page = await signedIn("alice");
    await page.locator(`tr[data-task="${release}"]`).waitFor({ timeout: WAIT });
    await page.locator(`tr[data-task="${soak}"] a`).click();
    // Cancel asks first: backing out changes nothing.
    await page.locator(".run-head .cancel").click();
    await page.locator("dialog.confirm .back").click();
    await page.locator("dialog.confirm").waitFor({ state: "detached", timeout: WAIT });
    assert.equal((await task("alice", soak)).status, "working");
    await page.locator(".run-head .cancel").click();
    await page.fill("#dialog-reason", "soak no longer needed");
    await shot(page, "4-cancel-asks-for-a-reason");
    await page.locator("dialog.confirm .confirm-go").click();
    await page.locator('.run-head .phase[data-phase="Cancelled"]').waitFor({ timeout: WAIT });
    await page.locator(".cancelled-by:has-text('alice')").waitFor({ timeout: WAIT });
    await page.locator(".cancelled-by:has-text('soak no longer needed')").waitFor({ timeout: WAIT });
    await shot(page, "4-run-cancelled");
    assert.equal((await task("alice", soak)).status, "cancelled");
    // Filters: only the Runs waiting for her answer (none), then only the cancelled ones.
    await page.check("#filter-waiting");
    await settled(page);
    assert.equal(await page.locator("#runs .empty").count(), 1);
    // Two filters changed at once: the list shows what the second asked for, whichever answer
    // comes last.
    await page.uncheck("#filter-waiting");
    await page.selectOption("#filter-phase", "Cancelled");
    await settled(page);
    const shown = await page.locator("#runs tbody tr").evaluateAll((rows) => rows.map((r) => r.dataset.task));
    assert.deepEqual(shown, [soak]);
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  await test("another user sees none of it, not even by the Run's address", async () => {
    const page = await signedIn("mallory");
    await page.waitForSelector("#runs .empty", { timeout: WAIT });
    await page.goto(`${base}/ui/#/ns/team-a/run/${release}`);
    await page.locator("#run .error:text('unknown task')").waitFor({ timeout: WAIT });
    assert.equal(await page.locator("#runs tbody tr").count(), 0);
    await shot(page, "5-another-user-sees-nothing");
    const listed = await call("mallory", "runway_list_runs", {});
    assert.deepEqual(listed.structuredContent.runs, []);
    await page.context().close();
  });

  await test("a requester pauses a Run, answers it while paused, and resumes it", async () => {
    const staged = (await call("alice", "stage", {})).taskId;
    const page = await signedIn("alice");
    await page.locator(`tr[data-task="${staged}"] a`).click();
    const form = page.locator('form.answer[data-key="confirm.build"]');
    await form.waitFor({ timeout: WAIT });
    // Pausing asks first, with a reason; backing out changes nothing.
    await page.locator(".run-head .pause").click();
    await page.locator("dialog.confirm .back").click();
    await page.locator("dialog.confirm").waitFor({ state: "detached", timeout: WAIT });
    await page.locator(".run-head .pause").click();
    await page.fill("#dialog-reason", "staging is frozen");
    await shot(page, "20-pause-asks-for-a-reason");
    await page.locator("dialog.confirm .confirm-go").click();
    await page.locator(".paused-by:has-text('by alice')").waitFor({ timeout: WAIT });
    await page.locator(".paused-by:has-text('staging is frozen')").waitFor({ timeout: WAIT });
    await page.locator(".status-message:text('paused by alice')").waitFor({ timeout: WAIT });
    await shot(page, "21-run-paused");

    // The question stays answerable; the step after it waits for the resume.
    await form.locator('input[type="checkbox"]').check();
    await form.locator("button.submit").click();
    await page.locator('tr[data-step="confirm"] .phase[data-phase="Succeeded"]').waitFor({ timeout: WAIT });
    assert.equal(await page.locator('tr.planned[data-step="deploy"]').count(), 1, "no step starts while paused");
    const paused = await task("alice", staged);
    assert.equal(paused.status, "working");
    assert.equal(paused.statusMessage, "paused by alice");
    await shot(page, "22-answered-while-paused");

    await page.locator(".run-head .resume").click();
    await page.locator('.run-head .phase[data-phase="Succeeded"]').waitFor({ timeout: WAIT });
    await page.locator("section.result pre:text('staged')").waitFor({ timeout: WAIT });
    assert.equal(await page.locator(".paused-by").count(), 0);
    await shot(page, "23-resumed-and-finished");
    assert.equal((await task("alice", staged)).status, "completed");
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  await test("a requester retries a failed Run from its failed step", async () => {
    const first = (await call("alice", "ship", {})).taskId;
    const page = await signedIn("alice");
    await page.locator(`tr[data-task="${first}"] a`).click();
    // She declines the deploy: the step fails, and with it the Run.
    await page.locator('form.answer[data-key="deploy.go"] button.decline').click();
    await page.locator('.run-head .phase[data-phase="Failed"]').waitFor({ timeout: WAIT });
    await page.locator(".run-head .retry").waitFor({ timeout: WAIT });
    await shot(page, "24-failed-run-offers-a-retry");
    await page.locator(".run-head .retry").click();
    await page.locator(`.retry-of a[data-task="${first}"]`).waitFor({ timeout: WAIT });
    await page.locator('tr[data-step="build"] .reused').waitFor({ timeout: WAIT });
    const form = page.locator('form.answer[data-key="deploy.go"]');
    await form.waitFor({ timeout: WAIT });
    await shot(page, "25-retry-reuses-the-build");
    await form.locator('input[type="checkbox"]').check();
    await form.locator("button.submit").click();
    await page.locator('.run-head .phase[data-phase="Succeeded"]').waitFor({ timeout: WAIT });
    await shot(page, "26-retry-completed");
    const retried = await page.locator(".run-head .task-id code").textContent();
    assert.notEqual(retried, first);
    assert.equal((await task("alice", retried)).status, "completed");
    // Only the requester is offered a retry: sam, who may see every Run, is not.
    const other = await signedIn("sam");
    await other.locator(`tr[data-task="${first}"] a`).click();
    await other.locator('.run-head .phase[data-phase="Failed"]').waitFor({ timeout: WAIT });
    assert.equal(await other.locator(".run-head .retry").count(), 0);
    assert.deepEqual(page.errors, []);
    await page.context().close();
    await other.context().close();
  });

  await test("a question that needs two approvers waits for the second after the first", async () => {
    const change = (await call("alice", "change", {})).taskId;
    const answerAs = async (who) => {
      const page = await signedIn(who);
      await page.locator(`tr[data-task="${change}"] a`).click();
      const form = page.locator('form.answer[data-key="review.ok"]');
      await form.waitFor({ timeout: WAIT });
      await form.locator("button.submit").click();
      return page;
    };
    const olga = await answerAs("olga");
    await olga.locator(".approvals:text('1 of 2 approvals so far: olga')").waitFor({ timeout: WAIT });
    await shot(olga, "27-one-of-two-approvals");
    assert.equal((await task("alice", change)).status, "input_required");
    const sam = await answerAs("sam");
    await sam.locator('.run-head .phase[data-phase="Succeeded"]').waitFor({ timeout: WAIT });
    assert.equal((await task("alice", change)).status, "completed");
    assert.deepEqual(olga.errors, []);
    assert.deepEqual(sam.errors, []);
    await olga.context().close();
    await sam.context().close();
  });

  // ---- MCP Apps ------------------------------------------------------------------------------

  await test("tools and the view resource read as the MCP Apps SDK reads them", async () => {
    const tools = (await mcp("olga", "tools/list", {}, null, UI)).result.tools;
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    assert.equal(apps.getToolUiResourceUri(byName.release), "ui://runway/run");
    assert.equal(apps.getToolUiResourceUri(byName.runway_list_runs), "ui://runway/run");
    for (const name of ["runway_get_run", "runway_answer_run", "runway_cancel_run", "runway_pause_run", "runway_resume_run", "runway_retry_run", "runway_list_workflows"]) {
      assert.ok(apps.isToolVisibilityAppOnly(byName[name]), name);
      apps.McpUiToolMetaSchema.parse(byName[name]._meta.ui);
    }
    const plain = (await mcp("olga", "tools/list", {}, null, TASKS)).result.tools;
    assert.ok(plain.every((t) => !t._meta || !t._meta.ui), "no _meta.ui without the extension");
    assert.deepEqual(plain.map((t) => t.name).sort(),
      ["announce", "change", "heartbeat", "nightly-report", "release", "rollout", "runway_list_runs", "ship", "soak", "stage", "tidy-up"]);
    const read = (await mcp("olga", "resources/read", { uri: "ui://runway/run" }, "ui://runway/run", UI)).result;
    assert.equal(read.contents[0].mimeType, apps.RESOURCE_MIME_TYPE);
    apps.McpUiResourceMetaSchema.parse(read.contents[0]._meta.ui);
    assert.deepEqual(read.contents[0]._meta.ui.csp.connectDomains, []);
  });

  /** A host page for `who` showing the view with `result` of a call of `tool`. */
  async function host(who, input, result) {
    const context = await browser.newContext({ viewport: { width: 800, height: 700 } });
    const page = await context.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(e.message));
    page.errors = errors;
    await page.exposeFunction("mcp", (method, params, name) => mcp(who, method, params, name, UI));
    await page.setContent(readFileSync(join(here, "host.html"), "utf8"));
    await page.evaluate(([i, r]) => window.startHost("ui://runway/run", i, r), [input, result]);
    return { page, view: page.frameLocator("#view") };
  }

  async function checkBridge(page) {
    const sent = await page.evaluate(() => window.fromView);
    assert.equal(sent[0].method, "ui/initialize");
    apps.McpUiInitializeRequestSchema.parse(sent[0]);
    assert.ok(apps.SUPPORTED_PROTOCOL_VERSIONS.includes(sent[0].params.protocolVersion));
    const initialized = sent.find((m) => m.method === "ui/notifications/initialized");
    apps.McpUiInitializedNotificationSchema.parse(initialized);
    for (const m of sent.filter((m) => m.method === "ui/notifications/size-changed")) {
      apps.McpUiSizeChangedNotificationSchema.parse(m);
    }
    const calls = sent.filter((m) => m.method === "tools/call");
    assert.ok(calls.length > 0);
    assert.ok(calls.every((m) => m.params.name.startsWith("runway_")), JSON.stringify(calls));
    assert.ok(sent.indexOf(initialized) < sent.indexOf(calls[0]), "no request before the handshake");
  }

  await test("the MCP Apps view shows the caller's task waiting for someone else, then cancels it", async () => {
    const result = await call("alice", "release", { service: "web" }, UI);
    const { page, view } = await host("alice", { service: "web" }, result);
    await view.locator('.run-head .phase[data-phase="Waiting"]').waitFor({ timeout: WAIT });
    await view.locator("li:has-text(\"waiting for someone else's answer\")").waitFor({ timeout: WAIT });
    assert.equal(await view.locator("form.answer").count(), 0, "the requester is not an approver");
    await shot(page, "6-view-waiting-for-approval");
    await checkBridge(page);
    const other = await call("alice", "soak", {}, UI);
    const second = await host("alice", {}, other);
    await second.view.locator(".run-head .cancel").click();
    await second.view.locator("dialog.confirm .confirm-go").click();
    await second.view.locator('.run-head .phase[data-phase="Cancelled"]').waitFor({ timeout: WAIT });
    assert.equal((await task("alice", other.taskId)).status, "cancelled");
    await checkBridge(second.page);
    assert.deepEqual([...page.errors, ...second.page.errors], []);
    await page.context().close();
    await second.page.context().close();
  });

  await test("the MCP Apps view lists what waits for an approver, who answers it there", async () => {
    const listed = await call("olga", "runway_list_runs", { waitingForMe: true }, UI);
    const waiting = listed.structuredContent.runs.map((r) => r.taskId);
    assert.equal(waiting.length, 1, JSON.stringify(listed));
    const { page, view } = await host("olga", { waitingForMe: true }, listed);
    await view.locator(`tr[data-task="${waiting[0]}"] a`).click();
    const form = view.locator('form.answer[data-key="approval.decision"]');
    await form.waitFor({ timeout: WAIT });
    await form.locator('input[type="checkbox"]').check();
    await form.locator("select").selectOption({ label: "now" });
    await form.locator('input[type="number"]').fill("2");
    await shot(page, "7-view-answer-form");
    await form.locator("button.submit").click();
    await view.locator('.run-head .phase[data-phase="Succeeded"]').waitFor({ timeout: WAIT });
    await shot(page, "8-view-completed");
    const done = await task("alice", waiting[0]);
    assert.equal(done.result.content[0].text, "Released web now with 2 replicas.");
    await checkBridge(page);
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });
  await test("items show under their step and a child Run is one click away", async () => {
    const parent = (await call("alice", "rollout", {})).taskId;
    const child = `${parent}-announce-1`;
    const page = await signedIn("alice");
    await page.goto(`${base}/ui/#/ns/team-a/run/${parent}`);
    await page.locator('tr.item[data-step="regions[2]"] .phase[data-phase="Succeeded"]').waitFor({ timeout: WAIT });
    await page.locator('tr[data-step="regions"] .tag:text("3 items")').waitFor({ timeout: WAIT });
    await page.locator(`tr[data-step="announce"] a.run-link:text("${child}")`).waitFor({ timeout: WAIT });
    await page.locator(`.status-message:has-text("(child run ${child})")`).waitFor({ timeout: WAIT });
    const order = await page.locator("tr[data-step]").evaluateAll((rows) => rows.map((r) => r.dataset.step));
    assert.deepEqual(order, ["regions", "regions[0]", "regions[1]", "regions[2]", "announce"]);
    // The graph: both steps start at once (no arrow between them), the items counted on
    // their node, and the child's node one click from the child.
    const regions = page.locator('svg.graph .node[data-step="regions"]');
    await regions.locator("text.sub:has-text('3/3 items')").waitFor({ timeout: WAIT });
    assert.equal(await page.locator("svg.graph path.edge").count(), 0);
    assert.equal(await page.locator('svg.graph .node[data-step="announce"]').getAttribute("data-phase"), "Running");
    assert.equal(await page.locator('svg.timeline .row[data-step="regions[2]"] rect.bar.phase-succeeded').count(), 1);
    await shot(page, "9-items-and-child");
    // The child asks its requester, who answers on the child's page, reached from the graph;
    // its page links back to the parent.
    await page.locator('svg.graph .node[data-step="announce"]').click();
    await page.waitForURL(`**/run/${child}`, { timeout: WAIT });
    await page.locator(`.facts .parent a.run-link:text("${parent}")`).waitFor({ timeout: WAIT });
    const form = page.locator('form.answer[data-key="confirm.ok"]');
    await form.waitFor({ timeout: WAIT });
    await form.locator('input[type="checkbox"]').check();
    await form.locator("button.submit").click();
    await page.locator('.run-head .phase[data-phase="Succeeded"]').waitFor({ timeout: WAIT });
    await page.locator(`.facts .parent a.run-link:text("${parent}")`).click();
    await page.locator("section.result pre:text('3 regions; rolled out')").waitFor({ timeout: WAIT });
    await page.locator(`.facts .children a.run-link:text("${child}")`).waitFor({ timeout: WAIT });
    await shot(page, "10-parent-completed");
    assert.equal((await task("alice", parent)).result.content[0].text, "3 regions; rolled out");
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });
  await test("a retried step shows its attempts, its wait and when it runs next", async () => {
    const report = (await call("alice", "nightly-report", { day: "2026-12-02" })).taskId;
    const page = await signedIn("alice");
    await page.goto(`${base}/ui/#/ns/team-a/run/${report}`);
    await page.locator('tr[data-step="fetch"] .next-attempt:has-text("next attempt")').waitFor({ timeout: WAIT });
    await page.locator('tr[data-step="fetch"] .next-attempt .rel:text-matches("in \\d+ s|a moment")').waitFor({ timeout: WAIT });
    await page.locator('svg.timeline .row[data-step="fetch"] rect.bar.wait').waitFor({ timeout: WAIT });
    await page.locator('svg.graph .node[data-step="fetch"][data-phase="Retrying"]').waitFor({ timeout: WAIT });
    await shot(page, "11-retry-waits-on-the-timeline");
    await page.locator('.run-head .phase[data-phase="Failed"]').waitFor({ timeout: 30_000 });
    // Two failed attempts and the last one, each its own bar; the step after never ran.
    const bars = page.locator('svg.timeline .row[data-step="fetch"] rect.bar');
    await page.waitForFunction(() => document.querySelectorAll('svg.timeline .row[data-step="fetch"] rect.bar.failed').length === 2, null, { timeout: WAIT });
    assert.equal(await bars.count(), 3);
    assert.equal(await page.locator('svg.graph .node[data-step="write"]').getAttribute("data-phase"), "");
    await shot(page, "12-failed-after-retries");
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  await test("the list keeps its columns in view, filters by requester, time and label, and sorts", async () => {
    const page = await signedIn("sam");
    // sam sees every Run: alice's and the heartbeat's.
    await page.locator('#runs tr[data-task^="heartbeat-"]').first().waitFor({ timeout: WAIT });
    await page.locator('#runs tr[data-task^="release-"]').first().waitFor({ timeout: WAIT });
    const fits = await page.evaluate(() => {
      const list = document.querySelector("#runs");
      const box = list.getBoundingClientRect();
      return [...list.querySelectorAll("tbody tr")].every((tr) => {
        const id = tr.querySelector(".col-taskId a").getBoundingClientRect();
        const created = tr.querySelector(".col-createdAt").getBoundingClientRect();
        return id.height < 20 && created.right <= box.right + 1;
      });
    });
    assert.ok(fits, "ids on one line, Created in view");
    await shot(page, "13-list");

    await page.fill("#filter-requested-by", "alice");
    await page.locator("#filter-requested-by").dispatchEvent("change");
    await settled(page);
    const by = await page.locator("#runs tbody .col-requestedBy").allTextContents();
    assert.ok(by.length > 0 && by.every((u) => u === "alice"), by.join());
    await page.click(".clear-filters");
    await page.fill("#filter-labels", "runway.dev/schedule=every-3s");
    await page.locator("#filter-labels").dispatchEvent("change");
    await settled(page);
    const wfs = await page.locator("#runs tbody .col-workflow").allTextContents();
    assert.ok(wfs.length > 0 && wfs.every((w) => w === "heartbeat"), wfs.join());
    await page.fill("#filter-labels", "team=pay ments");
    await page.locator("#filter-labels").dispatchEvent("change");
    await page.locator(".filter-error:has-text('labels')").waitFor({ timeout: WAIT });
    await page.click(".clear-filters");
    const later = new Date(Date.now() + 3600_000);
    const local = new Date(later.getTime() - later.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
    await page.fill("#filter-since", local);
    await page.locator("#filter-since").dispatchEvent("change");
    await page.locator("#runs .empty").waitFor({ timeout: WAIT });
    await page.click(".clear-filters");

    // Sorting: by Workflow within the page, and oldest first through the Created column.
    await page.locator("#runs tbody tr").first().waitFor({ timeout: WAIT });
    await page.click('button.sort[data-sort="workflow"]');
    await page.locator('th.col-workflow[aria-sort="ascending"]').waitFor({ timeout: WAIT });
    const names = await page.locator("#runs tbody .col-workflow").allTextContents();
    assert.deepEqual(names, [...names].sort());
    await page.click('button.sort[data-sort="createdAt"]');
    await page.locator('th.col-createdAt[aria-sort="ascending"]').waitFor({ timeout: WAIT });
    const first = await page.locator("#runs tbody tr").first().getAttribute("data-task");
    const oldest = (await call("sam", "runway_list_runs", { order: "oldest", limit: 1 })).structuredContent.runs[0].taskId;
    assert.equal(first, oldest);
    await shot(page, "14-list-oldest-first");
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  await test("Workflows are listed with their Ready condition and started from their form", async () => {
    const page = await signedIn("sam");
    await page.click(".tabs a:text('Workflows')");
    await page.locator('table.workflows tr[data-workflow="broken-form"] [data-ready="False"]').waitFor({ timeout: WAIT });
    assert.equal(await page.locator("table.workflows tbody tr").count(), 11);
    await page.click('tr[data-workflow="broken-form"] a');
    await page.locator(".ready-message:has-text('InvalidSchema')").waitFor({ timeout: WAIT });
    assert.ok(await page.locator("button.start").isDisabled());
    await page.locator(".why:has-text('is not of type string')").waitFor({ timeout: WAIT });

    await page.click('tr[data-workflow="nightly-report"] a');
    const form = page.locator("form.start");
    await form.locator("button.start").click();
    await form.locator(".error:text('day: required')").waitFor({ timeout: WAIT });
    await form.locator('input[type="date"]').fill("2026-12-02");
    await form.locator("textarea.json").fill("[not json");
    await form.locator("button.start").click();
    await form.locator(".error:has-text('teams: not JSON')").waitFor({ timeout: WAIT });
    // A list the form takes and the tool's schema refuses: the server's tool error, no Run.
    await form.locator("textarea.json").fill("[1]");
    await form.locator("button.start").click();
    await page.locator(".form-status.error:has-text('invalid arguments')").waitFor({ timeout: WAIT });
    await form.locator("textarea.json").fill('["payments", "search"]');
    await shot(page, "15-start-form");
    await form.locator("button.start").click();
    await page.waitForURL(/\/run\/nightly-report-/, { timeout: WAIT });
    await page.locator("pre.arguments:has-text('search')").waitFor({ timeout: WAIT });
    const started = decodeURIComponent(page.url().split("/run/")[1]);
    const t = await task("sam", started);
    assert.ok(["working", "failed"].includes(t.status), t.status);
    const cancelled = await mcp("sam", "tasks/cancel", { taskId: started }, started);
    assert.ok(cancelled.result, JSON.stringify(cancelled));
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  await test("schedules show their next and last time and their Runs, and run now on request", async () => {
    const page = await signedIn("sam");
    await page.goto(`${base}/ui/#/ns/team-a/workflows/heartbeat`);
    const row = page.locator('tr[data-schedule="every-3s"]');
    await row.locator(".made a.run-link").first().waitFor({ timeout: WAIT });
    await row.locator(".next .rel:text-matches('in \\d+ s|a moment|just now')").waitFor({ timeout: WAIT });
    await row.locator(".last time").waitFor({ timeout: WAIT });
    await row.locator(".phase:text('Active')").waitFor({ timeout: WAIT });
    await shot(page, "16-schedules");
    await row.locator("button.run-now").click();
    await page.locator("dialog.confirm pre:has-text('\"target\": \"api\"')").waitFor({ timeout: WAIT });
    await page.locator("dialog.confirm .confirm-go").click();
    await page.waitForURL(/\/run\/heartbeat-/, { timeout: WAIT });
    await page.locator('.run-head .phase[data-phase="Succeeded"]').waitFor({ timeout: WAIT });
    await page.locator(".facts dd:text('sam')").waitFor({ timeout: WAIT });

    await page.goto(`${base}/ui/#/ns/team-a/workflows/nightly-report`);
    const nightly = page.locator('tr[data-schedule="nightly"]');
    await nightly.locator(".phase:text('Paused')").waitFor({ timeout: WAIT });
    assert.equal((await nightly.locator(".next").textContent()).trim(), "—");
    await nightly.locator("button.pause").click();
    await page.locator("dialog.confirm pre.command:has-text('/spec/schedules/0/suspend')").waitFor({ timeout: WAIT });
    assert.match(await page.locator("dialog.confirm pre.command").textContent(),
      /^kubectl -n team-a patch workflow nightly-report --type=json -p '.*"value":false.*'$/);
    await shot(page, "17-resume-schedule");
    await page.locator("dialog.confirm .back").click();
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  await test("a server that cannot be reached shows a banner, keeps the page and recovers", async () => {
    const page = await signedIn("alice");
    await page.locator("#runs tbody tr").first().waitFor({ timeout: WAIT });
    const rows = await page.locator("#runs tbody tr").count();
    await page.route("**/namespaces/**", (route) => route.abort("connectionrefused"));
    await page.locator("#offline:has-text('cannot be reached')").waitFor({ timeout: WAIT });
    assert.equal(await page.locator("#runs tbody tr").count(), rows, "what was shown stays");
    assert.equal(await page.locator("text=Failed to fetch").count(), 0);
    await shot(page, "18-server-down");
    await page.unroute("**/namespaces/**");
    await page.click("#offline button.retry");
    await page.locator("#offline").waitFor({ state: "hidden", timeout: WAIT });
    await page.context().close();
  });

  await test("the MCP Apps view draws the same graph and timeline", async () => {
    const result = await call("alice", "rollout", {}, UI);
    const { page, view } = await host("alice", {}, result);
    await view.locator('svg.graph .node[data-step="regions"]').waitFor({ timeout: WAIT });
    await view.locator('svg.timeline .row[data-step="regions"]').waitFor({ timeout: WAIT });
    // The child's node opens the child in place.
    await view.locator('svg.graph .node.link[data-step="announce"]').click();
    await view.locator('.facts .parent a.run-link').waitFor({ timeout: WAIT });
    await shot(page, "19-view-child-with-parent-link");
    await checkBridge(page);
    assert.deepEqual(page.errors, []);
    await page.context().close();
  });

  await test("a Run deleted after its time to live is read back from the archive", async () => {
    const id = (await call("alice", "tidy-up", {})).taskId;
    // Deleted a second after it ends: tasks/get no longer knows it.
    const since = Date.now();
    while (!(await mcp("alice", "tasks/get", { taskId: id }, id)).error) {
      assert.ok(Date.now() - since < WAIT, "the run was not deleted");
      await new Promise((done) => setTimeout(done, 200));
    }
    const page = await signedIn("alice");
    await page.check("#filter-archived");
    const row = page.locator(`tr[data-task="${id}"]`);
    await row.waitFor({ timeout: WAIT });
    await row.locator("a").click();
    await page.locator(".facts .archived-at").waitFor({ timeout: WAIT });
    await page.locator('.run-head .phase[data-phase="Succeeded"]').waitFor({ timeout: WAIT });
    await page.locator("section.result:has-text('swept')").waitFor({ timeout: WAIT });
    assert.equal(await page.locator(".run-head button").count(), 0, "nothing to cancel, pause or retry");
    await shot(page, "28-archived-run");
    assert.deepEqual(page.errors, []);
    await page.context().close();
    // A link to the deleted Run opens the archive's record too.
    const linked = await signedIn("alice");
    await linked.goto(`${base}/ui/#/ns/team-a/run/${id}`);
    await linked.locator(".facts .archived-at").waitFor({ timeout: WAIT });
    assert.deepEqual(linked.errors, []);
    await linked.context().close();
  });
} finally {
  if (browser) await browser.close();
  server.kill("SIGTERM");
  if (failures) console.log(readFileSync(join(work, "server.log"), "utf8").split("\n").slice(-40).join("\n"));
  rmSync(work, { recursive: true, force: true });
}
console.log(failures ? `${failures} failed` : "all passed");
process.exit(failures ? 1 : 0);
