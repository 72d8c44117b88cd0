// The client without a gateway: the notSent classification of real fetch failures, the
// errors' model lines, the wire's parsing, and the lease check before sending.

import assert from "node:assert/strict";
import { createServer as createHttpServer } from "node:http";
import { createServer } from "node:net";
import { test } from "node:test";

import { Client, CompletionNotRecorded, Execute, InFlight, Outcome, OutcomeError, StaleClaim, errorForOutcome, notSent, run, step, current } from "../dist/index.js";
import { leaseMsLeft, parseOutcome, parseTimestamp } from "../dist/models.js";
import { closedPort } from "./harness.mjs";

/** The error `fetch` rejects with for `url`, or a failure when it resolves. */
async function fetchError(url, init = {}) {
  try {
    await fetch(url, { method: "POST", body: "{}", ...init });
  } catch (err) {
    return err;
  }
  throw new Error(`fetch ${url} answered`);
}

/** A loopback server that does `onConnection(socket)`; answers its URL and a stop function. */
async function server(onConnection) {
  const srv = createServer(onConnection);
  await new Promise((resolve) => srv.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${srv.address().port}/`, stop: () => srv.close() };
}

function undiciFailure(code) {
  return new TypeError("fetch failed", { cause: Object.assign(new Error(`getaddrinfo ${code} nowhere.invalid`), { code }) });
}

test("a refused connection is not sent", async () => {
  const err = await fetchError(`http://127.0.0.1:${await closedPort()}/`);
  assert.equal(err.cause?.code, "ECONNREFUSED");
  assert.equal(notSent.isNotSent(err), true);
});

test("a DNS failure (ENOTFOUND, EAI_AGAIN) is not sent", () => {
  assert.equal(notSent.isNotSent(undiciFailure("ENOTFOUND")), true);
  assert.equal(notSent.isNotSent(undiciFailure("EAI_AGAIN")), true);
});

test("a reset after connecting may have been sent", async () => {
  const srv = await server((socket) => socket.once("data", () => socket.resetAndDestroy()));
  try {
    const err = await fetchError(srv.url);
    assert.ok(["ECONNRESET", "UND_ERR_SOCKET"].includes(err.cause?.code), String(err.cause?.code));
    assert.equal(notSent.isNotSent(err), false);
  } finally {
    srv.stop();
  }
});

test("a timeout after connecting may have been sent", async () => {
  const sockets = [];
  const srv = await server((socket) => sockets.push(socket));
  try {
    const err = await fetchError(srv.url, { signal: AbortSignal.timeout(300) });
    assert.equal(err.name, "TimeoutError");
    assert.equal(notSent.isNotSent(err), false);
  } finally {
    for (const s of sockets) s.destroy();
    srv.stop();
  }
});

test("a 5xx is no error of fetch's, and a function's error for it is unknown", () => {
  assert.equal(notSent.isNotSent(new Error("the provider answered 503")), false);
});

test("the cause chain is not followed past fetch's own wrapper", () => {
  // An SDK that retried wraps its last try's failure: its first try may have been sent.
  const sdkError = new Error("Connection error.", { cause: undiciFailure("ECONNREFUSED") });
  assert.equal(notSent.isNotSent(sdkError), false);
  const nested = new TypeError("fetch failed", { cause: new Error("wrapped", { cause: undiciFailure("ECONNREFUSED") }) });
  assert.equal(notSent.isNotSent(nested), false);
});

test("openai without credentials is not sent; its connection error is unknown", async () => {
  // Real errors from the real SDK (a dev dependency): `new OpenAI()` refuses to be built
  // without a key, nothing can have left; a request to a closed port is wrapped in
  // openai's own APIConnectionError (and retried by default), and stays unknown.
  const { default: OpenAI, APIConnectionError } = await import("openai");
  const saved = { key: process.env.OPENAI_API_KEY, admin: process.env.OPENAI_ADMIN_KEY };
  delete process.env.OPENAI_API_KEY;
  delete process.env.OPENAI_ADMIN_KEY;
  let missing;
  try {
    new OpenAI();
  } catch (err) {
    missing = err;
  } finally {
    if (saved.key !== undefined) process.env.OPENAI_API_KEY = saved.key;
    if (saved.admin !== undefined) process.env.OPENAI_ADMIN_KEY = saved.admin;
  }
  assert.ok(missing instanceof Error && missing.message.startsWith("Missing credentials."), String(missing));
  assert.equal(notSent.isNotSent(missing), true);

  const client = new OpenAI({ apiKey: "sk-test", baseURL: `http://127.0.0.1:${await closedPort()}/v1`, maxRetries: 0 });
  const refused = await client.models.list().then(() => null, (err) => err);
  assert.ok(refused instanceof APIConnectionError, String(refused));
  assert.equal(notSent.isNotSent(refused), false);
});

