// oncegate/openai-agents: a protected function as an OpenAI Agents SDK (JS) tool, run by
// the SDK's real Runner with a Model that answers from a script: no LLM, no network
// beyond loopback. The test registry holds charges above 1,000.00 for an approver; the
// hold is the SDK's tool-approval interruption, the approver decides in oncegate through
// its JSON API, and the run resumes from its RunState.
//
// Can fail: the sandbox charges every POST (keys ignored), so any second execution is
// a second charge in its ledger, and each test counts them.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Agent, Usage, run, setTracingDisabled } from "@openai/agents";
import { z } from "zod";

import { Client } from "../dist/index.js";
import { deferToOncegate, oncegateTool, pendingApproval } from "../dist/openai-agents.js";
import { AGENT_TOKEN, APPROVER_TOKEN, HELD_AMOUNT, createCharge, newOrder, withStack } from "./harness.mjs";

// Nothing of a run may leave for a tracing backend.
setTracingDisabled(true);

const quiet = { warn() {}, error() {} };

/** A Model of the Agents SDK that answers each turn with the next scripted step. */
class ScriptedModel {
  constructor(steps) {
    this.steps = steps;
    this.turns = 0;
  }

  async getResponse() {
    const step = this.steps[Math.min(this.turns, this.steps.length - 1)];
    this.turns++;
    const output = step.call
      ? [{ type: "function_call", id: `fc_${this.turns}`, callId: `call_${this.turns}`, name: "charge_card", status: "completed", arguments: JSON.stringify(step.call) }]
      : [{ type: "message", id: `msg_${this.turns}`, role: "assistant", status: "completed", content: [{ type: "output_text", text: step.text }] }];
    return { usage: new Usage(), output };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse() {
    throw new Error("the test runs run(), not streaming");
  }
}

/** What each tool call answered the model, as text. */
function outputs(result) {
  const text = (o) => (typeof o === "string" ? o : typeof o?.text === "string" ? o.text : JSON.stringify(o));
  return result.newItems.filter((i) => i.type === "tool_call_output_item").map((i) => text(i.output));
}

/** Runs until the hold, decides it in oncegate, resumes from the state; answers the resumed run. */
async function heldRun(stack, order, script, runs, decide) {
  const gate = new Client(stack.url, { token: AGENT_TOKEN, logger: quiet });
  const chargeCard = gate.protect("charge_card", async (args, { idempotencyKey }) => {
    runs.push(args.memo);
    return createCharge(stack.sandboxUrl, { orderId: args.order_id, amount: args.amount, memo: args.memo, idempotencyKey });
  });
  const parameters = z.object({ order_id: z.string(), amount: z.string(), memo: z.string() });
  const chargeTool = oncegateTool(chargeCard, { name: "charge_card", description: "Charge the customer's card for an order.", parameters });
  const agent = new Agent({ name: "biller", instructions: "Charge orders.", tools: [chargeTool], model: new ScriptedModel(script) });

  const first = await run(agent, `Charge order ${order} ${HELD_AMOUNT}`, { maxTurns: 6 });
  assert.equal(first.interruptions.length, 1, "one tool-approval interruption");
  const held = pendingApproval(first.interruptions[0]);
  assert.ok(held?.approvalId?.startsWith("ap_"), JSON.stringify(held));
  assert.ok(held.message.includes(held.approvalId), held.message);
  assert.deepEqual(await stack.charges(order), []);
  assert.deepEqual(runs, []);

  const approver = new Client(stack.url, { token: APPROVER_TOKEN, logger: quiet });
  const decided = decide === "approve" ? await approver.approve(held.approvalId) : await approver.deny(held.approvalId);
  assert.equal(decided.status, decide === "approve" ? "approved" : "denied");

  assert.equal(deferToOncegate(first.state, first.interruptions), 1);
  const resumed = await run(agent, first.state, { maxTurns: 6 });
  assert.deepEqual(resumed.interruptions ?? [], []);
  return resumed;
}

test("openai-agents: a held call interrupts the run; approved in oncegate and resumed it executes once, a re-plan replays", () =>
  withStack(async (stack) => {
    const order = newOrder("agents-js-approve");
    const runs = [];
    const script = [
      { call: { order_id: order, amount: HELD_AMOUNT, memo: "a large charge" } },
      { call: { order_id: order, amount: "2500.00 USD", memo: "again, the result was lost" } },
      { text: "The order is charged." },
    ];
    const resumed = await heldRun(stack, order, script, runs, "approve");
    const charges = await stack.charges(order);
    assert.equal(charges.length, 1, `${charges.length} charges`);
    assert.deepEqual(runs, ["a large charge"]);
    assert.equal(resumed.finalOutput, "The order is charged.");
    const seen = outputs(resumed);
    assert.equal(seen.length, 2, JSON.stringify(seen));
    for (const o of seen) assert.ok(o.includes(charges[0].id), o);
  }));

test("openai-agents: denied in oncegate, the resumed run answers the deny's line", () =>
  withStack(async (stack) => {
    const order = newOrder("agents-js-deny");
    const runs = [];
    const script = [{ call: { order_id: order, amount: HELD_AMOUNT, memo: "a large charge" } }, { text: "Not charged." }];
    const resumed = await heldRun(stack, order, script, runs, "deny");
    const seen = outputs(resumed);
    assert.equal(seen.length, 1, JSON.stringify(seen));
    assert.match(seen[0], /^DENIED/);
    assert.equal(resumed.finalOutput, "Not charged.");
    assert.deepEqual(await stack.charges(order), []);
    assert.deepEqual(runs, []);
  }));
