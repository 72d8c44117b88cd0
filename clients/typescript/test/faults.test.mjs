// protect() and the two-phase API against a real gateway when things go wrong.
//
// Every test counts the charges the sandbox committed: the sandbox ignores idempotency
// keys for charges, so any second execution of an intent would be a second charge in
// its ledger. Each test also reads what the gateway recorded (GET /v1/intents/{key}).

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import { test } from "node:test";

import { Client, Execute, Outcome, OutcomeUnknown, StaleClaim } from "../dist/index.js";
import { AGENT_TOKEN, LEASE_MS, closedPort, createCharge, newOrder, sleep, waitFor, withStack } from "./harness.mjs";

const quiet = { warn() {}, error() {} };
const WORKER = fileURLToPath(new URL("./worker.mjs", import.meta.url));

/**
 * Calls `call` until it stops throwing OutcomeUnknown. An intent whose attempt timed out
 * is `unknown` until the gateway has reconciled it, and the caller's right move is to
 * wait and ask again, never to re-execute.
 */
async function untilSettled(call, timeoutMs = 20_000) {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    try {
      return await call();
    } catch (err) {
      if (!(err instanceof OutcomeUnknown) || performance.now() >= deadline) throw err;
      await sleep(300);
    }
  }
}

test("a lost answer after commit, then three drifting re-plans: one charge", () =>
  withStack(async (stack) => {
    // Can fail: the function posts every time it runs and the sandbox charges every
    // post, so a re-plan that re-executed would be a second charge, and a re-plan keyed
    // on the raw text ("12.50" vs 12.5 vs "12.50 USD") would be a new intent.
    const order = newOrder("timeout");
    const calls = [];
    const gate = new Client(stack.url, { token: AGENT_TOKEN, logger: quiet });
    const chargeCard = gate.protect("charge_card", async (args, { idempotencyKey }) => {
      calls.push({ ...args, key: idempotencyKey });
      const first = calls.length === 1;
      return createCharge(stack.sandboxUrl, {
        orderId: args.order_id,
        amount: args.amount,
        memo: args.memo,
        idempotencyKey,
        timeoutMs: 1000,
        // The first attempt commits, then answers only after 10 s: the answer is lost.
        ...(first ? { fault: "stall_after_commit", faultDelayMs: 10_000 } : {}),
      });
    });

    await assert.rejects(chargeCard({ order_id: order, amount: "12.50", memo: "charge for the order" }), { name: "TimeoutError" });
    const committed = await stack.charges(order);
    assert.equal(committed.length, 1, "the provider committed the first attempt");
    const chargeId = committed[0].id;
    assert.equal(committed[0].idempotency_key, calls[0].key, "the key reached the provider");

    const key = await stack.intentKey({ order_id: order, amount: "12.50" });
    // The client recorded `unknown` (a timeout may have reached the provider); the
    // sweep may already have reconciled it.
    assert.ok(["unknown", "applied"].includes((await stack.intent(key)).state));

    for (const [amount, memo] of [
      [12.5, "retrying: the previous result was lost"],
      ["12.50 USD", "the charge timed out, trying once more"],
      ["12.50", "final attempt, customer is waiting"],
    ]) {
      const result = await untilSettled(() => chargeCard({ order_id: order, amount, memo }));
      assert.equal(result.id, chargeId, `re-plan ${JSON.stringify(amount)} got the stored charge`);
    }

    assert.equal(calls.length, 1, `the function ran again: ${JSON.stringify(calls)}`);
    assert.deepEqual((await stack.charges(order)).map((c) => c.id), [chargeId]);
    const record = await stack.intent(key);
    assert.equal(record.state, "applied");
    assert.equal(record.effect_ref, chargeId);
    assert.equal(record.executions, 1);
    // What the gateway heard: the client's `unknown`, then a reconciliation that found
    // the provider's charge (by the sweep or by a re-plan's claim).
    const moves = (await stack.audit(key)).map((e) => `${e.kind}->${e.to}`);
    const unknown = moves.indexOf("effect->unknown");
    const reconciled = moves.indexOf("reconcile->applied");
    assert.ok(unknown >= 0 && reconciled > unknown, moves.join(", "));
  }));

