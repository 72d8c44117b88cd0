// Real processes for the TypeScript client's tests, as the Python client's ogharness.py.
//
// Each test gets its own `oncegate sandbox` (the simulated payment provider whose ledger
// counts effects) and its own `oncegate serve` on a scratch registry and store, both on
// loopback with ports the OS picks. Nothing here imitates the gateway: the tests talk to
// the binary named by ONCEGATE_BIN, the one the Rust test driver built.
//
// The sandbox runs with `--ignore-idempotency-key charges`: every POST that reaches it
// is a new charge, so a second execution of one intent shows up as a second effect in
// its ledger instead of being hidden by the provider's own dedupe. That is what lets
// each test fail.

import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { accessSync, constants, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

export const SANDBOX_API_KEY = "sk_test_typescript_client";
export const AGENT_TOKEN = "tok-planner";
export const APPROVER_TOKEN = "tok-alice";
export const ADMIN_TOKEN = "tok-ops";
const TOKENS = {
  ONCEGATE_TOKEN_PLANNER: AGENT_TOKEN,
  ONCEGATE_TOKEN_ALICE: APPROVER_TOKEN,
  ONCEGATE_TOKEN_OPS: ADMIN_TOKEN,
};

// Short, so that stalls and crashes outlast it within test time, and longer than the
// sandbox round trips the functions make.
export const LEASE_MS = 3000;

// A claim-only `charge_card` keyed on the order and the money amount ("12.50", 12.5 and
// "12.50 USD" are one intent; the memo never enters the key), reconciled by order id
// (the sandbox ignores keys for charges, so it has no index by key). The same registry
// as the Python client's tests.
const REGISTRY = `
[gateway]
tenant = "acme"
time_zone = "UTC"
listen = "127.0.0.1:0"

[store]
url = "sqlite://oncegate.db"

[[principals]]
name = "planner"
role = "agent"
token_env = "ONCEGATE_TOKEN_PLANNER"

[[principals]]
name = "alice"
role = "approver"
token_env = "ONCEGATE_TOKEN_ALICE"

[[principals]]
name = "ops"
role = "admin"
token_env = "ONCEGATE_TOKEN_OPS"

[[capabilities]]
name = "charge_card"
description = "Charge the customer's card for an order. One order is charged at most once."
category = "keyed"
replay_window = "24h"
attempt_ceiling = 100
lease = "${LEASE_MS / 1000}s"
settle_horizon = "1s"
on_unknown = "reconcile"
policy = "policies.cedar"

[capabilities.key]
business_ref = "order_id"
scope = "global"
significant = [
  { arg = "amount", type = "money", currency_arg = "currency", default_currency = "USD" },
]

[capabilities.reconcile]
kind = "http"
url = "{env.SANDBOX_URL}/v1/charges?order_id={business_ref}"
headers = { Authorization = "Bearer {env.SANDBOX_API_KEY}" }
timeout = "2s"
found = "/found"
effect_ref = "/charge/id"
result = "/charge"
`;

// Charges above 1,000.00 wait for an approver (the approval tests charge 2500.00); every
// smaller one is allowed as before. The same policy as the Python client's tests.
export const HELD_AMOUNT = "2500.00";
const POLICIES = `
permit (principal, action == Action::"charge_card", resource) when { principal.role == "agent" };

@id("charge-over-1000")
@oncegate("require_approval")
permit (principal, action == Action::"charge_card", resource)
when { principal.role == "agent" && context.amount > 100000 };
`;

/** The gateway binary under test; loudly absent rather than silently skipped. */
export function oncegateBin() {
  const bin = process.env.ONCEGATE_BIN;
  if (!bin) throw new Error("ONCEGATE_BIN is not set: the Rust driver sets it to CARGO_BIN_EXE_oncegate");
  accessSync(bin, constants.X_OK);
  return bin;
}

/** Starts `argv` and waits (at most 30 s) for the URL it prints as its first stdout line. */
function startProcess(name, argv, env, cwd) {
  const child = spawn(argv[0], argv.slice(1), { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
  const log = [];
  const keep = (line) => {
    log.push(line);
    if (log.length > 200) log.shift();
  };
  createInterface({ input: child.stderr }).on("line", keep);
  const lines = createInterface({ input: child.stdout });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${name} printed no URL in 30 s:\n${log.join("\n")}`));
    }, 30_000);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (${code}) before printing its URL:\n${log.join("\n")}`));
    });
    lines.once("line", (first) => {
      clearTimeout(timer);
      lines.on("line", keep);
      const url = first.trim().split(/\s+/).at(-1) ?? "";
      if (!url.startsWith("http://")) {
        child.kill("SIGKILL");
        reject(new Error(`${name} printed ${JSON.stringify(first)}, not its URL`));
        return;
      }
      resolve({ name, child, url: url.replace(/\/+$/, ""), log });
    });
  });
}

