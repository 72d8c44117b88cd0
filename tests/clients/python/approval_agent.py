"""An agent written against the PyPI `mcp` client whose call waits for a human, in-band.

Run by crates/oncegate-cli/tests/it/mcp_in_band.rs against `oncegate serve` in front of
the `oncegate sandbox` provider; installed by tests/clients/setup.sh. The agent asks for
a refund above 100.00, which the example's policy holds for an approver. At protocol
2026-07-28 oncegate answers `input_required` with a URL-mode elicitation (the console's
page of that approval) and a `requestState`; the client's own multi round-trip driver
(`Client.call_tool`) hands the elicitation to the callback below and then retries the
same call with the state, by itself. The callback plays the human: it checks the link,
decides through the JSON API as the approver (`--decide approve`, or `deny` with a
reason), and accepts. The one `call_tool` then returns the decision's outcome.

    python approval_agent.py --url http://127.0.0.1:7878/mcp --token tok-planner \
        --api http://127.0.0.1:7878 --approver-token tok-alice --order IB-1 --decide approve

Exit code 0 when every check holds.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.error
import urllib.request
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

OUTCOME = "dev.oncegate/outcome"
DENY_REASON = "not for this customer"


class CheckFailed(Exception):
    pass


def check(cond: bool, what: str, context: Any = None) -> None:
    if not cond:
        detail = "" if context is None else f"\n  got: {context}"
        raise CheckFailed(f"FAIL {what}{detail}")
    print(f"ok   {what}", flush=True)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="the gateway's MCP endpoint (http://host:port/mcp)")
    p.add_argument("--token", required=True, help="a bearer token of an agent principal")
    p.add_argument("--api", required=True, help="the gateway's base URL (for the approver's decision)")
    p.add_argument("--approver-token", required=True, help="a bearer token of an approver")
    p.add_argument("--order", required=True, help="the order to refund")
    p.add_argument("--decide", required=True, choices=["approve", "deny"])
    return p.parse_args()


def decide(args: argparse.Namespace, approval: str) -> dict[str, Any]:
    """The human's click, through the JSON API, as the approver."""
    body = json.dumps({"reason": DENY_REASON} if args.decide == "deny" else {}).encode()
    req = urllib.request.Request(
        f"{args.api}/v1/approvals/{approval}/{args.decide}",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {args.approver_token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:  # a deny answers 403 with its outcome
        return json.loads(e.read())


def outcome(result: types.CallToolResult) -> dict[str, Any]:
    return (result.meta or {}).get(OUTCOME) or {}


def first_text(result: types.CallToolResult) -> str:
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    return texts[0] if texts else ""


async def run(args: argparse.Namespace) -> None:
    asked: list[Any] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params)
        check(getattr(params, "mode", None) == "url", "the held call asks for a URL-mode elicitation", params)
        match = re.search(r"/console/approvals/(ap_[A-Za-z0-9_-]+)$", params.url)
        check(match is not None, "its URL is the console's page of the approval", params.url)
        check(args.api.split("://")[1] in params.url, "on this gateway", params.url)
        check("Nothing has been executed" in params.message, "its message says nothing ran yet", params.message)
        decided = await anyio.to_thread.run_sync(decide, args, match.group(1))
        print(f"     the approver decided: {decided.get('status')}", flush=True)
        return types.ElicitResult(action="accept")

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {args.token}"}, timeout=httpx2.Timeout(30.0, read=60.0)
    )
    async with http, Client(streamable_http_client(args.url, http_client=http), elicitation_callback=elicit) as client:
        check(client.protocol_version == "2026-07-28", "the client speaks 2026-07-28", client.protocol_version)
        arguments = {"order_id": args.order, "amount": "250.00"}
        result = await client.call_tool("refund", arguments)
        check(len(asked) == 1, "the approver was asked exactly once", asked)
        o = outcome(result)
        print(f"     the same call answered: {first_text(result)!r}", flush=True)
        if args.decide == "approve":
            check(not result.is_error, "the approved call completes", result)
            check(o.get("status") in ("applied", "replayed"), "with the approval's execution", o)
            check(bool(o.get("effectRef")), "and the provider's reference", o)
            again = await client.call_tool("refund", arguments)
            check(outcome(again).get("status") == "replayed", "a repeat is a replay", outcome(again))
            check(outcome(again).get("effectRef") == o.get("effectRef"), "of the same refund", outcome(again))
        else:
            check(result.is_error is True, "the denied call is an error result", result)
            check(o.get("status") == "denied", "denied", o)
            check(DENY_REASON in first_text(result), "with the approver's reason", first_text(result))
    print("every check holds", flush=True)


def main() -> int:
    args = parse_args()
    try:
        anyio.run(run, args)
    except CheckFailed as e:
        print(e, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
