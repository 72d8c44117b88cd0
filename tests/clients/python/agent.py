"""An agent written against the PyPI `mcp` client, trying every way to charge one order twice.

Run by crates/oncegate-cli/tests/it/mcp.rs against `oncegate serve` in front of the
`oncegate sandbox` provider; installed by tests/clients/setup.sh. It acts as an agent
would: it lists the tools, charges an order while the provider stalls past the
gateway's timeout, then re-plans three times with drifting arguments and a fresh
tools/call each time, and checks what the model would read and what the provider's own
ledger holds. Then it closes the stream of a call half-way and calls again, and finally
has eight sub-agents charge one order at once with drifting amounts.

    python agent.py --url http://127.0.0.1:7878/mcp --token tok-planner \
        --sandbox http://127.0.0.1:9000 --sandbox-key sk_test --order A-1 --era legacy

`--era legacy` forces the initialize handshake and a session (`Client(mode="legacy")`);
`--era 2026-07-28` uses the client's default `mode="auto"`, which probes
`server/discover` and speaks the stateless 2026-07-28 revision when the server offers
it (the script then insists that it did). Exit code 0 when every check holds.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.request
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

OUTCOME = "dev.oncegate/outcome"
RUN_ID = "dev.oncegate/run_id"
STEP_ID = "dev.oncegate/step_id"
OUTCOME_KEYS = {"status", "intentKey", "attempt", "effectRef", "approvalId", "code"}


class CheckFailed(Exception):
    pass


def check(cond: bool, what: str, context: Any = None) -> None:
    """Prints one line per check; the first failing one ends the run with its context."""
    if not cond:
        detail = "" if context is None else f"\n  got: {context}"
        raise CheckFailed(f"FAIL {what}{detail}")
    print(f"ok   {what}", flush=True)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="the gateway's MCP endpoint (http://host:port/mcp)")
    p.add_argument("--token", required=True, help="a bearer token of an agent principal")
    p.add_argument("--sandbox", required=True, help="the sandbox provider's base URL")
    p.add_argument("--sandbox-key", required=True, help="the sandbox's API key (to read its ledger)")
    p.add_argument("--order", required=True, help="the order to charge; the closed-stream case uses ORDER-closed")
    p.add_argument("--era", required=True, choices=["legacy", "2026-07-28"])
    p.add_argument("--run-id", help="the agent run id sent in _meta (default: one per era and order)")
    p.add_argument(
        "--stall-ms",
        type=int,
        default=8000,
        help="how long the sandbox stalls after committing; must outlast the gateway's upstream timeout",
    )
    return p.parse_args()


# --- the provider, read and provoked directly (never through the gateway) --------------


def sandbox_fault(args: argparse.Namespace, fault: str, delay_ms: int) -> None:
    body = json.dumps({"path": "/v1/charges", "fault": fault, "times": 1, "delay_ms": delay_ms}).encode()
    req = urllib.request.Request(
        f"{args.sandbox}/_sandbox/faults",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        check(200 <= r.status < 300, f"sandbox queued {fault} ({delay_ms} ms) on /v1/charges", r.status)


def sandbox_charges(args: argparse.Namespace, order: str) -> list[dict[str, Any]]:
    req = urllib.request.Request(
        f"{args.sandbox}/v1/effects?kind=charge&order_id={order}",
        headers={"Authorization": f"Bearer {args.sandbox_key}"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)["effects"]


# --- the agent ---------------------------------------------------------------------------


def connect(args: argparse.Namespace, http: httpx2.AsyncClient) -> Client:
    mode = "legacy" if args.era == "legacy" else "auto"
    return Client(streamable_http_client(args.url, http_client=http), mode=mode)


def http_client(args: argparse.Namespace) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {args.token}"},
        timeout=httpx2.Timeout(30.0, read=60.0),
    )


def outcome(result: types.CallToolResult) -> dict[str, Any]:
    meta = result.meta or {}
    return meta.get(OUTCOME) or {}


def first_text(result: types.CallToolResult) -> str:
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    return texts[0] if texts else ""


def dump(result: types.CallToolResult) -> str:
    return result.model_dump_json(by_alias=True, exclude_none=True)


def step_meta(args: argparse.Namespace, step: str) -> dict[str, Any]:
    return {RUN_ID: args.run_id, STEP_ID: step}


async def check_era(client: Client, era: str) -> None:
    version = client.protocol_version
    if era == "legacy":
        check(version in HANDSHAKE_PROTOCOL_VERSIONS, f"initialize handshake negotiated {version}", version)
    else:
        check(version == "2026-07-28", "server/discover negotiated the stateless 2026-07-28 revision", version)


async def check_tools(client: Client) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    check("charge_card" in tools and "get_order" in tools, "tools/list has charge_card and get_order", sorted(tools))
    charge = tools["charge_card"]
    check(
        isinstance(charge.input_schema, dict) and charge.input_schema.get("type") == "object",
        "charge_card has an object inputSchema",
        charge.input_schema,
    )
    check(
        charge.annotations is not None and charge.annotations.read_only_hint is False,
        "charge_card is annotated readOnlyHint: false",
        charge.annotations,
    )
    read = tools["get_order"]
    check(
        read.annotations is not None and read.annotations.read_only_hint is True,
        "get_order is annotated readOnlyHint: true",
        read.annotations,
    )


async def stalled_charge_then_replans(args: argparse.Namespace) -> None:
    order = args.order
    async with http_client(args) as http, connect(args, http) as client:
        await check_era(client, args.era)
        await check_tools(client)

        sandbox_fault(args, "stall_after_commit", args.stall_ms)
        started = time.monotonic()
        first = await client.call_tool(
            "charge_card",
            {"order_id": order, "amount": "12.50", "currency": "USD", "memo": f"order {order}"},
            meta=step_meta(args, "charge"),
        )
        took = time.monotonic() - started
        print(f"..   first call answered after {took:.1f} s: {first_text(first)!r}", flush=True)
        out = outcome(first)
        check(first.is_error, "a stalled upstream is a tool execution error (isError: true)", dump(first))
        check(first_text(first).startswith("OUTCOME UNKNOWN"), "the model reads OUTCOME UNKNOWN", dump(first))
        check(out.get("status") == "unknown", '_meta["dev.oncegate/outcome"].status == "unknown"', out)
        check(OUTCOME_KEYS <= set(out), "the outcome carries every documented key", sorted(out))
        key = out["intentKey"]
        check(isinstance(key, str) and len(key) > 0, "the outcome names the intent key", out)

        # The model "decides again": a fresh tools/call each time, with drifted spellings.
        replans = [
            {"order_id": order, "amount": 12.5, "currency": "USD", "memo": "the charge timed out, retrying"},
            {"order_id": order, "amount": "USD 12.50", "currency": "usd", "memo": "second retry"},
            {"order_id": order, "amount": "12.50 USD", "memo": "please charge the customer"},
        ]
        charge: Any = None
        effect_ref = None
        for i, arguments in enumerate(replans, start=1):
            again = await client.call_tool("charge_card", arguments, meta=step_meta(args, f"charge-replan-{i}"))
            out = outcome(again)
            text = first_text(again)
            print(f"..   re-plan {i} ({arguments['amount']!r}): {text!r}", flush=True)
            check(out.get("status") == "replayed", f"re-plan {i} is replayed", dump(again))
            check(not again.is_error, f"re-plan {i} is not an error (the effect happened)", dump(again))
            m = re.match(r"ALREADY APPLIED as (\S+)", text)
            check(m is not None and "do not call again" in text, f"re-plan {i}: the model reads ALREADY APPLIED", text)
            check(out.get("intentKey") == key, f"re-plan {i} resolves to the same intent key", out)
            ref = out.get("effectRef")
            check(
                isinstance(ref, str) and ref.startswith("ch_") and m.group(1) == ref,
                f"re-plan {i}: the text names the effect reference {ref}",
                (text, out),
            )
            structured = again.structured_content
            check(
                isinstance(structured, dict) and structured.get("id") == ref and structured.get("order_id") == order,
                f"re-plan {i}: structuredContent is the provider's charge, its fields untouched",
                structured,
            )
            og = structured.get("oncegate")
            check(
                og == {
                    "status": "replayed",
                    "message": text,
                    "do_not_call_again": True,
                    "intent_key": key,
                },
                f"re-plan {i}: structuredContent.oncegate says replayed, do not call again (for models that read only it)",
                og,
            )
            provider = {k: v for k, v in structured.items() if k != "oncegate"}
            if charge is None:
                charge, effect_ref = provider, ref
            check(
                provider == charge and ref == effect_ref,
                f"re-plan {i} returns the very same charge as the re-plans before",
                (provider, charge),
            )

        read = await client.call_tool("get_order", {"order_id": order}, meta=step_meta(args, "read"))
        check(not read.is_error, "get_order (a read) passes through", dump(read))
        check(
            isinstance(read.structured_content, dict) and len(read.structured_content.get("charges", [])) == 1,
            "the provider's order shows one charge",
            read.structured_content,
        )

    charges = sandbox_charges(args, order)
    check(len(charges) == 1, f"the sandbox ledger holds exactly one charge for {order}", charges)
    check(charges[0].get("id") == effect_ref, "and it is the charge the gateway reported", (charges, effect_ref))


async def closed_stream(args: argparse.Namespace) -> None:
    order = f"{args.order}-closed"
    arguments = {"order_id": order, "amount": "30.00", "currency": "USD", "memo": "closed stream"}
    async with http_client(args) as http, connect(args, http) as client:
        sandbox_fault(args, "stall_after_commit", args.stall_ms)
        started = time.monotonic()
        with anyio.move_on_after(1.0) as scope:
            await client.call_tool("charge_card", arguments, meta=step_meta(args, "closed"))
        check(scope.cancelled_caught, "the agent gave up on its call after 1 s and closed the stream")

    # Wait out the stall: the upstream call must have run to its end in the gateway.
    await anyio.sleep(max(0.0, args.stall_ms / 1000 + 0.5 - (time.monotonic() - started)))
    statuses = []
    async with http_client(args) as http, connect(args, http) as client:
        for attempt in range(1, 6):
            again = await client.call_tool(
                "charge_card",
                {**arguments, "amount": 30, "memo": "did that go through?"},
                meta=step_meta(args, f"closed-again-{attempt}"),
            )
            status = outcome(again).get("status")
            statuses.append(status)
            print(f"..   call after the closed stream: {status}: {first_text(again)!r}", flush=True)
            if status != "in_flight":
                break
            await anyio.sleep(2.0)
        check(
            statuses[-1] == "replayed" and not again.is_error,
            "after a closed stream the charge was still recorded: the next call is replayed",
            (statuses, dump(again)),
        )
    charges = sandbox_charges(args, order)
    check(len(charges) == 1, f"the sandbox ledger holds exactly one charge for {order}", charges)


async def parallel_calls(args: argparse.Namespace) -> None:
    """Eight sub-agents charge one order at once, each with its own drift, on its own client."""
    order = f"{args.order}-parallel"
    spellings = ["7.00", 7, "USD 7.00", {"minor": 700}, "7", 7.0, "7.00 USD", "usd 7"]
    results: list[types.CallToolResult] = []

    async def one(i: int, amount: Any) -> None:
        async with http_client(args) as http, connect(args, http) as client:
            results.append(
                await client.call_tool(
                    "charge_card",
                    {"order_id": order, "amount": amount, "memo": f"sub-agent {i}"},
                    meta=step_meta(args, f"parallel-{i}"),
                )
            )

    async with anyio.create_task_group() as tg:
        for i, amount in enumerate(spellings):
            tg.start_soon(one, i, amount)
    statuses = sorted(outcome(r).get("status") or "?" for r in results)
    check(
        all(s in ("applied", "replayed", "in_flight") for s in statuses) and statuses.count("applied") <= 1,
        "8 parallel drifting calls: at most one applied, the rest replayed or in flight",
        statuses,
    )
    refs = {outcome(r).get("effectRef") for r in results} - {None}
    check(len(refs) <= 1, "every answer that names an effect names the same one", refs)
    charges = sandbox_charges(args, order)
    check(len(charges) == 1, f"the sandbox ledger holds exactly one charge for {order}", charges)


async def main() -> int:
    args = parse_args()
    args.run_id = args.run_id or f"run-py-{args.era}-{args.order}"
    print(f"python agent: mcp client, era {args.era}, order {args.order}, run {args.run_id}", flush=True)
    try:
        await stalled_charge_then_replans(args)
        await closed_stream(args)
        await parallel_calls(args)
    except CheckFailed as e:
        print(e, flush=True)
        return 1
    print("python agent: every check holds", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