function stopProcess(proc) {
  if (proc.child.exitCode === null && proc.child.signalCode === null) proc.child.kill("SIGKILL");
}

/** One sandbox and one gateway in front of it, on a scratch registry and store. */
export class Stack {
  constructor(dir, sandbox, gateway, env) {
    this.dir = dir;
    this.sandbox = sandbox;
    this.gateway = gateway;
    this.env = env;
  }

  get url() {
    return this.gateway.url;
  }

  get sandboxUrl() {
    return this.sandbox.url;
  }

  /** Every charge the sandbox committed for `orderId` (or all): the effect count the tests assert. */
  async charges(orderId) {
    const query = new URLSearchParams({ kind: "charge", ...(orderId ? { order_id: orderId } : {}) });
    const r = await fetch(`${this.sandboxUrl}/v1/effects?${query}`, { headers: { Authorization: `Bearer ${SANDBOX_API_KEY}` } });
    if (!r.ok) throw new Error(`GET /v1/effects: ${r.status} ${await r.text()}`);
    return (await r.json()).effects;
  }

  /** The gateway's stored intent record (admin token). */
  async intent(key) {
    const r = await fetch(`${this.url}/v1/intents/${key}`, { headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } });
    if (r.status !== 200) throw new Error(`GET /v1/intents/${key}: ${r.status} ${await r.text()}`);
    return r.json();
  }

  /** The audit events of intent `key`, oldest first (admin token). */
  async audit(key) {
    const r = await fetch(`${this.url}/v1/audit`, { headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } });
    if (r.status !== 200) throw new Error(`GET /v1/audit: ${r.status} ${await r.text()}`);
    const text = await r.text();
    return text
      .split("\n")
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l).record.event)
      .filter((e) => e.key === key);
  }

  /** The key the gateway derives for a charge_card call. */
  async intentKey(args) {
    const r = await fetch(`${this.url}/v1/keys/derive`, {
      method: "POST",
      headers: { Authorization: `Bearer ${AGENT_TOKEN}`, "Content-Type": "application/json" },
      body: JSON.stringify({ capability: "charge_card", arguments: args }),
    });
    if (r.status !== 200) throw new Error(`POST /v1/keys/derive: ${r.status} ${await r.text()}`);
    return (await r.json()).key;
  }

  /** Waits until the stored intent reaches `state` (the sweep runs every second). */
  async waitState(key, state, timeoutMs) {
    return waitFor(`intent ${key.slice(0, 12)}... to be ${state}`, async () => {
      const record = await this.intent(key);
      return record.state === state ? record : null;
    }, timeoutMs);
  }

  /** Both processes' log tails, for a failing test's report. */
  logs() {
    return `--- gateway log ---\n${this.gateway.log.slice(-60).join("\n")}\n--- sandbox log ---\n${this.sandbox.log.slice(-60).join("\n")}`;
  }

  stop() {
    stopProcess(this.gateway);
    stopProcess(this.sandbox);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Starts a sandbox, then `oncegate init` and `oncegate serve` on a fresh registry (as a deployment starts). */
export async function startStack() {
  const bin = oncegateBin();
  const dir = mkdtempSync(join(tmpdir(), "oncegate-ts-"));
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("ONCEGATE_") && !k.startsWith("SANDBOX_")));
  base.ONCEGATE_LOG = process.env.ONCEGATE_LOG ?? "info,rmcp=off";
  base.NO_COLOR = "1";
  const sandbox = await startProcess(
    "sandbox",
    [bin, "sandbox", "--listen", "127.0.0.1:0", "--api-key", SANDBOX_API_KEY, "--ignore-idempotency-key", "charges"],
    base,
    dir,
  );
  try {
    const config = join(dir, "oncegate.toml");
    writeFileSync(config, REGISTRY);
    writeFileSync(join(dir, "policies.cedar"), POLICIES);
    const env = { ...base, ...TOKENS, SANDBOX_URL: sandbox.url, SANDBOX_API_KEY };
    const init = spawnSync(bin, ["init", "--config", config], { cwd: dir, env, encoding: "utf8", timeout: 60_000 });
    if (init.status !== 0) throw new Error(`oncegate init failed (${init.status}):\n${init.stdout}${init.stderr}`);
    const gateway = await startProcess(
      "gateway",
      [bin, "serve", "--config", config, "--listen", "127.0.0.1:0", "--sweep-every", "1s"],
      env,
      dir,
    );
    return new Stack(dir, sandbox, gateway, env);
  } catch (err) {
    stopProcess(sandbox);
    throw err;
  }
}

