"""Every error the client raises: one base, ``OncegateError``, and a type per situation.

Two families:

- outcomes that are not a success (:class:`OutcomeError` and its subclasses): the
  gateway decided, and the decision is "not now" or "no". Each carries the intent key
  and the envelope's ``message``, a line written for a model ("IN PROGRESS: another
  attempt is executing this - do not call again."), so a tool wrapper can hand
  ``str(err)`` straight back to the model;
- the gateway could not be asked or refused the request itself
  (:class:`GatewayUnavailable`, :class:`GatewayError`, :class:`StaleClaim`).
"""

from __future__ import annotations

from typing import Any

from .models import Outcome

__all__ = [
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
    "GatewayError",
    "GatewayUnavailable",
    "CompletionNotRecorded",
    "StaleClaim",
    "ClaimLost",
    "IntentNotRecorded",
    "error_for_outcome",
]


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


class GatewayError(OncegateError):
    """The gateway refused the request itself (``{"error": {"code", "message"}}``).

    ``code`` is the stable code (``OG-0054`` bad token, ``OG-0013`` forbidden,
    ``OG-0016`` unknown capability, ``OG-0009`` malformed, ``OG-0025`` claim-only
    capability on /v1/calls, ...), ``status_code`` the HTTP status.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str | None,
        status_code: int,
        intent_key: str | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(message, intent_key=intent_key)
        self.code = code
        self.status_code = status_code
        self.body = body

    def __str__(self) -> str:
        prefix = f"{self.code}: " if self.code else ""
        return f"{prefix}{self.message} (HTTP {self.status_code})"


class StaleClaim(GatewayError):
    """The claim is no longer yours (OG-0024): its lease expired or a newer attempt
    superseded it. Nothing was recorded by the request that got this.

    Raised after a protected function returned when a heartbeat or the completion found
    the claim lost: the effect may have happened (``value`` holds what the function
    returned, if it returned), and the gateway will reconcile the intent with the
    provider. Do not re-run the effect; a later call of the same intent answers what
    the provider's record says.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str | None = "OG-0024",
        status_code: int = 409,
        intent_key: str | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(message, code=code, status_code=status_code, intent_key=intent_key, body=body)
        self.value: Any = None


ClaimLost = StaleClaim
"""The same error under the name that says what happened to a running function."""


class GatewayUnavailable(OncegateError):
    """The gateway could not be reached, or answered 5xx without an outcome.

    Raised by a claim, nothing was executed: the protected function was not called.
    (If the gateway did record the claim before the answer was lost, its lease expires
    and the gateway reconciles it; nothing ran, so nothing is found.)
    """

    def __init__(
        self,
        message: str,
        *,
        intent_key: str | None = None,
        status_code: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, intent_key=intent_key)
        self.status_code = status_code
        self.code = code


class CompletionNotRecorded(GatewayUnavailable):
    """The effect's outcome could not be recorded after several tries.

    The claim's lease will expire and the gateway will reconcile the intent with the
    provider (found: applied; absent after the settle horizon: it may execute again).
    ``value`` holds what the protected function returned, ``outcome`` what the client
    tried to record.
    """

    def __init__(self, message: str, *, intent_key: str | None, outcome: str) -> None:
        super().__init__(message, intent_key=intent_key)
        self.outcome = outcome
        self.value: Any = None


class IntentNotRecorded(OncegateError):
    """An ``intent()`` block that held the execution ended without recording an outcome.

    The client recorded ``unknown`` for it (the effect may have run; the gateway
    reconciles with the provider). Call ``claim.applied(...)``, ``claim.failed(...)`` or
    ``claim.not_sent()`` inside the block.
    """


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
