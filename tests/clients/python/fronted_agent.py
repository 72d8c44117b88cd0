"""An agent written against the PyPI `mcp` client, using a fronted MCP server's tools.

Run by crates/oncegate-cli/tests/it/mcp.rs against `oncegate serve --config
examples/fronted.toml` (the README's "Fronting a whole MCP server") in front of the
`oncegate sandbox` provider, whose MCP server is fronted as `pay`. In each protocol era
it lists the tools (the declared `charge_card` and the read-only tools as `pay_<tool>`,
none of the other writes), charges an order and re-plans it with a drifted amount,
reads through a fronted read-only tool, and is refused a write no capability declares.

    python fronted_agent.py --url http://127.0.0.1:7880/mcp --token tok-planner \
        --sandbox http://127.0.0.1:7879 --sandbox-key sk_test --order F-1

Exit code 0 when every check holds.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

OUTCOME = "dev.oncegate/outcome"
LISTED = {
    "charge_card",
    "pay_find_charge",
    "pay_find_email",
    "pay_find_ledger_entry",
    "pay_find_refund",
    "pay_get_order",
    "pay_list_effects",
}


class CheckFailed(Exception):
    pass


def check(cond: bool, what: str, context: Any = None) -> None:
    if not cond:
        detail = "" if context is None else f"\n  got: {context}"
        raise CheckFailed(f"FAIL {what}{detail}")
    print(f"ok   {what}", flush=True)


def first_text(result: types.CallToolResult) -> str:
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    return texts[0] if texts else ""


def outcome(result: types.CallToolResult) -> dict[str, Any]:
    return (result.meta or {}).get(OUTCOME) or {}


def sandbox_charges(args: argparse.Namespace, order: str) -> list[dict[str, Any]]:
    req = urllib.request.Request(
        f"{args.sandbox}/v1/effects?kind=charge&order_id={order}",
        headers={"Authorization": f"Bearer {args.sandbox_key}"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)["effects"]


async def era(args: argparse.Namespace, mode: str) -> None:
    order = f"{args.order}-{mode}"
    headers = {"Authorization": f"Bearer {args.token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http, Client(
        streamable_http_client(args.url, http_client=http), mode=mode
    ) as gw:
        names = {t.name for t in (await gw.list_tools()).tools}
        check(names == LISTED, f"{mode}: the declared tool and the read-only ones are listed", sorted(names))

        first = await gw.call_tool("charge_card", {"order_id": order, "amount": "3.00"})
        check(not first.is_error and first_text(first).startswith("APPLIED as ch_"), f"{mode}: charged", first_text(first))
        # The model lost the result and re-plans with the amount spelled another way.
        again = await gw.call_tool("charge_card", {"order_id": order, "amount": 3})
        check(outcome(again).get("status") == "replayed", f"{mode}: the drifted re-plan replays", outcome(again))

        read = await gw.call_tool("pay_get_order", {"order_id": order})
        check(not read.is_error and first_text(read) == "OK: read answered.", f"{mode}: a fronted read passes through", first_text(read))
        check(order in json.dumps(read.model_dump(by_alias=True)), f"{mode}: the read answers the server's record", read)

        refund = await gw.call_tool("pay_create_refund", {"charge_id": "ch_x", "amount_minor": 1})
        check(
            refund.is_error and first_text(refund).startswith("REFUSED: pay_create_refund is refused"),
            f"{mode}: an undeclared write is refused",
            first_text(refund),
        )
    charges = sandbox_charges(args, order)
    check(len(charges) == 1, f"{mode}: the provider holds one charge for {order}", charges)


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--sandbox", required=True)
    p.add_argument("--sandbox-key", required=True)
    p.add_argument("--order", required=True, help="orders ORDER-legacy and ORDER-auto are charged")
    args = p.parse_args()
    for mode in ["legacy", "auto"]:
        await era(args, mode)
    print("every check holds", flush=True)


if __name__ == "__main__":
    try:
        anyio.run(main)
    except CheckFailed as e:
        print(e, flush=True)
        sys.exit(1)
