"""LangGraph: a call oncegate holds for a human pauses the graph with ``interrupt()``.

Without this, a held call raises :class:`~oncegate.PendingApproval` inside the node and
the run fails (or the tool answers an error the model may "retry"). With it, the node
calls LangGraph's own ``interrupt()`` with the approval's id and details, so the graph
pauses where it is, checkpointed, and resumes with ``Command(resume=...)``::

    from oncegate.langgraph import interrupt_on_hold

    @interrupt_on_hold
    @gate.protect("charge_card")
    def charge(order_id: str, amount: str, *, idempotency_key: str) -> dict: ...

    @tool
    def charge_card(order_id: str, amount: str) -> str:
        return json.dumps(charge(order_id, amount))

    result = graph.invoke(inputs, config)          # held: result["__interrupt__"]
    payload = result["__interrupt__"][0].value     # {"approval_id": "ap_…", ...}
    # an approver decides in oncegate (console, `oncegate approvals approve`, the API)
    graph.invoke(Command(resume=payload["approval_id"]), config)

On resume LangGraph re-runs the node from its start; the protected function claims
again and oncegate, not the resume value, decides: approved, it executes once (and a
second resume of the same checkpoint replays the stored result); denied, it raises
:class:`~oncegate.Denied` (``str(err)`` is the line for the model); still pending, the
graph pauses again with a new interrupt. The graph needs a checkpointer, as every
``interrupt()`` does.

LangGraph is imported when a wrapped function first runs into a hold, never by
``import oncegate``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar, cast, overload

from ._outcome import PendingApproval, approval_payload

__all__ = ["interrupt_on_hold", "approval_payload"]

P = ParamSpec("P")
R = TypeVar("R")


@overload
def interrupt_on_hold(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]: ...
@overload
def interrupt_on_hold(fn: Callable[P, R]) -> Callable[P, R]: ...


def interrupt_on_hold(fn: Callable[P, Any]) -> Callable[P, Any]:
    """Wraps a protected function (sync or async) so that a hold becomes ``interrupt()``.

    Each hold calls ``interrupt()`` once more: a resume before the approver decided
    pauses the graph again, and a resume after it runs the claim that executes.
    """
    capability = getattr(fn, "__oncegate_capability__", None)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def awrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
            while True:
                try:
                    return await fn(*args, **kwargs)
                except PendingApproval as err:
                    _pause(err, capability)

        return awrapper

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
        while True:
            try:
                return fn(*args, **kwargs)
            except PendingApproval as err:
                _pause(err, capability)

    return cast(Callable[P, Any], wrapper)


def _pause(err: PendingApproval, capability: str | None) -> None:
    """``interrupt()``: raises on the first run (the graph pauses); on a resume it
    returns the resume value, and the caller claims again. Terminates: each loop turn
    consumes one resume value, and a run has finitely many."""
    from langgraph.types import interrupt

    interrupt(approval_payload(err, capability))