test("the classification is extendable by class, code and predicate", () => {
  class SdkConnectError extends Error {}
  assert.equal(notSent.isNotSent(new SdkConnectError("x")), false);
  notSent.register(SdkConnectError);
  assert.equal(notSent.isNotSent(new SdkConnectError("x")), true);
  const coded = Object.assign(new Error("x"), { code: "MY_SDK_CONNECT" });
  assert.equal(notSent.isNotSent(coded), false);
  notSent.registerCode("MY_SDK_CONNECT");
  assert.equal(notSent.isNotSent(coded), true);
  notSent.registerPredicate((e) => e instanceof Error && e.message === "never left");
  assert.equal(notSent.isNotSent(new Error("never left")), true);
  assert.equal(notSent.never(undiciFailure("ECONNREFUSED")), false);
});

const envelope = (status, extra = {}) => ({
  status,
  intent_key: "k1",
  generation: 1,
  attempt: 1,
  state: null,
  effect_ref: null,
  result: null,
  approval_id: null,
  reason: null,
  alerts: [],
  message: `${status.toUpperCase()}: a line for the model.`,
  ...extra,
});

test("String(err) is the model line, and each status has its error", () => {
  const err = errorForOutcome(parseOutcome(envelope("in_flight"), 409));
  assert.ok(err instanceof InFlight && err instanceof OutcomeError);
  assert.equal(String(err), "IN_FLIGHT: a line for the model.");
  assert.equal(err.intentKey, "k1");
  assert.equal(errorForOutcome(parseOutcome(envelope("pending_approval", { approval_id: "ap_1" }), 202)).approvalId, "ap_1");
  assert.equal(errorForOutcome(parseOutcome(envelope("replayed", { state: "failed" }), 200)).name, "Failed");
  assert.equal(errorForOutcome(parseOutcome(envelope("refused", { reason: { code: "OG-0004", message: "x" } }), 429)).code, "OG-0004");
  assert.equal(errorForOutcome(parseOutcome(envelope("replayed", { state: "applied" }), 200)), null);
  assert.equal(String(new StaleClaim("the claim is gone")), "OG-0024: the claim is gone (HTTP 409)");
});

test("timestamps with nine fractional digits, and a lease estimated against the gateway's Date", () => {
  assert.equal(parseTimestamp("2026-12-01T18:23:26.346114384Z").toISOString(), "2026-12-01T18:23:26.346Z");
  assert.equal(parseTimestamp("2026-12-01T19:23:26+01:00").toISOString(), "2026-12-01T18:23:26.000Z");
  const expires = new Date("2026-12-01T18:00:30.000Z");
  const date = "Tue, 01 Dec 2026 18:00:00 GMT";
  // The local clock agrees with the gateway: it is exact.
  assert.equal(leaseMsLeft(expires, date, Date.parse("2026-12-01T18:00:00.400Z")), 29_600);
  // The local clock is an hour off: the Date's estimate, less the second it may overstate.
  assert.equal(leaseMsLeft(expires, date, Date.parse("2026-12-01T19:00:00Z")), 29_000);
});

test("run() and step() carry the ids through awaits", async () => {
  assert.deepEqual(current(), { runId: null, stepId: null });
  await run("run-42", async () => {
    await new Promise((resolve) => setTimeout(resolve, 5));
    assert.deepEqual(current(), { runId: "run-42", stepId: null });
    await step("3", async () => {
      await Promise.resolve();
      assert.deepEqual(current(), { runId: "run-42", stepId: "3" });
    });
  });
  assert.throws(() => run("has space", () => 1), RangeError);
});

/** A Client whose gateway is a script: what the claims answer, and what was completed. */
class Scripted extends Client {
  constructor(answers) {
    super("http://127.0.0.1:9", { token: "t", logger: { warn() {}, error() {} } });
    this.answers = answers;
    this.completed = [];
  }
  async claim() {
    return this.answers.shift();
  }
  async complete(claim, outcome, record = {}) {
    this.completed.push({ outcome, ...record });
    return parseOutcome(envelope(outcome === "applied" ? "applied" : "unknown"), 200);
  }
}

const execute = (leaseMs) =>
  new Execute("k1", 1, 1, 1, new Date(Date.now() + leaseMs), "g1.e1.x", "k1", "charge_card", {}, "EXECUTE", leaseMs, performance.now(), {});

test("the lease is checked before sending: a claim with no lease left sends nothing", async () => {
  const gate = new Scripted([execute(0)]);
  let called = false;
  const charge = gate.protect("charge_card", async () => {
    called = true;
  });
  await assert.rejects(charge({ order_id: "A-1" }), StaleClaim);
  assert.equal(called, false);
  assert.deepEqual(gate.completed.map((c) => c.outcome), ["not_sent"]);
});

