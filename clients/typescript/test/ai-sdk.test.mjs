// oncegate/ai-sdk: a protected function as a Vercel AI SDK tool, run by the SDK's real
// generateText with its test model (MockLanguageModelV4 from `ai/test`) answering
// from a script: no LLM, no network beyond loopback. The test registry holds charges
// above 1,000.00 for an approver; the hold is the SDK's tool-approval request, the
// approver decides in oncegate through its JSON API, and the run resumes with the
// SDK's tool-approval response.
//
// Can fail: the sandbox charges every POST (keys ignored), so any second execution is
// a second charge in its ledger, and each test counts them.

import assert from "node:assert/strict";
import { test } from "node:test";

import { generateText, jsonSchema, stepCountIs } from "ai";
import { MockLanguageModelV4 } from "ai/test";

import { Client } from "../dist/index.js";
import { deferToOncegate, oncegateTool, toolApproval } from "../dist/ai-sdk.js";
import { AGENT_TOKEN, APPROVER_TOKEN, HELD_AMOUNT, createCharge, newOrder, withStack } from "./harness.mjs";

const quiet = { warn() {}, error() {} };
const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/** A model that answers each generate call with the next scripted step. */
function scriptedModel(steps) {
  let turn = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async () => {
      const step = steps[Math.min(turn, steps.length - 1)];
      turn++;
      if (step.call) {
        return {
          content: [{ type: "tool-call", toolCallId: `call_${turn}`, toolName: "charge_card", input: JSON.stringify(step.call) }],
          finishReason: { unified: "tool-calls", raw: "tool_calls" },
          usage,
          warnings: [],
        };
      }
      return { content: [{ type: "text", text: step.text }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
    },
  });
  return { model, turns: () => turn };
}

function chargeTools(stack, runs) {
  const gate = new Client(stack.url, { token: AGENT_TOKEN, logger: quiet });
  const chargeCard = gate.protect("charge_card", async (args, { idempotencyKey }) => {
    runs.push(args.memo);
    return createCharge(stack.sandboxUrl, { orderId: args.order_id, amount: args.amount, memo: args.memo, idempotencyKey });
  });
  const inputSchema = jsonSchema({
    type: "object",
    properties: { order_id: { type: "string" }, amount: { type: "string" }, memo: { type: "string" } },
    required: ["order_id", "amount", "memo"],
    additionalProperties: false,
  });
  return { charge_card: oncegateTool(chargeCard, { description: "Charge the customer's card for an order.", inputSchema }) };
}

function toolResults(messages) {
  return messages.filter((m) => m.role === "tool").flatMap((m) => m.content.filter((p) => p.type === "tool-result"));
}

/** Runs until the hold, decides it in oncegate, resumes; answers both runs. */
async function heldRun(stack, order, script, runs, decide) {
  const tools = chargeTools(stack, runs);
  const { model } = scriptedModel(script);
  const prompt = [{ role: "user", content: `Charge order ${order} ${HELD_AMOUNT}` }];
  const settings = { model, tools, toolApproval: toolApproval(tools), stopWhen: stepCountIs(6) };
  const first = await generateText({ ...settings, messages: prompt });
  const requests = first.content.filter((p) => p.type === "tool-approval-request");
  assert.equal(requests.length, 1, `one approval request: ${JSON.stringify(first.content)}`);
  const approvalId = /HELD FOR HUMAN APPROVAL (ap_\S+)/.exec(requests[0].reason ?? "")?.[1];
  assert.ok(approvalId, `the request's reason names the oncegate approval: ${JSON.stringify(requests[0])}`);
  assert.deepEqual(await stack.charges(order), []);
  assert.deepEqual(runs, []);

  const approver = new Client(stack.url, { token: APPROVER_TOKEN, logger: quiet });
  const decided = decide === "approve" ? await approver.approve(approvalId) : await approver.deny(approvalId);
  assert.equal(decided.status, decide === "approve" ? "approved" : "denied");

  const messages = [...prompt, ...first.responseMessages, deferToOncegate(first.content)];
  const next = await generateText({ ...settings, messages });
  return { first, next };
}

test("ai-sdk: a held call is a tool-approval request; approved in oncegate it executes once, a re-plan replays", () =>
  withStack(async (stack) => {
    const order = newOrder("ai-approve");
    const runs = [];
    const script = [
      { call: { order_id: order, amount: HELD_AMOUNT, memo: "a large charge" } },
      { call: { order_id: order, amount: "2500.00 USD", memo: "again, the result was lost" } },
      { text: "The order is charged." },
    ];
    const { next } = await heldRun(stack, order, script, runs, "approve");
    const charges = await stack.charges(order);
    assert.equal(charges.length, 1, `${charges.length} charges`);
    assert.deepEqual(runs, ["a large charge"]);
    assert.equal(next.text, "The order is charged.");
    const results = [...toolResults(next.responseMessages)];
    assert.equal(results.length, 2, JSON.stringify(next.responseMessages));
    for (const r of results) assert.equal(r.output.value.id, charges[0].id, JSON.stringify(r));
  }));

test("ai-sdk: denied in oncegate, the resumed run records execution-denied with the deny's line", () =>
  withStack(async (stack) => {
    const order = newOrder("ai-deny");
    const runs = [];
    const script = [{ call: { order_id: order, amount: HELD_AMOUNT, memo: "a large charge" } }, { text: "Not charged." }];
    const { next } = await heldRun(stack, order, script, runs, "deny");
    const results = toolResults(next.responseMessages);
    assert.equal(results.length, 1, JSON.stringify(next.responseMessages));
    assert.equal(results[0].output.type, "execution-denied");
    assert.match(results[0].output.reason, /^DENIED/);
    assert.equal(next.text, "Not charged.");
    assert.deepEqual(await stack.charges(order), []);
    assert.deepEqual(runs, []);
  }));
