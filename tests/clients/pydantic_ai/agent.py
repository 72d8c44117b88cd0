"""A pydantic-ai agent (its MCP toolset) charging one order twice through oncegate.

Run by crates/oncegate-cli/tests/it/structured.rs against `oncegate serve` in front of the
`oncegate sandbox` provider; installed by tests/clients/setup.sh (part `pydantic-ai`).
pydantic-ai hands the model a tool's `structuredContent` when it has one, never the text
blocks beside it, so the model line that opens `content` ("ALREADY APPLIED ... do not
call again") reaches such a model only through `structuredContent.oncegate`. The model
is scripted (pydantic-ai's `FunctionModel`: no network): it charges the order, then,
as a confused model would, charges it again with drifted arguments; the script checks
what the model received each time and what the provider's own ledger holds.

    python agent.py --url http://127.0.0.1:7878/mcp --token tok-planner \
        --sandbox http://127.0.0.1:9000 --sandbox-key sk_test --order PAI-1

Exit code 0 when every check holds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import urllib.request
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


def check(ok: bool, what: str, detail: Any = None) -> None:
    if not ok:
        print(f"FAIL: {what}\n  {detail!r}", flush=True)
        sys.exit(1)
    print(f"ok   {what}", flush=True)


def sandbox_charges(args: argparse.Namespace) -> list[dict[str, Any]]:
    req = urllib.request.Request(
        f"{args.sandbox}/v1/effects?kind=charge&order_id={args.order}",
        headers={"Authorization": f"Bearer {args.sandbox_key}"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)["effects"]


def tool_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]


async def main(args: argparse.Namespace) -> None:
    calls = [
        {"order_id": args.order, "amount": "12.50", "currency": "USD", "memo": "pydantic-ai charge"},
        # The model "decides again", with another spelling of the same amount.
        {"order_id": args.order, "amount": 12.5, "currency": "usd", "memo": "did it go through? charge again"},
    ]
    # Everything the model was handed, in the form it reads it.
    received: list[ToolReturnPart] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = tool_returns(messages)
        if returns:
            received.append(returns[-1])
        if len(returns) < len(calls):
            check(
                any(t.name == "charge_card" for t in info.function_tools),
                "the model is offered charge_card",
                [t.name for t in info.function_tools],
            )
            n = len(returns)
            return ModelResponse(parts=[ToolCallPart("charge_card", calls[n], tool_call_id=f"charge-{n + 1}")])
        return ModelResponse(parts=[TextPart("charged once")])

    toolset = MCPToolset(args.url, headers={"Authorization": f"Bearer {args.token}"})
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    async with agent:
        result = await agent.run(f"Charge order {args.order} 12.50 USD.")
    check(result.output == "charged once", "the run ends", result.output)
    check(len(received) == 2, "the model received two tool returns", received)

    first, again = received
    for part in received:
        print(f"..   {part.tool_call_id}: {part.model_response_str()}", flush=True)
    check(isinstance(first.content, dict), "pydantic-ai hands the model the structured content", first.content)
    check(isinstance(again.content, dict), "pydantic-ai hands the model the structured content", again.content)
    og = first.content.get("oncegate", {})
    check(og.get("status") == "applied", "the first charge is applied", first.content)
    check(og.get("do_not_call_again") is False, "the first charge does not say stop", og)
    ref = first.content.get("id")
    check(isinstance(ref, str) and ref.startswith("ch_"), "the provider's charge reaches the model", first.content)

    og = again.content.get("oncegate", {})
    check(og.get("status") == "replayed", "the second charge reaches the model as replayed", again.content)
    check(og.get("do_not_call_again") is True, "and says do not call again", og)
    message = og.get("message", "")
    check(
        message.startswith(f"ALREADY APPLIED as {ref}") and "do not call again" in message,
        "the model line reaches the model",
        message,
    )
    check(again.content.get("id") == ref, "the replay carries the first charge, untouched", again.content)
    # What the model reads, in the very string pydantic-ai renders for it.
    rendered = again.model_response_str()
    check("replayed" in rendered and "do not call again" in rendered, "the rendered tool return says so", rendered)
    check(og.get("intent_key") == first.content["oncegate"].get("intent_key"), "one intent", (og, first.content))

    charges = sandbox_charges(args)
    check(len(charges) == 1, f"the sandbox ledger holds exactly one charge for {args.order}", charges)
    check(charges[0].get("id") == ref, "and it is the charge the model was told about", (charges, ref))
    print("pydantic-ai agent: every check holds", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--sandbox", required=True)
    parser.add_argument("--sandbox-key", required=True)
    parser.add_argument("--order", required=True)
    asyncio.run(main(parser.parse_args()))
