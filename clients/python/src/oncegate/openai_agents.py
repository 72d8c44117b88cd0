"""The OpenAI Agents SDK: a call oncegate holds becomes the SDK's tool-approval interruption.

``function_tool(protected)`` makes an Agents SDK ``FunctionTool`` of a protected
function (``Client.protect`` or ``AsyncClient.protect``). Its ``needs_approval`` asks
oncegate first: a call the gateway holds for a human interrupts the run the SDK's way
(``result.interruptions``), instead of failing inside the tool::

    from oncegate.openai_agents import function_tool, defer_to_oncegate, pending_approval

    agent = Agent(name="biller", tools=[function_tool(charge)], ...)
    result = await Runner.run(agent, "Charge order A-7 2500.00")
    for item in result.interruptions:
        print(pending_approval(item)["approval_id"])   # decide it in oncegate
    # ... an approver approves or denies in oncegate (console, CLI or API) ...
    state = result.to_state()
    defer_to_oncegate(state, result.interruptions)
    result = await Runner.run(agent, state)

On resume the tool claims again, and oncegate's decision rules: approved, the function
executes once (a re-plan of the same intent replays its result); denied, the tool's
output is the deny's line ("DENIED ..."), which the model reads; still pending, the
output says so. ``state.reject(item, rejection_message=...)`` still works for a run
that gives up locally (the tool is then not called; the oncegate approval expires).

How it stays one claim per call: ``needs_approval`` claims, and when the claim grants
the execution it is kept, by tool call id, for the invocation that follows; a held
call answers ``pending_approval`` without a claim to keep. Any other outcome
(``replayed``, ``denied``, ...) is asked again by the invocation, which is free.

The Agents SDK is imported when ``function_tool`` is called, never by ``import oncegate``.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import typing
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ._outcome import Outcome, OutcomeError, PendingApproval, approval_payload
from ._protect import Spec
from .aio import AsyncClient
from .client import Client
from .models import ClaimAnswer, Execute

if TYPE_CHECKING:
    from agents import FunctionTool, RunState, ToolApprovalItem

__all__ = ["function_tool", "pending_approval", "defer_to_oncegate"]

# Call id -> the approval that held it, for the app to show or decide (pending_approval).
_held: dict[str, dict[str, Any]] = {}
_held_lock = threading.Lock()


def function_tool(protected: Any, **options: Any) -> FunctionTool:
    """An Agents SDK ``FunctionTool`` that runs ``protected`` once per intent.

    ``options`` go to ``agents.function_tool`` (``name_override``,
    ``description_override``, ``failure_error_function``, ...), except ``needs_approval``,
    which is oncegate's. The tool's parameters are the protected function's, without
    the key; its description is the function's docstring. An outcome that is not a
    success (held, denied, in flight, unknown) is the tool's output: the error's line,
    written for the model.
    """
    from agents import function_tool as make_tool
    from agents.tool_context import ToolContext

    if "needs_approval" in options:
        raise TypeError("function_tool(): needs_approval is oncegate's (the gateway's policy decides)")
    client, spec = _unwrap(protected)
    kept: dict[str, Execute] = {}

    async def claim(arguments: dict[str, Any]) -> ClaimAnswer:
        if isinstance(client, AsyncClient):
            return await client.claim(spec.capability, arguments)
        return await asyncio.to_thread(client.claim, spec.capability, arguments)

    async def needs_approval(ctx: Any, params: dict[str, Any], call_id: str) -> bool:
        answer = await claim(spec.claim_arguments((), params))
        if isinstance(answer, Execute):
            kept[call_id] = answer
            return False
        if isinstance(answer, Outcome) and answer.status == "pending_approval":
            payload = approval_payload(PendingApproval(answer), spec.capability)
            with _held_lock:
                _held[call_id] = payload
            return True
        return False

    async def invoke(ctx: ToolContext[Any], *args: Any, **kwargs: Any) -> Any:
        call_id = ctx.tool_call_id
        first = kept.pop(call_id, None)
        try:
            if isinstance(client, AsyncClient):
                value = await client._run_protected(spec, args, kwargs, first)
            else:
                value = await asyncio.to_thread(client._run_protected, spec, args, kwargs, first)
        except OutcomeError as err:
            return str(err)
        with _held_lock:
            _held.pop(call_id, None)
        return value

    _present_as(invoke, spec, ToolContext)
    tool: FunctionTool = make_tool(invoke, needs_approval=needs_approval, **options)
    return tool


def pending_approval(item: ToolApprovalItem) -> dict[str, Any] | None:
    """The oncegate approval behind an interruption (``approval_id``, ``message``,
    ``reason``, ``intent_key``, ``capability``), or None for another tool's."""
    with _held_lock:
        return _held.get(_call_id(item) or "")


def defer_to_oncegate(state: RunState[Any, Any], interruptions: Iterable[ToolApprovalItem]) -> int:
    """Lets oncegate's decision stand for every interruption it raised: approves them in
    the SDK's state, so that on resume each tool claims again and the gateway answers
    (execute once, the deny's line, or still pending). Answers how many it approved."""
    count = 0
    for item in interruptions:
        if pending_approval(item) is not None:
            state.approve(item)
            count += 1
    return count


def _call_id(item: Any) -> str | None:
    raw = getattr(item, "raw_item", None)
    value = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    return value if isinstance(value, str) else None


def _unwrap(protected: Any) -> tuple[Client | AsyncClient, Spec]:
    pair = getattr(protected, "__oncegate_protected__", None)
    if not (isinstance(pair, tuple) and len(pair) == 2):
        raise TypeError(f"{protected!r} is not a protected function: decorate it with gate.protect(...) first")
    client, spec = pair
    assert isinstance(client, (Client, AsyncClient)) and isinstance(spec, Spec)
    return client, spec


def _present_as(invoke: Any, spec: Spec, context_type: Any) -> None:
    """Gives ``invoke`` the protected function's name, docstring and parameters (minus the
    key, behind a ToolContext first parameter), which is what the SDK builds the tool's
    schema from. Annotations are resolved here, in the function's own module."""
    fn = spec.function
    hints = typing.get_type_hints(fn, include_extras=True)
    params = list(spec.signature.parameters.values())
    if spec.key_by_context:
        params = params[1:]
    params = [p for p in params if spec.key_by_context or p.name != spec.key_param]
    params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in params]
    first = inspect.Parameter("tool_context", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=context_type[Any])
    invoke.__signature__ = inspect.Signature([first, *params])
    invoke.__annotations__ = {"tool_context": context_type[Any], **{p.name: p.annotation for p in params}}
    invoke.__name__ = fn.__name__
    invoke.__qualname__ = fn.__qualname__
    invoke.__doc__ = fn.__doc__
