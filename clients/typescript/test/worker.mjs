// A worker process for the killed-worker test in faults.test.mjs: it charges one order
// through protect(), as an agent's tool process would. In mode `hang` the function
// commits at the provider and then waits to be SIGKILLed before anything is recorded;
// in mode `normal` it commits and returns. It prints CALLED when the function body runs
// and RESULT <json> with what the protected call answered, so the test can tell a replay
// from an execution.

import { Client } from "../dist/index.js";
import { createCharge, sleep } from "./harness.mjs";

const mode = process.env.OG_MODE;
const gate = new Client(process.env.OG_URL, { token: process.env.OG_TOKEN });
const chargeCard = gate.protect("charge_card", async (args, { idempotencyKey }) => {
  console.log("CALLED");
  const charge = await createCharge(process.env.OG_SANDBOX_URL, { orderId: args.order_id, amount: args.amount, memo: args.memo, idempotencyKey });
  console.log("COMMITTED", charge.id, idempotencyKey);
  if (mode === "hang") await sleep(300_000);
  return charge;
});

const result = await chargeCard({ order_id: process.env.OG_ORDER, amount: "45.00", memo: `run in mode ${mode}` });
console.log("RESULT", JSON.stringify(result));