test("a worker stalled past its lease cannot complete", () =>
  withStack(async (stack) => {
    // Worker A claims and stalls past its lease; worker B claims, executes and
    // completes; A's heartbeat and completions then bounce with StaleClaim and change
    // nothing. Can fail: if the gateway took A's late `not_sent`, the last claim would
    // execute again (a second charge); if it took A's `applied`, the record would name
    // A's made-up charge instead of B's.
    const order = newOrder("stale");
    const args = { order_id: order, amount: "30.00", memo: "worker A" };
    const gate = new Client(stack.url, { token: AGENT_TOKEN, logger: quiet });
    const a = await gate.claim("charge_card", args);
    assert.ok(a instanceof Execute, `A holds the execution: ${JSON.stringify(a)}`);
    await sleep(LEASE_MS + 500);

    const b = await waitFor("worker B to be handed the execution", async () => {
      const answer = await gate.claim("charge_card", { ...args, memo: "worker B" });
      // A's lease expired with nothing recorded: unknown until the settle horizon has
      // passed with the provider showing no charge.
      if (answer instanceof Outcome && ["unknown", "in_flight"].includes(answer.status)) return null;
      assert.ok(answer instanceof Execute, `B is handed the execution: ${JSON.stringify(answer)}`);
      return answer;
    }, 20_000);
    assert.equal(b.intentKey, a.intentKey);
    assert.notEqual(b.fencingToken, a.fencingToken);
    assert.ok(b.execution > a.execution);
    assert.equal(b.idempotencyKey, a.idempotencyKey, "a re-execution sends the same key");

    const charge = await createCharge(stack.sandboxUrl, { orderId: order, amount: "30.00", memo: "worker B", idempotencyKey: b.idempotencyKey });
    const done = await gate.complete(b, "applied", { effectRef: charge.id, result: charge });
    assert.equal(done.status, "applied");
    assert.equal(done.effectRef, charge.id);

    // A wakes up: every move of its claim is a 409 OG-0024 that records nothing.
    const stale = (err) => err instanceof StaleClaim && err.statusCode === 409 && err.code === "OG-0024";
    await assert.rejects(gate.heartbeat(a), stale);
    await assert.rejects(gate.complete(a, "applied", { effectRef: "ch_made_up_by_a", result: { id: "ch_made_up_by_a" } }), stale);
    await assert.rejects(gate.complete(a, "not_sent"), stale);
    await assert.rejects(gate.complete(a, "failed", { error: "worker A gave up" }), stale);

    const record = await stack.intent(a.intentKey);
    assert.equal(record.state, "applied");
    assert.equal(record.effect_ref, charge.id);
    const again = await gate.claim("charge_card", { ...args, memo: "worker C" });
    assert.ok(again instanceof Outcome && again.status === "replayed", `a later claim replays: ${JSON.stringify(again)}`);
    assert.equal(again.effectRef, charge.id);
    assert.deepEqual((await stack.charges(order)).map((c) => c.id), [charge.id]);
  }));

test("a function running past its lease is kept alive by heartbeats timed by the lease left", () =>
  withStack(async (stack) => {
    // Can fail: without heartbeats the claim expires after 3 s, the completion bounces
    // with StaleClaim, and the caller hears an error for an effect that happened.
    const order = newOrder("long");
    let runs = 0;
    const gate = new Client(stack.url, { token: AGENT_TOKEN, logger: quiet });
    const chargeCard = gate.protect("charge_card", async (args, ctx) => {
      runs += 1;
      await sleep(LEASE_MS * 2);
      assert.ok(ctx.leaseLeftMs() > 0, "the lease was extended");
      assert.equal(ctx.signal.aborted, false);
      return createCharge(stack.sandboxUrl, { orderId: args.order_id, amount: args.amount, memo: "slow", idempotencyKey: ctx.idempotencyKey });
    });
    const charge = await chargeCard({ order_id: order, amount: "5.00" });
    assert.equal(runs, 1);
    const record = await stack.intent(await stack.intentKey({ order_id: order, amount: "5.00" }));
    assert.equal(record.state, "applied");
    assert.equal(record.effect_ref, charge.id);
    assert.deepEqual((await stack.charges(order)).map((c) => c.id), [charge.id]);
  }));

/** Starts worker.mjs, which charges `order` through protect() in its own process. */
function startWorker(stack, order, mode) {
  const env = { ...process.env, OG_URL: stack.url, OG_TOKEN: AGENT_TOKEN, OG_SANDBOX_URL: stack.sandboxUrl, OG_ORDER: order, OG_MODE: mode };
  const child = spawn(process.execPath, [WORKER], { env, stdio: ["ignore", "pipe", "pipe"] });
  const lines = [];
  const waiters = [];
  createInterface({ input: child.stdout }).on("line", (line) => {
    lines.push(line);
    for (const w of waiters.splice(0)) w();
  });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  return {
    child,
    exited,
    lines,
    stderr: () => stderr,
    async line(prefix, timeoutMs) {
      return waitFor(`a ${prefix} line from the worker`, () => lines.find((l) => l.startsWith(prefix)) ?? null, timeoutMs, 50);
    },
  };
}

