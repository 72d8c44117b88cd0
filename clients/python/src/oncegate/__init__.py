"""oncegate: one intent, at most one effect.

The client for an oncegate gateway's two-phase API, for code that performs side effects
itself (a payment SDK call, an email send) and must not perform them twice::

    import oncegate

    gate = oncegate.Client("http://127.0.0.1:7878", token=os.environ["ONCEGATE_TOKEN"])

    @gate.protect("charge_card")
    def charge_card(order_id: str, amount: str, *, idempotency_key: str) -> dict:
        return stripe.PaymentIntent.create(..., idempotency_key=idempotency_key)

The gateway derives the key from the normalised intent, so a re-planned call with
drifted arguments replays the first result instead of charging again. See README.md.
"""

from __future__ import annotations

from . import not_sent
from .aio import AsyncClient, AsyncIntent
from .client import Client, Intent
from ._protect import AsyncProtector, KeyContext, Protector
from .context import RunContext, current, run, step
from .errors import (
    ClaimLost,
    CompletionNotRecorded,
    Denied,
    DryRun,
    Failed,
    GatewayError,
    GatewayUnavailable,
    InFlight,
    IntentNotRecorded,
    OncegateError,
    OutcomeError,
    OutcomeUnknown,
    PendingApproval,
    Refused,
    Replayed,
    StaleClaim,
    error_for_outcome,
)
from .models import (
    ClaimAnswer,
    CompletionOutcome,
    Execute,
    KeyExplanation,
    Outcome,
    PassThrough,
    ProtocolError,
    Reason,
)

Claim = Execute
"""The claim you hold while executing; the same type as :class:`Execute`."""

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AsyncIntent",
    "AsyncProtector",
    "Claim",
    "ClaimAnswer",
    "ClaimLost",
    "Client",
    "CompletionNotRecorded",
    "CompletionOutcome",
    "Denied",
    "DryRun",
    "Execute",
    "Failed",
    "GatewayError",
    "GatewayUnavailable",
    "InFlight",
    "Intent",
    "IntentNotRecorded",
    "KeyContext",
    "KeyExplanation",
    "OncegateError",
    "Outcome",
    "OutcomeError",
    "OutcomeUnknown",
    "PassThrough",
    "PendingApproval",
    "Protector",
    "ProtocolError",
    "Reason",
    "Refused",
    "Replayed",
    "RunContext",
    "StaleClaim",
    "current",
    "error_for_outcome",
    "not_sent",
    "run",
    "step",
]
