"""Run and step ids, set by the orchestrator and sent on every call made inside them.

The gateway scopes ``run``/``step`` intents by these ids and flags the same intent in
two runs, so they must come from the orchestrator, never from tool arguments a model
writes. They live in ``contextvars``:

- an ``asyncio`` task copies the context when it is created, so tasks started inside
  ``with oncegate.run(...)`` carry the ids;
- a ``threading.Thread`` (and a ``ThreadPoolExecutor`` worker) starts with an EMPTY
  context: run the thread's target through ``contextvars.copy_context().run`` (or
  ``ctx.run`` per submitted job) to carry them, or open ``oncegate.run`` in the thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["RunContext", "run", "step", "current", "check_header_value"]

_run_id: ContextVar[str | None] = ContextVar("oncegate_run_id", default=None)
_step_id: ContextVar[str | None] = ContextVar("oncegate_step_id", default=None)


@dataclasses.dataclass(frozen=True)
class RunContext:
    """The run and step ids in force (None where the orchestrator set none)."""

    run_id: str | None
    step_id: str | None


def check_header_value(name: str, value: str) -> str:
    """Refuses a value the gateway would refuse (visible ASCII, at most 255 characters).

    Checked where the id is set, so a bad run id fails in the orchestrator's code and
    not as a 400 on some later tool call.
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value or len(value) > 255 or any(not ("!" <= c <= "~") for c in value):
        raise ValueError(f"{name} must be 1 to 255 visible ASCII characters, got {value!r}")
    return value


@contextlib.contextmanager
def run(run_id: str, step: str | None = None) -> Iterator[RunContext]:
    """Sends ``Oncegate-Run-Id: run_id`` (and ``Oncegate-Step-Id`` when ``step`` is
    given) on every claim, call and key derivation inside the block.

    A nested ``run`` replaces both ids for its block (a new run has no step of the old
    one); leaving the block restores what was there.
    """
    check_header_value("run id", run_id)
    if step is not None:
        check_header_value("step id", step)
    run_token = _run_id.set(run_id)
    step_token = _step_id.set(step)
    try:
        yield RunContext(run_id, step)
    finally:
        _step_id.reset(step_token)
        _run_id.reset(run_token)


@contextlib.contextmanager
def step(step_id: str) -> Iterator[RunContext]:
    """Sets the step id for the block, keeping the run id in force."""
    check_header_value("step id", step_id)
    token = _step_id.set(step_id)
    try:
        yield RunContext(_run_id.get(), step_id)
    finally:
        _step_id.reset(token)


def current() -> RunContext:
    """The run and step ids this context would send."""
    return RunContext(_run_id.get(), _step_id.get())
