// One round trip through oncegate's /mcp with the TypeScript MCP SDK client
// (@modelcontextprotocol/sdk, Streamable HTTP): list the tools, charge an order, charge it
// again with drifted arguments, and count the charges in the sandbox provider's ledger.
// Run by crates/oncegate-cli/tests/it/mcp.rs; installed by tests/clients/setup.sh.
//
//   node roundtrip.mjs --url http://127.0.0.1:7878/mcp --token tok-planner \
//     --sandbox http://127.0.0.1:9000 --sandbox-key sk_test --order N-1
//
// Exit code 0 when every check holds.

import { parseArgs } from "node:util";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const OUTCOME = "dev.oncegate/outcome";

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    token: { type: "string" },
    sandbox: { type: "string" },
    "sandbox-key": { type: "string" },
    order: { type: "string" },
    "run-id": { type: "string" },
  },
});
for (const name of ["url", "token", "sandbox", "sandbox-key", "order"]) {
  if (!args[name]) {
    console.error(`roundtrip: --${name} is required`);
    process.exit(2);
  }
}
const order = args.order;
const runId = args["run-id"] ?? `run-node-${order}`;

function check(cond, what, context) {
  if (!cond) {
    console.log(`FAIL ${what}${context === undefined ? "" : `\n  got: ${JSON.stringify(context)}`}`);
    process.exit(1);
  }
  console.log(`ok   ${what}`);
}

const text = (result) => (result.content ?? []).find((c) => c.type === "text")?.text ?? "";
const outcome = (result) => result._meta?.[OUTCOME] ?? {};

async function sandboxCharges() {
  const r = await fetch(`${args.sandbox}/v1/effects?kind=charge&order_id=${encodeURIComponent(order)}`, {
    headers: { Authorization: `Bearer ${args["sandbox-key"]}` },
  });
  check(r.ok, "the sandbox ledger answers", r.status);
  return (await r.json()).effects;
}

const transport = new StreamableHTTPClientTransport(new URL(args.url), {
  requestInit: { headers: { Authorization: `Bearer ${args.token}` } },
});
const client = new Client({ name: "oncegate-node-roundtrip", version: "0.1.0" });
await client.connect(transport);
console.log(`node roundtrip: @modelcontextprotocol/sdk, protocol ${transport.protocolVersion ?? "?"}, order ${order}`);

const { tools } = await client.listTools();
const charge = tools.find((t) => t.name === "charge_card");
check(charge !== undefined, "tools/list has charge_card", tools.map((t) => t.name));
check(charge.inputSchema?.type === "object", "charge_card has an object inputSchema", charge.inputSchema);
check(charge.annotations?.readOnlyHint === false, "charge_card is annotated readOnlyHint: false", charge.annotations);

const first = await client.callTool({
  name: "charge_card",
  arguments: { order_id: order, amount: "19.99", currency: "USD", memo: "node round trip" },
  _meta: { "dev.oncegate/run_id": runId, "dev.oncegate/step_id": "charge" },
});
console.log(`..   first call: ${JSON.stringify(text(first))}`);
const applied = outcome(first);
check(applied.status === "applied" && !first.isError, "the first call is applied", first);
check(
  typeof applied.effectRef === "string" && applied.effectRef.startsWith("ch_"),
  "the outcome names the charge",
  applied,
);
check(first.structuredContent?.id === applied.effectRef, "structuredContent is the provider's charge", first);
check(
  first.structuredContent?.oncegate?.status === "applied" && first.structuredContent.oncegate.message === text(first),
  "structuredContent.oncegate carries the outcome and the model line",
  first.structuredContent,
);

const again = await client.callTool({
  name: "charge_card",
  arguments: { order_id: order, amount: 19.99, currency: "usd", memo: "did it go through? charge again" },
  _meta: { "dev.oncegate/run_id": runId, "dev.oncegate/step_id": "charge-again" },
});
console.log(`..   repeat: ${JSON.stringify(text(again))}`);
const replayed = outcome(again);
check(replayed.status === "replayed" && !again.isError, "the drifted repeat is replayed", again);
check(replayed.effectRef === applied.effectRef, "the repeat names the same effect reference", [applied, replayed]);
check(
  text(again).startsWith("ALREADY APPLIED as " + applied.effectRef) && text(again).includes("do not call again"),
  "the model reads ALREADY APPLIED",
  text(again),
);
const provider = (s) => JSON.stringify({ ...s, oncegate: undefined });
check(
  provider(again.structuredContent) === provider(first.structuredContent),
  "the repeat returns the first call's structuredContent, the provider's fields untouched",
  [first.structuredContent, again.structuredContent],
);
check(
  again.structuredContent?.oncegate?.status === "replayed" &&
    again.structuredContent.oncegate.do_not_call_again === true &&
    again.structuredContent.oncegate.message === text(again),
  "structuredContent.oncegate says replayed, do not call again",
  again.structuredContent,
);
check(
  charge.outputSchema?.required?.includes("oncegate") && charge.outputSchema?.properties?.oncegate?.type === "object",
  "charge_card declares structuredContent.oncegate in its outputSchema",
  charge.outputSchema,
);

await client.close();

const charges = await sandboxCharges();
check(charges.length === 1, `the sandbox ledger holds exactly one charge for ${order}`, charges);
console.log("node roundtrip: every check holds");
