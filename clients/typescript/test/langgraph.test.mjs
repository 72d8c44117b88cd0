// oncegate/langgraph: a held call pauses a real LangGraph.js graph (a StateGraph on a
// MemorySaver checkpointer) with the graph's own interrupt(), carrying the approval id;
// Command({ resume }) after the approver decided in oncegate (through its JSON API)
// executes once, and resuming the interrupted checkpoint a second time replays.
//
// Can fail: the sandbox charges every POST (keys ignored), so any second execution is
// a second charge in its ledger, and each test counts them.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";

import { Annotation, Command, END, MemorySaver, START, StateGraph } from "@langchain/langgraph";

import { Client, OutcomeError } from "../dist/index.js";
import { interruptOnHold } from "../dist/langgraph.js";
import { AGENT_TOKEN, APPROVER_TOKEN, HELD_AMOUNT, createCharge, newOrder, withStack } from "./harness.mjs";

const quiet = { warn() {}, error() {} };

const State = Annotation.Root({
  order_id: Annotation(),
  amount: Annotation(),
  receipt: Annotation(),
  answer: Annotation(),
});

/** START -> charge -> END, the charge node calling the protected function through interruptOnHold. */
function chargeGraph(stack, runs) {
  const gate = new Client(stack.url, { token: AGENT_TOKEN, logger: quiet });
  const charge = interruptOnHold(
    gate.protect("charge_card", async (args, { idempotencyKey }) => {
      runs.push(args.order_id);
      return createCharge(stack.sandboxUrl, { orderId: args.order_id, amount: args.amount, memo: "graph charge", idempotencyKey });
    }),
  );
  const graph = new StateGraph(State)
    .addNode("charge", async (state) => {
      try {
        return { receipt: await charge({ order_id: state.order_id, amount: state.amount }) };
      } catch (err) {
        // The line for the model: what a denied (or otherwise refused) call answers.
        if (err instanceof OutcomeError) return { answer: String(err) };
        throw err;
      }
    })
    .addEdge(START, "charge")
    .addEdge("charge", END);
  return graph.compile({ checkpointer: new MemorySaver() });
}

async function interrupts(app, config) {
  const snapshot = await app.getState(config);
  return snapshot.tasks.flatMap((t) => t.interrupts ?? []).map((i) => i.value);
}

test("langgraph.js: a held call interrupts the graph; resumed after the approval it executes once, a second resume replays", () =>
  withStack(async (stack) => {
    const order = newOrder("lg-js-approve");
    const runs = [];
    const app = chargeGraph(stack, runs);
    const config = { configurable: { thread_id: randomUUID() } };

    await app.invoke({ order_id: order, amount: HELD_AMOUNT }, config);
    const [held, ...more] = await interrupts(app, config);
    assert.equal(more.length, 0);
    assert.equal(held?.type, "oncegate.pending_approval", JSON.stringify(held));
    assert.equal(held.capability, "charge_card");
    assert.ok(held.approvalId.startsWith("ap_") && held.message.includes(held.approvalId), JSON.stringify(held));
    const interrupted = await app.getState(config);
    assert.deepEqual(await stack.charges(order), []);

    // Resumed before the approver decided: the graph pauses again, nothing ran.
    await app.invoke(new Command({ resume: held.approvalId }), config);
    assert.equal((await interrupts(app, config))[0]?.approvalId, held.approvalId);
    assert.deepEqual(await stack.charges(order), []);
    assert.deepEqual(runs, []);

    const approver = new Client(stack.url, { token: APPROVER_TOKEN, logger: quiet });
    assert.equal((await approver.approve(held.approvalId)).status, "approved");
    const done = await app.invoke(new Command({ resume: held.approvalId }), config);
    assert.deepEqual(await interrupts(app, config), []);
    const charges = await stack.charges(order);
    assert.equal(charges.length, 1, `${charges.length} charges`);
    assert.equal(done.receipt.id, charges[0].id);
    assert.deepEqual(runs, [order]);

    // The interrupted checkpoint resumed a second time re-runs the node: a replay.
    const again = await app.invoke(new Command({ resume: held.approvalId }), interrupted.config);
    assert.equal(again.receipt.id, charges[0].id);
    assert.equal((await stack.charges(order)).length, 1);
    assert.deepEqual(runs, [order]);
  }));

test("langgraph.js: denied in oncegate, the resumed node answers the deny's line", () =>
  withStack(async (stack) => {
    const order = newOrder("lg-js-deny");
    const runs = [];
    const app = chargeGraph(stack, runs);
    const config = { configurable: { thread_id: randomUUID() } };

    await app.invoke({ order_id: order, amount: HELD_AMOUNT }, config);
    const [held] = await interrupts(app, config);
    const approver = new Client(stack.url, { token: APPROVER_TOKEN, logger: quiet });
    assert.equal((await approver.deny(held.approvalId)).status, "denied");
    const done = await app.invoke(new Command({ resume: held.approvalId }), config);
    assert.match(done.answer, /^DENIED/);
    assert.equal(done.receipt, undefined);
    assert.deepEqual(await stack.charges(order), []);
    assert.deepEqual(runs, []);
  }));
