"""The decorated function as a tool of real agent frameworks, driven by scripted planners.

No model and no network to any LLM: each planner is a fixed script that calls the
charge tool, "loses" the result (it never reads it) and re-plans the same charge with
drifted arguments and a new tool-call id, the way a model that lost a tool result
decides again. The frameworks run the tool calls as they would for a model: LangGraph
through a ToolNode in a StateGraph, the OpenAI Agents SDK through Runner.run with a
Model implementation that answers from the script.

Can fail: the tool's function posts a charge every time it runs and the sandbox
charges every post (keys ignored), so a re-plan that re-executed would be a second
charge; and the function counts its runs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import oncegate
from agents import Agent, ModelSettings, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, ToolCallOutputItem, TResponseInputItem, TResponseStreamEvent
from agents.models.interface import Model, ModelTracing
from agents.tool import Tool
from agents.usage import Usage
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from openai.types.responses.response_prompt_param import ResponsePromptParam

from ogharness import AGENT_TOKEN, Stack, acreate_charge, create_charge, new_order

# Nothing of a run may leave for a tracing backend.
set_tracing_disabled(True)


def _plan(order: str) -> list[dict[str, Any]]:
    """The planner's three tries at one charge: same order and amount, drifted spelling
    and a new memo each time."""
    return [
        {"order_id": order, "amount": "12.50", "memo": "charge the order"},
        {"order_id": order, "amount": "12.50 USD", "memo": "the result was lost, charging again"},
        {"order_id": order, "amount": 12.5, "memo": "one more time to be sure"},
    ]


def test_langgraph_tool_node_replans_a_lost_result_into_one_charge(stack: Stack) -> None:
    """A StateGraph whose "model" node is the script and whose "tools" node is a
    ToolNode around a @tool that calls the decorated function."""
    order = new_order("langgraph")
    plan = _plan(order)
    runs: list[str] = []
    with oncegate.Client(stack.url, token=AGENT_TOKEN) as gate:

        @gate.protect("charge_card")
        def protected_charge(
            order_id: str, amount: str | float, memo: str, *, idempotency_key: str
        ) -> dict[str, Any]:
            runs.append(memo)
            return create_charge(
                stack.sandbox_url,
                order_id=order_id,
                amount=amount,
                memo=memo,
                idempotency_key=idempotency_key,
            )

        @tool
        def charge_card(order_id: str, amount: str | float, memo: str) -> str:
            """Charge the customer's card for an order."""
            return json.dumps(protected_charge(order_id, amount, memo=memo))

        def model(state: MessagesState) -> dict[str, list[BaseMessage]]:
            # The script ignores every tool result: after each ToolMessage it plans the
            # next call as if the result had been lost.
            done = sum(1 for m in state["messages"] if isinstance(m, ToolMessage))
            if done < len(plan):
                call = {"name": "charge_card", "args": plan[done], "id": f"call_{done}"}
                return {"messages": [AIMessage(content="", tool_calls=[call])]}
            return {"messages": [AIMessage(content="The order is charged.")]}

        graph = StateGraph(MessagesState)
        graph.add_node("model", model)
        graph.add_node("tools", ToolNode([charge_card]))
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", tools_condition)
        graph.add_edge("tools", "model")
        app = graph.compile()
        final = app.invoke({"messages": [HumanMessage(content=f"Charge order {order} 12.50")]})

    outputs = [m for m in final["messages"] if isinstance(m, ToolMessage)]
    assert len(outputs) == len(plan), "the graph ran every planned tool call"
    charges = stack.charges(order)
    assert len(charges) == 1, f"{len(charges)} charges"
    assert runs == ["charge the order"], f"the function ran for {runs}"
    for message in outputs:
        assert isinstance(message.content, str)
        assert json.loads(message.content)["id"] == charges[0]["id"], message.content
    key = stack.intent_key({"order_id": order, "amount": "12.50"})
    assert stack.intent(key)["state"] == "applied"


class ScriptedModel(Model):
    """A Model of the Agents SDK that answers from a script instead of an LLM.

    Each turn it emits the next planned function call with a fresh call id, ignoring
    the function outputs the Runner fed back (the "lost" result); after the script it
    answers a final message.
    """

    def __init__(self, plan: list[dict[str, Any]]) -> None:
        self.plan = plan
        self.turns = 0

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        assert [t.name for t in tools] == ["charge_card"], "the Runner offers the tool"
        turn = self.turns
        self.turns += 1
        if turn < len(self.plan):
            output: list[Any] = [
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{turn}",
                    call_id=f"call_{turn}",
                    name="charge_card",
                    arguments=json.dumps(self.plan[turn]),
                    status="completed",
                )
            ]
        else:
            output = [
                ResponseOutputMessage(
                    type="message",
                    id="msg_final",
                    role="assistant",
                    status="completed",
                    content=[
                        ResponseOutputText(type="output_text", text="The order is charged.", annotations=[])
                    ],
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the test runs Runner.run, not streaming")


def test_openai_agents_function_tool_replans_a_lost_result_into_one_charge(stack: Stack) -> None:
    """Runner.run with a scripted Model and an async @function_tool that awaits the
    decorated async function (AsyncClient)."""
    order = new_order("agents")
    plan = _plan(order)
    runs: list[str] = []

    async def scenario() -> list[str]:
        async with oncegate.AsyncClient(stack.url, token=AGENT_TOKEN) as gate:

            @gate.protect("charge_card")
            async def protected_charge(
                order_id: str, amount: str | float, memo: str, *, idempotency_key: str
            ) -> dict[str, Any]:
                runs.append(memo)
                return await acreate_charge(
                    stack.sandbox_url,
                    order_id=order_id,
                    amount=amount,
                    memo=memo,
                    idempotency_key=idempotency_key,
                )

            @function_tool
            async def charge_card(order_id: str, amount: str | float, memo: str) -> str:
                """Charge the customer's card for an order."""
                return json.dumps(await protected_charge(order_id, amount, memo=memo))

            model = ScriptedModel(plan)
            agent = Agent(name="biller", instructions="Charge orders.", tools=[charge_card], model=model)
            result = await Runner.run(
                agent,
                f"Charge order {order} 12.50",
                max_turns=len(plan) + 2,
                run_config=RunConfig(tracing_disabled=True),
            )
            assert result.final_output == "The order is charged."
            assert model.turns == len(plan) + 1
            return [str(item.output) for item in result.new_items if isinstance(item, ToolCallOutputItem)]

    outputs = asyncio.run(scenario())
    assert len(outputs) == len(plan), "the Runner ran every planned tool call"
    charges = stack.charges(order)
    assert len(charges) == 1, f"{len(charges)} charges"
    assert runs == ["charge the order"], f"the function ran for {runs}"
    for output in outputs:
        assert json.loads(output)["id"] == charges[0]["id"], output
    key = stack.intent_key({"order_id": order, "amount": "12.50"})
    assert stack.intent(key)["state"] == "applied"