/**
 * Runs `body(stack)` on a fresh stack, stopped afterwards; a failure carries both logs,
 * since what the gateway decided is usually the explanation.
 */
export async function withStack(body) {
  const stack = await startStack();
  try {
    return await body(stack);
  } catch (err) {
    if (err instanceof Error) err.message += `\n${stack.logs()}`;
    throw err;
  } finally {
    stack.stop();
  }
}

/** Polls `probe` until it answers something other than null; fails saying what it waited for. */
export async function waitFor(what, probe, timeoutMs, everyMs = 200) {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const got = await probe();
    if (got !== null && got !== undefined) return got;
    if (performance.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A loopback port nothing listens on: connecting is refused before a byte is sent. */
export async function closedPort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** An order id no other test uses. */
export function newOrder(prefix) {
  return `${prefix}-${randomBytes(4).toString("hex")}`;
}

/** The amount in minor units and currency, from the spellings planners emit ("12.50", 12.5, "12.50 USD"). */
export function moneyMinor(amount) {
  const parts = String(amount).trim().split(/\s+/);
  const currency = parts.length === 2 ? parts[1].toUpperCase() : "USD";
  const [whole, frac = ""] = parts[0].split(".");
  if (frac.length > 2) throw new RangeError(`${amount} is not a whole number of cents`);
  return [Number(whole) * 100 + Number(frac.padEnd(2, "0")), currency];
}

/**
 * POST {sandbox}/v1/charges as a payment SDK would: the key in `Idempotency-Key`.
 * `fault` asks the sandbox to misbehave on this one request (`stall_after_commit`:
 * commit the charge, then answer only after `faultDelayMs`, past `timeoutMs`).
 */
export async function createCharge(sandboxUrl, { orderId, amount, memo, idempotencyKey, timeoutMs = 5000, fault, faultDelayMs }) {
  const [minor, currency] = moneyMinor(amount);
  const headers = {
    Authorization: `Bearer ${SANDBOX_API_KEY}`,
    "Idempotency-Key": idempotencyKey,
    "Content-Type": "application/json",
  };
  if (fault) {
    headers["Sandbox-Fault"] = fault;
    if (faultDelayMs !== undefined) headers["Sandbox-Fault-Delay-Ms"] = String(faultDelayMs);
  }
  const response = await fetch(`${sandboxUrl}/v1/charges`, {
    method: "POST",
    headers,
    body: JSON.stringify({ order_id: orderId, amount_minor: minor, currency, memo }),
    signal: AbortSignal.timeout(timeoutMs),
  });
  if (!response.ok) throw new Error(`the sandbox answered ${response.status}: ${await response.text()}`);
  return response.json();
}

/** The README's first TypeScript block (the example the driver runs as written). */
export function readmeExample(readmePath) {
  const text = readFileSync(readmePath, "utf8");
  const m = /```ts\n([\s\S]*?)```/.exec(text);
  if (m === null) throw new Error(`${readmePath} has no \`\`\`ts block`);
  return m[1];
}
