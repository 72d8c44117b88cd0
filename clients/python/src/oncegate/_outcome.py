"""The outcome envelope and the error each non-success raises: one piece, because
``Outcome.raise_for_status`` raises the errors and every outcome error carries its
``Outcome``.

It sits below both of the modules that publish it: :mod:`oncegate.models` (the parsed
answers) and :mod:`oncegate.errors` (every error the client raises), so neither imports
the other. Their public home stays there: each class below says so in ``__module__``,
the name tracebacks and a protected function's recorded error text show.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = [
    "Reason",
    "Outcome",
    "OncegateError",
    "OutcomeError",
    "InFlight",
    "OutcomeUnknown",
    "PendingApproval",
    "Denied",
    "Refused",
    "Failed",
    "DryRun",
    "Replayed",
    "error_for_outcome",
    "approval_payload",
]


@dataclasses.dataclass(frozen=True)
class Reason:
    """Why an outcome is what it is, with a stable code (``OG-0004``, docs/error-codes.md)."""

    code: str
    message: str


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The outcome envelope: what happened to an intent, as the gateway recorded it.

    ``status`` is one of applied, replayed, in_flight, unknown, pending_approval,
    denied, refused, dry_run, failed, approved. ``message`` is one line a model can act
    on ("ALREADY APPLIED as ch_1 - do not call again."). ``http_status`` is the status
    the envelope came with.
    """

    status: str
    intent_key: str | None
    generation: int
    attempt: int
    state: str | None
    effect_ref: str | None
    result: Any
    approval_id: str | None
    reason: Reason | None
    alerts: list[Any]
    message: str
    http_status: int
    raw: dict[str, Any] = dataclasses.field(repr=False, compare=False)

    @property
    def reason_code(self) -> str | None:
        """The stable code of the reason, if any (``OG-0004`` attempt ceiling, ...)."""
        return self.reason.code if self.reason else None

    @property
    def failed(self) -> bool:
        """True when the provider said no: a ``failed`` answer, or a replay of one."""
        return self.status == "failed" or (self.status == "replayed" and self.state == "failed")

    @property
    def succeeded(self) -> bool:
        """True when the effect took place (now, before, or by reconciliation)."""
        return self.status in ("applied", "replayed") and not self.failed

    def raise_for_status(self) -> Outcome:
        """Raises the typed error for an outcome that is not a success; returns self otherwise.

        Like ``httpx.Response.raise_for_status``: ``call()`` and ``complete()`` return
        every envelope, and this turns the non-successes into exceptions.
        """
        err = error_for_outcome(self)
        if err is not None:
            raise err
        return self


class OncegateError(Exception):
    """Base of every error this client raises. ``intent_key`` is None when no intent exists."""

    def __init__(self, message: str, *, intent_key: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.intent_key = intent_key


class OutcomeError(OncegateError):
    """The gateway decided, and nothing was executed by this call. ``outcome`` is the envelope."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.message or outcome.status, intent_key=outcome.intent_key)
        self.outcome = outcome

    @property
    def code(self) -> str | None:
        """The reason's stable code, if the gateway gave one."""
        return self.outcome.reason_code


class InFlight(OutcomeError):
    """Another attempt holds the claim and is executing. Do not re-issue; poll later."""


class OutcomeUnknown(OutcomeError):
    """An earlier attempt's outcome is not known yet; the gateway is reconciling it with
    the provider. Do not re-issue: a later call answers what the provider's record says."""


class PendingApproval(OutcomeError):
    """Held for a human. ``approval_id`` names the request an approver decides."""

    @property
    def approval_id(self) -> str | None:
        return self.outcome.approval_id


class Denied(OutcomeError):
    """Policy or a human said no. ``code`` says which rule."""


class Refused(OutcomeError):
    """Attempt ceiling, breaker, hold, kill switch, cross-run or store down (``code``).

    ``OG-0007`` (store unavailable) and ``OG-0015`` (contention) are worth retrying
    later; the others need a human.
    """


class Failed(OutcomeError):
    """The provider said no (definitely: nothing happened), now or on an earlier attempt.

    ``result`` is what the provider answered, as stored. Retrying the same intent
    replays this failure; change the arguments (a different intent) to try again.
    """

    @property
    def result(self) -> Any:
        return self.outcome.result


class DryRun(OutcomeError):
    """The capability (or this agent) is in dry-run mode: nothing was executed.

    Raised rather than returning None so that code expecting the effect's result
    cannot mistake "nothing happened" for an answer.
    """


class Replayed(OutcomeError):
    """Raised when code tries to execute an intent that was already applied.

    Only the :meth:`Client.intent` block raises it: reading ``claim.idempotency_key``
    or recording an outcome on a replayed intent means the body is about to run an
    effect that already happened. ``outcome.result`` is the stored result.
    """

    @property
    def result(self) -> Any:
        return self.outcome.result


_BY_STATUS: dict[str, type[OutcomeError]] = {
    "in_flight": InFlight,
    "unknown": OutcomeUnknown,
    "pending_approval": PendingApproval,
    "denied": Denied,
    "refused": Refused,
    "failed": Failed,
    "dry_run": DryRun,
}


def error_for_outcome(outcome: Outcome) -> OutcomeError | None:
    """The typed error for a non-success outcome, None for applied / replayed / approved.

    A replay of a failure (status ``replayed``, state ``failed``) is :class:`Failed`:
    the provider said no before, and that is still the answer.
    """
    if outcome.failed:
        return Failed(outcome)
    cls = _BY_STATUS.get(outcome.status)
    if cls is not None:
        return cls(outcome)
    if outcome.succeeded or outcome.status == "approved":
        # "approved" answers an approver (nothing executed yet); a claim never gets it.
        return None
    # A status this client does not know: not a success it can vouch for.
    return OutcomeError(outcome)


def approval_payload(err: PendingApproval, capability: str | None = None) -> dict[str, Any]:
    """What a held call's pause carries (a LangGraph interrupt, an Agents SDK
    interruption): the approval to decide and why the call is held.

    ``approval_id`` is what an approver decides (``POST /v1/approvals/{id}/approve``,
    ``oncegate approvals approve``, the console); ``message`` the line for a person or a
    model; ``reason`` the held reason's stable code and text.
    """
    outcome = err.outcome
    return {
        "type": "oncegate.pending_approval",
        "approval_id": err.approval_id,
        "intent_key": err.intent_key,
        "capability": capability,
        "message": outcome.message,
        "reason": None if outcome.reason is None else {"code": outcome.reason.code, "message": outcome.reason.message},
    }


# The public homes of these names: tracebacks, pickles and the error text a protected
# function's failure records keep showing oncegate.models.Outcome, oncegate.errors.Failed.
_HOMES: dict[str, tuple[type, ...]] = {
    "oncegate.models": (Reason, Outcome),
    "oncegate.errors": (
        OncegateError,
        OutcomeError,
        InFlight,
        OutcomeUnknown,
        PendingApproval,
        Denied,
        Refused,
        Failed,
        DryRun,
        Replayed,
    ),
}
for _home, _classes in _HOMES.items():
    for _cls in _classes:
        _cls.__module__ = _home
error_for_outcome.__module__ = "oncegate.errors"
