// The types a caller of protect() gets, checked by `tsc --strict --noEmit` (run by
// crates/oncegate-cli/tests/it/typescript_client.rs). Each `@ts-expect-error` line MUST
// be an error: tsc fails when the error it expects disappears, so a protected function
// that lost its parameter types (became `(...args: any[]) => Promise<any>`) fails here.

import { Client, InFlight, notSent, run, type ProtectContext } from "../../dist/index.js";

interface Charge {
  id: string;
  amount_minor: number;
}

const gate = new Client("http://127.0.0.1:7878", { token: "tok" });

// The one-object form: the object is the capability arguments.
const chargeCard = gate.protect(
  "charge_card",
  async (order: { order_id: string; amount: string; memo?: string }, ctx: ProtectContext): Promise<Charge> => {
    const key: string = ctx.idempotencyKey;
    return { id: key, amount_minor: 1 };
  },
);

// Positional parameters, with arguments naming the capability arguments.
const refund = gate.protect(
  "refund",
  (orderId: string, cents: number, ctx: ProtectContext): Charge => ({ id: `${orderId}${ctx.intentKey}`, amount_minor: cents }),
  { arguments: (orderId, cents) => ({ order_id: orderId, amount: (cents / 100).toFixed(2) }) },
);

async function typed(): Promise<void> {
  // Parameters and the resolved type are fn's own.
  const charge: Charge = await chargeCard({ order_id: "A-1", amount: "12.50" });
  const id: string = charge.id;
  const back: Charge = await refund("A-1", 1250);

  // @ts-expect-error: a number where the order id is a string
  await chargeCard({ order_id: 42, amount: "12.50" });
  // @ts-expect-error: a missing capability argument
  await chargeCard({ order_id: "A-1" });
  // @ts-expect-error: the second argument is a number, not a string
  await refund("A-1", "12.50");
  // @ts-expect-error: the caller never passes the context (oncegate owns the key)
  await refund("A-1", 1250, { idempotencyKey: "mine" });
  // @ts-expect-error: the result is a Charge, not a string
  const wrong: string = await chargeCard({ order_id: "A-1", amount: "1.00" });

  // run() keeps its callback's type.
  const inRun: Promise<Charge> = run("run-42", () => chargeCard({ order_id: "A-2", amount: "3.00" }));
  await inRun;

  try {
    await chargeCard({ order_id: "A-3", amount: "1.00" });
  } catch (err) {
    if (err instanceof InFlight) {
      const line: string = String(err);
      const key: string | null = err.intentKey;
      void line;
      void key;
    }
  }
  notSent.registerCode("MY_SDK_CONNECT_FAILED");
  void id;
  void back;
  void wrong;
}

void typed;
