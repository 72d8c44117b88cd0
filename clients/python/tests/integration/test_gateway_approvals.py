"""A held call pauses the agent the way its framework pauses, and resumes once decided.

The test registry holds every charge above 1,000.00 for an approver (ogharness
POLICIES); each test charges 2500.00 through a framework's real runtime with a scripted
model (no LLM, no network beyond loopback), decides the approval in the gateway through
its JSON API as an approver would, and resumes the run the framework's way:

- LangGraph (`oncegate.langgraph.interrupt_on_hold`): the ToolNode's tool raises the
  graph's `interrupt()` carrying the approval id; `Command(resume=...)` before the
  decision pauses again, after it executes once; resuming the same checkpoint again
  replays the stored charge.
- The OpenAI Agents SDK (`oncegate.openai_agents.function_tool`): the hold is a
  tool-approval interruption in `result.interruptions`; resumed from `result.to_state()`
  the tool executes once after an approve, and answers the deny's line after a deny.

Can fail: the sandbox charges every POST it receives (keys ignored), so any second
execution is a second charge in its ledger, and each test counts them.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import oncegate
import oncegate.langgraph
import oncegate.openai_agents
from agents import Agent, RunConfig, Runner
from agents.items import ToolCallOutputItem
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from ogharness import AGENT_TOKEN, APPROVER_TOKEN, Stack, acreate_charge, create_charge, new_order
from test_gateway_frameworks import ScriptedModel

HELD_AMOUNT = "2500.00"


def _approver(stack: Stack) -> oncegate.Client:
    return oncegate.Client(stack.url, token=APPROVER_TOKEN)


def _langgraph_app(stack: Stack, order: str, runs: list[str], plan: list[dict[str, Any]]) -> Any:
    """A StateGraph whose model node is the script and whose ToolNode's tool calls a
    protected charge wrapped with interrupt_on_hold, on an in-memory checkpointer."""
    gate = oncegate.Client(stack.url, token=AGENT_TOKEN)

    @oncegate.langgraph.interrupt_on_hold
    @gate.protect("charge_card")
    def protected_charge(order_id: str, amount: str, memo: str, *, idempotency_key: str) -> dict[str, Any]:
        runs.append(memo)
        return create_charge(stack.sandbox_url, order_id=order_id, amount=amount, memo=memo, idempotency_key=idempotency_key)

    @tool
    def charge_card(order_id: str, amount: str, memo: str) -> str:
        """Charge the customer's card for an order."""
        try:
            return json.dumps(protected_charge(order_id, amount, memo))
        except oncegate.OutcomeError as err:
            return str(err)

    def model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        done = sum(1 for m in state["messages"] if isinstance(m, ToolMessage))
        if done < len(plan):
            call = {"name": "charge_card", "args": plan[done], "id": f"call_{done}"}
            return {"messages": [AIMessage(content="", tool_calls=[call])]}
        return {"messages": [AIMessage(content="Done.")]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", ToolNode([charge_card]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=InMemorySaver())


def _interrupt_value(result: dict[str, Any]) -> dict[str, Any]:
    interrupts = result.get("__interrupt__") or []
    assert len(interrupts) == 1, f"expected one interrupt, got {result}"
    value: dict[str, Any] = interrupts[0].value
    return value


def test_langgraph_interrupt_then_approve_executes_once_and_a_second_resume_replays(stack: Stack) -> None:
    order = new_order("lg-approve")
    runs: list[str] = []
    plan = [{"order_id": order, "amount": HELD_AMOUNT, "memo": "a large charge"}]
    app = _langgraph_app(stack, order, runs, plan)
    config = {"configurable": {"thread_id": str(uuid.uuid4())}}

    held = _interrupt_value(app.invoke({"messages": [HumanMessage(content=f"Charge {order}")]}, config))
    assert held["type"] == "oncegate.pending_approval"
    assert held["capability"] == "charge_card"
    assert held["approval_id"].startswith("ap_"), held
    assert held["approval_id"] in held["message"], held
    assert stack.charges(order) == [] and runs == []
    interrupted = app.get_state(config)

    # Resumed before anyone decided: still held, the graph pauses again, nothing ran.
    again = _interrupt_value(app.invoke(Command(resume=held["approval_id"]), config))
    assert again["approval_id"] == held["approval_id"]
    assert stack.charges(order) == [] and runs == []

    with _approver(stack) as approver:
        assert approver.approve(held["approval_id"]).status == "approved"
    final = app.invoke(Command(resume=held["approval_id"]), config)
    assert "__interrupt__" not in final, final
    charges = stack.charges(order)
    assert len(charges) == 1 and runs == ["a large charge"], (charges, runs)
    outputs = [m.content for m in final["messages"] if isinstance(m, ToolMessage)]
    assert [json.loads(str(o))["id"] for o in outputs] == [charges[0]["id"]]

    # Resuming the interrupted checkpoint a second time (time travel) re-runs the node:
    # the claim replays the stored charge, and the function does not run again.
    replayed = app.invoke(Command(resume=held["approval_id"]), interrupted.config)
    outputs = [m.content for m in replayed["messages"] if isinstance(m, ToolMessage)]
    assert json.loads(str(outputs[-1]))["id"] == charges[0]["id"], outputs
    assert len(stack.charges(order)) == 1 and runs == ["a large charge"]


def test_langgraph_interrupt_then_deny_answers_the_deny(stack: Stack) -> None:
    order = new_order("lg-deny")
    runs: list[str] = []
    plan = [{"order_id": order, "amount": HELD_AMOUNT, "memo": "a large charge"}]
    app = _langgraph_app(stack, order, runs, plan)
    config = {"configurable": {"thread_id": str(uuid.uuid4())}}

    held = _interrupt_value(app.invoke({"messages": [HumanMessage(content=f"Charge {order}")]}, config))
    with _approver(stack) as approver:
        assert approver.deny(held["approval_id"]).status == "denied"
    final = app.invoke(Command(resume=held["approval_id"]), config)
    outputs = [str(m.content) for m in final["messages"] if isinstance(m, ToolMessage)]
    assert len(outputs) == 1 and outputs[0].startswith("DENIED"), outputs
    assert stack.charges(order) == [] and runs == []


def _agents_run(stack: Stack, order: str, plan: list[dict[str, Any]], runs: list[str], decide: str) -> list[str]:
    """Runs the agent until the hold, decides it in oncegate (`approve` or `deny`),
    resumes from the interrupted state, and answers the tool outputs the model saw."""

    async def scenario() -> list[str]:
        async with oncegate.AsyncClient(stack.url, token=AGENT_TOKEN) as gate:

            @gate.protect("charge_card")
            async def charge_card(order_id: str, amount: str, memo: str, *, idempotency_key: str) -> dict[str, Any]:
                """Charge the customer's card for an order."""
                runs.append(memo)
                return await acreate_charge(
                    stack.sandbox_url, order_id=order_id, amount=amount, memo=memo, idempotency_key=idempotency_key
                )

            charge_tool = oncegate.openai_agents.function_tool(charge_card)
            model = ScriptedModel(plan)
            agent = Agent(name="biller", instructions="Charge orders.", tools=[charge_tool], model=model)
            config = RunConfig(tracing_disabled=True)
            first = await Runner.run(agent, f"Charge order {order}", max_turns=len(plan) + 2, run_config=config)
            assert len(first.interruptions) == 1, first.interruptions
            held = oncegate.openai_agents.pending_approval(first.interruptions[0])
            assert held is not None and held["approval_id"].startswith("ap_"), held
            assert stack.charges(order) == [] and runs == []

            with _approver(stack) as approver:
                decided = approver.approve(held["approval_id"]) if decide == "approve" else approver.deny(held["approval_id"])
            assert decided.status == ("approved" if decide == "approve" else "denied")
            state = first.to_state()
            assert oncegate.openai_agents.defer_to_oncegate(state, first.interruptions) == 1
            resumed = await Runner.run(agent, state, max_turns=len(plan) + 2, run_config=config)
            assert resumed.interruptions == []
            assert resumed.final_output == "The order is charged."
            return [str(item.output) for item in resumed.new_items if isinstance(item, ToolCallOutputItem)]

    return asyncio.run(scenario())


def test_openai_agents_interruption_then_approve_executes_once(stack: Stack) -> None:
    order = new_order("agents-approve")
    runs: list[str] = []
    plan = [
        {"order_id": order, "amount": HELD_AMOUNT, "memo": "a large charge"},
        # After the approved call ran, the script re-plans it (a lost result): replayed.
        {"order_id": order, "amount": "2500.00 USD", "memo": "again, the result was lost"},
    ]
    outputs = _agents_run(stack, order, plan, runs, "approve")
    charges = stack.charges(order)
    assert len(charges) == 1 and runs == ["a large charge"], (charges, runs)
    assert len(outputs) == 2, outputs
    for output in outputs:
        assert charges[0]["id"] in output, output


def test_openai_agents_interruption_then_deny_resumes_with_the_deny(stack: Stack) -> None:
    order = new_order("agents-deny")
    runs: list[str] = []
    plan = [{"order_id": order, "amount": HELD_AMOUNT, "memo": "a large charge"}]
    outputs = _agents_run(stack, order, plan, runs, "deny")
    assert len(outputs) == 1 and outputs[0].startswith("DENIED"), outputs
    assert stack.charges(order) == [] and runs == []