test("protect passes the key, records applied with the effect ref, and replays without calling", async () => {
  const replay = parseOutcome(envelope("replayed", { state: "applied", result: { id: "ch_1" }, effect_ref: "ch_1" }), 200);
  const gate = new Scripted([execute(30_000), replay]);
  const seen = [];
  const charge = gate.protect("charge_card", async (args, { idempotencyKey }) => {
    seen.push(idempotencyKey);
    return { id: "ch_1", order: args.order_id };
  });
  assert.deepEqual(await charge({ order_id: "A-1" }), { id: "ch_1", order: "A-1" });
  assert.deepEqual(gate.completed, [{ outcome: "applied", effectRef: "ch_1", result: { id: "ch_1", order: "A-1" } }]);
  assert.deepEqual(await charge({ order_id: "A-1" }), { id: "ch_1" });
  assert.deepEqual(seen, ["k1"]);
  assert.ok(replay instanceof Outcome);
});

test("a function that throws is recorded unknown, or not_sent on proof", async () => {
  const gate = new Scripted([execute(30_000), execute(30_000)]);
  const charge = gate.protect("charge_card", async (args) => {
    throw args.refused ? undiciFailure("ECONNREFUSED") : new Error("read timed out");
  });
  await assert.rejects(charge({ order_id: "A-1", refused: false }), /read timed out/);
  await assert.rejects(charge({ order_id: "A-1", refused: true }), /fetch failed/);
  assert.deepEqual(gate.completed.map((c) => c.outcome), ["unknown", "not_sent"]);
  assert.equal(gate.completed[0].error, "Error: read timed out");
});

test("positional parameters need arguments, and the context comes after them", async () => {
  const gate = new Scripted([execute(30_000)]);
  assert.throws(() => gate.protect("charge_card", async (orderId, amount, ctx) => ctx), TypeError);
  const charge = gate.protect("charge_card", async (orderId, amount, ctx) => ({ id: `${orderId}/${amount}/${ctx.idempotencyKey}` }), {
    arguments: (orderId, amount) => ({ order_id: orderId, amount }),
  });
  assert.deepEqual(await charge("A-1", "1.00"), { id: "A-1/1.00/k1" });
  await assert.rejects(gate.protect("charge_card", async (order, ctx) => ctx)("A-1"), TypeError);
});

/** A gateway that answers each completion with the next of `replies` ("drop" closes the connection). */
async function scriptedGateway(replies) {
  const seen = [];
  const srv = createHttpServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => {
      seen.push({ path: req.url, body: JSON.parse(body) });
      const reply = replies.shift() ?? "drop";
      if (reply === "drop") {
        req.socket.destroy();
        return;
      }
      res.writeHead(reply.status, { "Content-Type": "application/json" }).end(JSON.stringify(reply.body));
    });
  });
  await new Promise((resolve) => srv.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${srv.address().port}`, seen, stop: () => srv.close() };
}

test("a completion is retried on transport errors and 503, and answers what was recorded", async () => {
  const storeDown = { status: 503, body: { error: { code: "OG-0007", message: "the store is unavailable" } } };
  const gw = await scriptedGateway(["drop", storeDown, { status: 200, body: envelope("applied", { effect_ref: "ch_1" }) }]);
  try {
    const gate = new Client(gw.url, { token: "t", logger: { warn() {}, error() {} } });
    const recorded = await gate.complete("k1", "applied", { fencingToken: "g1.e1.x", effectRef: "ch_1", result: { id: "ch_1" } });
    assert.equal(recorded.status, "applied");
    assert.equal(gw.seen.length, 3, "two failed tries, then the record");
    for (const { path, body } of gw.seen) {
      assert.equal(path, "/v1/intents/k1/complete");
      assert.deepEqual(body, { fencing_token: "g1.e1.x", outcome: "applied", effect_ref: "ch_1", result: { id: "ch_1" } });
    }
  } finally {
    gw.stop();
  }
});

test("a completion that never gets through is CompletionNotRecorded, after every retry", async () => {
  const gw = await scriptedGateway([]);
  try {
    const gate = new Client(gw.url, { token: "t", completeRetries: 2, logger: { warn() {}, error() {} } });
    await assert.rejects(gate.complete("k1", "unknown", { fencingToken: "g1.e1.x" }), (err) => {
      assert.ok(err instanceof CompletionNotRecorded, String(err));
      assert.equal(err.outcome, "unknown");
      assert.equal(err.intentKey, "k1");
      return true;
    });
    assert.equal(gw.seen.length, 3);
  } finally {
    gw.stop();
  }
});
