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

from ._outcome import (
    Denied,
    DryRun,
    Failed,
    InFlight,
    OncegateError,
    OutcomeError,
    OutcomeUnknown,
    PendingApproval,
    Refused,
    Replayed,
    error_for_outcome,
)

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