test("a worker process killed after the provider committed is swept to applied, and the re-run replays", () =>
  withStack(async (stack) => {
    // Can fail: the re-run's function would post again (a second charge: keys are
    // ignored) and print CALLED if the gateway handed it the execution.
    const order = newOrder("killed");
    const worker = startWorker(stack, order, "hang");
    let key;
    let chargeId;
    try {
      const line = await worker.line("COMMITTED ", 30_000);
      const [, id, sentKey] = line.split(" ");
      chargeId = id;
      const [effect] = await stack.charges(order);
      assert.equal(effect.id, chargeId);
      assert.equal(effect.idempotency_key, sentKey);
      key = await stack.intentKey({ order_id: order, amount: "45.00" });
      assert.equal((await stack.intent(key)).state, "in_flight", "claimed, nothing recorded yet");
    } finally {
      worker.child.kill("SIGKILL");
    }
    assert.equal((await worker.exited).signal, "SIGKILL");

    const record = await stack.waitState(key, "applied", LEASE_MS + 15_000);
    assert.equal(record.effect_ref, chargeId);
    assert.equal(record.executions, 1);
    // Nobody completed it: the sweep took the expired claim and found the charge.
    const toApplied = (await stack.audit(key)).filter((e) => e.to === "applied");
    assert.equal(toApplied.length, 1);
    assert.equal(toApplied[0].kind, "reconcile");
    assert.equal(toApplied[0].detail.effect_ref, chargeId);

    const rerun = startWorker(stack, order, "normal");
    const { code } = await rerun.exited;
    assert.equal(code, 0, `the re-run failed:\n${rerun.lines.join("\n")}\n${rerun.stderr()}`);
    assert.ok(!rerun.lines.includes("CALLED"), `the function ran again:\n${rerun.lines.join("\n")}`);
    const result = rerun.lines.find((l) => l.startsWith("RESULT "));
    assert.equal(JSON.parse(result.slice("RESULT ".length)).id, chargeId);
    assert.deepEqual((await stack.charges(order)).map((c) => c.id), [chargeId]);
  }));

test("a refused connection is recorded not_sent, and the next call executes: one charge", () =>
  withStack(async (stack) => {
    // The first attempt's provider call is refused at connect (a closed port): nothing
    // left, so the client records not_sent; the reconciliation read finds nothing, and
    // the next call executes at once. Can fail: a client that recorded `unknown` would
    // leave the intent unknown without `not_sent_reported` (the next call answers
    // OutcomeUnknown until the settle horizon); one that recorded `failed` would replay
    // the failure instead of executing.
    const order = newOrder("notsent");
    const provider = { url: `http://127.0.0.1:${await closedPort()}` };
    const keys = [];
    const gate = new Client(stack.url, { token: AGENT_TOKEN, logger: quiet });
    const chargeCard = gate.protect("charge_card", async (args, { idempotencyKey }) => {
      keys.push(idempotencyKey);
      return createCharge(provider.url, { orderId: args.order_id, amount: args.amount, memo: args.memo, idempotencyKey });
    });

    await assert.rejects(chargeCard({ order_id: order, amount: "9.99", memo: "first" }), (err) => {
      assert.ok(err instanceof TypeError && err.message === "fetch failed", String(err));
      assert.equal(err.cause.code, "ECONNREFUSED");
      return true;
    });
    const key = await stack.intentKey({ order_id: order, amount: "9.99" });
    const first = await stack.intent(key);
    assert.ok(first.state === "unknown" && first.not_sent_reported, JSON.stringify(first));
    assert.deepEqual(await stack.charges(order), []);

    provider.url = stack.sandboxUrl;
    const charge = await chargeCard({ order_id: order, amount: "9.99", memo: "second" });
    assert.equal(keys.length, 2);
    assert.equal(keys[0], keys[1], "the re-execution sends the same key");
    assert.deepEqual((await stack.charges(order)).map((c) => c.id), [charge.id]);
    const record = await stack.intent(key);
    assert.equal(record.state, "applied");
    assert.equal(record.effect_ref, charge.id);
  }));
