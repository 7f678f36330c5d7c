// The official TypeScript MCP SDK's client against `toolpool serve`, over
// stdio or streamable HTTP: list, call, raised error, timeout, cancellation,
// human prompt (elicitation), list change, structured result.
//
// Usage: node flows.mjs stdio|http   (TOOLPOOL_BIN, TOOLPOOL_FIXTURES and
// NODE_PATH are set by tests/suite/mcp_node.rs). SDK 1.32 speaks up to 2025-11-25,
// so that is the version tested. Prints "ok <flow>" per flow; exits 1 on the
// first failure, with the server's stderr.

import { spawn } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  ElicitRequestSchema,
  ToolListChangedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const mode = process.argv[2];
const bin = process.env.TOOLPOOL_BIN;
const tmp = mkdtempSync(join(tmpdir(), "toolpool-node-"));
const functions = join(tmp, "functions");
cpSync(process.env.TOOLPOOL_FIXTURES, functions, { recursive: true });
const args = [
  "--functions-dir", functions, "--session-dir", join(tmp, "session"),
  "--workers", "2", "--timeout", "1", "serve", "--watch",
];
const serverLog = []; // the server's stderr, printed on failure
let server; // the HTTP server process

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
async function until(what, check, seconds = 30) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}
const alive = (pid) => {
  try {
    const state = readFileSync(`/proc/${pid}/stat`, "utf8").split(")").pop().trim().split(" ")[0];
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
};
const parentOf = (pid) => Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(")").pop().trim().split(" ")[1]);
const text = (result) => result.content.map((c) => c.text).join("");

async function connect() {
  const client = new Client({ name: "toolpool-node-test", version: "1.0.0" }, { capabilities: { elicitation: {} } });
  if (mode === "stdio") {
    const transport = new StdioClientTransport({ command: bin, args, stderr: "pipe", env: { ...process.env, RUST_LOG: "info" } });
    transport.stderr.on("data", (chunk) => serverLog.push(chunk));
    await client.connect(transport);
  } else {
    server = spawn(bin, [...args, "--http", "127.0.0.1:0"], { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, RUST_LOG: "info" } });
    server.stderr.on("data", (chunk) => serverLog.push(chunk));
    const url = await until("the server's address", () => /at (http:\/\/\S+)/.exec(Buffer.concat(serverLog).toString())?.[1]);
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  }
  return client;
}

async function main() {
  const client = await connect();
  assert.equal(client.getServerVersion().name, "toolpool");
  let listChanged = false;
  client.setNotificationHandler(ToolListChangedNotificationSchema, async () => { listChanged = true; });
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    assert.match(request.params.message, /Six times seven\?/);
    return { action: "accept", content: { response: "forty-two" } };
  });

  const tools = (await client.listTools()).tools;
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.ok(byName.add && byName.sleep_forever && byName.ask_human, "the fixture tools are listed");
  console.log("ok list");

  const added = await client.callTool({ name: "add", arguments: { a: 2, b: 3 } });
  assert.ok(!added.isError);
  assert.equal(text(added), "5");
  console.log("ok call");

  assert.deepEqual(byName.add.outputSchema, { type: "object", properties: { result: { type: "integer", description: "What the function returns" } }, required: ["result"], "x-fastmcp-wrap-result": true });
  assert.deepEqual(added.structuredContent, { result: 5 });
  const point = await client.callTool({ name: "return_dataclass", arguments: {} });
  assert.deepEqual(point.structuredContent, JSON.parse(text(point)));
  console.log("ok structured result");

  const raised = await client.callTool({ name: "raise_value_error", arguments: { message: "boom" } });
  assert.equal(raised.isError, true);
  assert.equal(text(raised), "Tool raise_value_error error: ValueError: boom");
  console.log("ok raised error");

  const timedOut = await client.callTool({ name: "sleep_forever", arguments: {} });
  assert.equal(timedOut.isError, true);
  assert.match(text(timedOut), /^Tool sleep_forever error: TimeoutError: function 'sleep_forever' timed out after 1 s/);
  console.log("ok timeout");

  const pidFile = join(tmp, "grandchild.pid");
  const abort = new AbortController();
  const doomed = client.callTool({ name: "spawn_grandchild", arguments: { pid_file: pidFile } }, undefined, { signal: abort.signal });
  doomed.catch(() => {});
  const grandchild = await until("the grandchild's pid", () => {
    try { return Number(readFileSync(pidFile, "utf8").trim()) || null; } catch { return null; }
  });
  const worker = parentOf(grandchild);
  abort.abort();
  await assert.rejects(doomed);
  await until("the cancelled call's worker to die", () => !alive(worker), 10);
  await until("the cancelled call's grandchild to die", () => !alive(grandchild), 10);
  assert.equal(text(await client.callTool({ name: "add", arguments: { a: 1, b: 1 } })), "2");
  console.log("ok cancellation");

  const asked = await client.callTool({ name: "ask_human", arguments: { question: "Six times seven?" } });
  assert.equal(JSON.parse(text(asked)).text, "forty-two");
  console.log("ok human prompt");

  assert.equal(client.getServerCapabilities().tools.listChanged, true);
  writeFileSync(join(functions, "added_later.py"), "def added_later() -> str:\n    \"\"\"Added while serving.\"\"\"\n    return 'new'\n");
  await until("notifications/tools/list_changed", () => listChanged);
  const names = (await client.listTools()).tools.map((t) => t.name);
  assert.ok(names.includes("added_later"), names.join(","));
  assert.equal(text(await client.callTool({ name: "added_later", arguments: {} })), "new");
  console.log("ok list change");

  await client.close();
  if (server) {
    server.kill("SIGTERM");
    await new Promise((resolve) => server.on("exit", resolve));
  }
}

main().then(
  () => { rmSync(tmp, { recursive: true, force: true }); process.exit(0); },
  (error) => {
    console.error(error);
    if (server) server.kill("SIGKILL");
    setTimeout(() => {
      console.error("--- toolpool stderr:\n" + Buffer.concat(serverLog).toString());
      process.exit(1);
    }, 100);
  },
);
