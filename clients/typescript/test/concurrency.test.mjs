// Many callers of one protected function at once: one intent, one effect.
//
// The function sleeps before it posts, so every caller's claim arrives while the first
// execution is still running; the sandbox charges every post it gets (keys ignored), so
// a second execution anywhere would be a second charge in its ledger.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, InFlight } from "../dist/index.js";
import { AGENT_TOKEN, createCharge, newOrder, sleep, withStack } from "./harness.mjs";

const CALLERS = 16;
/** Long enough that all the callers' claims land while the first execution runs. */
const WORK_MS = 500;

/** Each caller got its order's one charge (executed or replayed) or InFlight; nothing else. */
function classify(outcomes, chargeId) {
  const kinds = { charge: 0, in_flight: 0 };
  for (const outcome of outcomes) {
    if (outcome instanceof InFlight) {
      assert.ok(outcome.intentKey, "InFlight names the intent");
      assert.ok(String(outcome).length > 0 && !String(outcome).startsWith("InFlight"), "String(err) is the model line");
      kinds.in_flight += 1;
    } else if (outcome instanceof Error) {
      throw outcome;
    } else {
      assert.equal(outcome.id, chargeId, `a caller got another charge: ${JSON.stringify(outcome)}`);
      kinds.charge += 1;
    }
  }
  return kinds;
}

function protectedCharge(stack, runs) {
  const gate = new Client(stack.url, { token: AGENT_TOKEN });
  return gate.protect("charge_card", async (args, { idempotencyKey }) => {
    runs.set(args.order_id, (runs.get(args.order_id) ?? 0) + 1);
    await sleep(WORK_MS);
    return createCharge(stack.sandboxUrl, { orderId: args.order_id, amount: args.amount, memo: args.memo, idempotencyKey });
  });
}

test("16 concurrent calls for one order: one charge", () =>
  withStack(async (stack) => {
    const order = newOrder("one");
    const runs = new Map();
    const chargeCard = protectedCharge(stack, runs);
    const outcomes = await Promise.all(
      Array.from({ length: CALLERS }, (_, i) => chargeCard({ order_id: order, amount: "20.00", memo: `caller ${i}` }).catch((err) => err)),
    );
    const charges = await stack.charges(order);
    assert.equal(charges.length, 1, `${charges.length} charges for one order`);
    assert.equal(runs.get(order), 1, "the function ran once");
    const kinds = classify(outcomes, charges[0].id);
    assert.ok(kinds.charge >= 1);
    assert.equal(kinds.charge + kinds.in_flight, CALLERS);
    assert.equal((await stack.intent(await stack.intentKey({ order_id: order, amount: "20.00" }))).state, "applied");
  }));

test("16 concurrent calls across 5 orders: five charges, one per order", () =>
  withStack(async (stack) => {
    // Can fail both ways: a key that ignored the order would merge orders into fewer
    // charges; a claim that let two callers of one order through would make more.
    const orders = Array.from({ length: 5 }, (_, i) => newOrder(`many${i}`));
    const runs = new Map();
    const chargeCard = protectedCharge(stack, runs);
    const jobs = Array.from({ length: CALLERS }, (_, i) => orders[i % orders.length]);
    const outcomes = await Promise.all(
      jobs.map((order, i) => chargeCard({ order_id: order, amount: "7.00", memo: `caller ${i}` }).catch((err) => err)),
    );
    assert.equal((await stack.charges()).length, orders.length);
    for (const order of orders) {
      const charges = await stack.charges(order);
      assert.equal(charges.length, 1, `order ${order}: ${charges.length} charges`);
      assert.equal(runs.get(order), 1);
      const mine = outcomes.filter((_, i) => jobs[i] === order);
      const kinds = classify(mine, charges[0].id);
      assert.ok(kinds.charge >= 1, `order ${order}: nobody got the charge`);
    }
  }));
