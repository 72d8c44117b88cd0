"""A desktop-style agent that speaks only stdio: the PyPI `mcp` stdio client launches
`oncegate connect`, which bridges it to a running gateway's /mcp.

Run by crates/oncegate-cli/tests/it/mcp.rs against `oncegate serve` in front of the
`oncegate sandbox` provider; installed by tests/clients/setup.sh. It lists the tools,
charges an order while the provider stalls past the gateway's timeout, re-plans twice
with drifting arguments, reads the order, and checks that the provider holds one
charge; then a bridge with a wrong token must fail its client promptly, not hang.

    python stdio_agent.py --oncegate target/debug/oncegate --url http://127.0.0.1:7878/mcp \
        --token-env ONCEGATE_TOKEN --sandbox http://127.0.0.1:9000 --sandbox-key sk_test \
        --order S-1 --era legacy

Exit code 0 when every check holds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

OUTCOME = "dev.oncegate/outcome"


class CheckFailed(Exception):
    pass


def check(cond: bool, what: str, context: Any = None) -> None:
    if not cond:
        detail = "" if context is None else f"\n  got: {context}"
        raise CheckFailed(f"FAIL {what}{detail}")
    print(f"ok   {what}", flush=True)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--oncegate", required=True, help="the oncegate binary")
    p.add_argument("--url", required=True, help="the gateway's MCP endpoint")
    p.add_argument("--token-env", required=True, help="the variable holding an agent's token")
    p.add_argument("--sandbox", required=True)
    p.add_argument("--sandbox-key", required=True)
    p.add_argument("--order", required=True)
    p.add_argument("--era", required=True, choices=["legacy", "2026-07-28"])
    p.add_argument("--stall-ms", type=int, default=8000)
    return p.parse_args()


def sandbox_fault(args: argparse.Namespace, fault: str, delay_ms: int) -> None:
    body = json.dumps({"path": "/v1/charges", "fault": fault, "times": 1, "delay_ms": delay_ms}).encode()
    req = urllib.request.Request(
        f"{args.sandbox}/_sandbox/faults", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        check(200 <= r.status < 300, f"sandbox queued {fault} on /v1/charges", r.status)


def sandbox_charges(args: argparse.Namespace, order: str) -> list[dict[str, Any]]:
    req = urllib.request.Request(
        f"{args.sandbox}/v1/effects?kind=charge&order_id={order}",
        headers={"Authorization": f"Bearer {args.sandbox_key}"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)["effects"]


def bridge(args: argparse.Namespace, token_env: str) -> Client:
    params = StdioServerParameters(
        command=args.oncegate,
        args=["connect", "--url", args.url, "--token-env", token_env],
        env={token_env: os.environ.get(token_env, "wrong-token")},
    )
    return Client(params, mode="legacy" if args.era == "legacy" else "auto")


def outcome(result: types.CallToolResult) -> dict[str, Any]:
    return (result.meta or {}).get(OUTCOME) or {}


def first_text(result: types.CallToolResult) -> str:
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    return texts[0] if texts else ""


async def main(args: argparse.Namespace) -> None:
    order = args.order
    async with bridge(args, args.token_env) as client:
        version = client.protocol_version
        if args.era == "legacy":
            check(version in HANDSHAKE_PROTOCOL_VERSIONS, f"the handshake negotiated {version} over stdio", version)
        else:
            check(version == "2026-07-28", "server/discover negotiated 2026-07-28 over stdio", version)
        tools = {t.name for t in (await client.list_tools()).tools}
        check("charge_card" in tools and "get_order" in tools, "tools/list through the bridge", sorted(tools))

        sandbox_fault(args, "stall_after_commit", args.stall_ms)
        started = time.monotonic()
        first = await client.call_tool(
            "charge_card", {"order_id": order, "amount": "12.50", "currency": "USD", "memo": f"order {order}"}
        )
        print(f"..   first call answered after {time.monotonic() - started:.1f} s: {first_text(first)!r}", flush=True)
        check(outcome(first).get("status") in {"unknown", "in_flight"}, "the timed-out charge reads unknown", first)
        # Wait out the stall, then re-plan with drifted arguments.
        await anyio.sleep(max(0.0, args.stall_ms / 1000 + 0.5 - (time.monotonic() - started)))
        for i, arguments in enumerate(
            [
                {"order_id": order, "amount": 12.5, "currency": "USD", "memo": "retrying"},
                {"order_id": order, "amount": "12.50 USD", "memo": "did it go through?"},
            ],
            start=1,
        ):
            again = await client.call_tool("charge_card", arguments)
            check(outcome(again).get("status") == "replayed", f"re-plan {i} over stdio is replayed", again)
        read = await client.call_tool("get_order", {"order_id": order})
        check(not read.is_error, "get_order passes through the bridge", read)

    charges = sandbox_charges(args, order)
    check(len(charges) == 1, "the provider holds exactly one charge", charges)

    # A wrong token: the client hears an error at once instead of waiting forever.
    os.environ["ONCEGATE_STDIO_WRONG"] = "not-a-token"
    started = time.monotonic()
    failed = False
    with anyio.move_on_after(20):
        try:
            async with bridge(args, "ONCEGATE_STDIO_WRONG") as client:
                await client.list_tools()
        except Exception as e:  # noqa: BLE001 - any failure is the expected outcome
            failed = True
            print(f"..   wrong token: {type(e).__name__}: {e}", flush=True)
    check(failed and time.monotonic() - started < 20, "a bridge with a wrong token fails its client promptly")
    print("every check holds", flush=True)


if __name__ == "__main__":
    a = parse_args()
    try:
        anyio.run(main, a)
    except CheckFailed as e:
        print(e, flush=True)
        sys.exit(1)
