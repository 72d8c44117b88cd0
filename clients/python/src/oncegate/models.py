"""The gateway's answers as typed values, parsed from the wire once.

Three answers can come back from a claim: :class:`Execute` (you hold the execution: run
the effect with its ``idempotency_key`` and complete it), :class:`PassThrough` (a read:
run it, record nothing) and :class:`Outcome` (the envelope every non-executing answer
and every ``/v1/calls`` answer shares). Parsing is strict about what the contract says
is always there and tolerant of fields it may add later (``raw`` keeps the whole body).
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import time
from email.utils import parsedate_to_datetime
from typing import Any, Literal

from ._outcome import Outcome, Reason

__all__ = [
    "Execute",
    "PassThrough",
    "Outcome",
    "Reason",
    "KeyExplanation",
    "ClaimAnswer",
    "CompletionOutcome",
    "parse_timestamp",
    "parse_claim",
    "parse_outcome",
    "parse_execute",
    "parse_key_explanation",
    "ProtocolError",
]

CompletionOutcome = Literal["applied", "failed", "unknown", "not_sent"]
"""What the executor says happened: the four values ``complete`` accepts."""


class ProtocolError(ValueError):
    """An answer that does not have the shape the wire contract promises."""


@dataclasses.dataclass(frozen=True)
class Execute:
    """A claim you hold: run the effect with ``idempotency_key``, then complete it.

    ``lease_expires_at`` is the gateway's clock; ``lease_seconds`` is how long the lease
    had left when the answer arrived, estimated without trusting this machine's clock
    alone (see :func:`parse_execute`), and is what heartbeats are timed by.
    """

    intent_key: str
    generation: int
    attempt: int
    execution: int
    lease_expires_at: datetime.datetime
    fencing_token: str
    idempotency_key: str
    capability: str
    arguments: dict[str, Any]
    message: str
    lease_seconds: float = dataclasses.field(compare=False)
    received_at: float = dataclasses.field(compare=False, repr=False)
    raw: dict[str, Any] = dataclasses.field(repr=False, compare=False)

    def lease_left(self, now: float | None = None) -> float:
        """Seconds of lease left now, by this process's monotonic clock."""
        now = time.monotonic() if now is None else now
        return self.lease_seconds - (now - self.received_at)

    def too_late_to_send(self) -> bool:
        """True when (nearly) the whole lease is gone before the effect was sent.

        The claim may be another attempt's by now, and a request sent with it would
        race that attempt where no fence reaches (the gateway never sees it). The margin
        covers ``lease_seconds`` being estimated from a ``Date`` header truncated to the
        second.
        """
        return self.lease_left() <= min(1.0, self.lease_seconds / 2)


@dataclasses.dataclass(frozen=True)
class PassThrough:
    """A read capability: no intent, no key; run it yourself and record nothing."""

    message: str
    raw: dict[str, Any] = dataclasses.field(repr=False, compare=False)


ClaimAnswer = Execute | PassThrough | Outcome
"""What ``claim()`` returns."""


@dataclasses.dataclass(frozen=True)
class KeyExplanation:
    """What ``/v1/keys/derive`` says about a key: which inputs entered it and why."""

    key: str
    material: Any
    inputs: list[Any]
    ignored: list[Any]
    notes: list[Any]
    scope: Any
    raw: dict[str, Any] = dataclasses.field(repr=False, compare=False)


_TS = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|z|[+-]\d{2}:?\d{2})$"
)


def parse_timestamp(text: str) -> datetime.datetime:
    """An RFC 3339 timestamp as an aware datetime.

    Written by hand because ``datetime.fromisoformat`` on Python 3.10 refuses ``Z`` and
    more than six fractional digits, both of which an RFC 3339 writer may emit.
    """
    m = _TS.match(text)
    if m is None:
        raise ProtocolError(f"not an RFC 3339 timestamp: {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    fraction = (m.group(7) or "").ljust(6, "0")[:6]
    zone = m.group(8)
    if zone in ("Z", "z"):
        tz = datetime.timezone.utc
    else:
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        tz = datetime.timezone(sign * datetime.timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
    return datetime.datetime(year, month, day, hour, minute, second, int(fraction), tzinfo=tz)


def _str(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise ProtocolError(f"answer field {name!r} should be a string, got {value!r}")
    return value


def _opt_str(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ProtocolError(f"answer field {name!r} should be a string or null, got {value!r}")
    return value


def _int(body: dict[str, Any], name: str, default: int | None = None) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"answer field {name!r} should be an integer, got {value!r}")
    return value


def parse_outcome(body: dict[str, Any], http_status: int) -> Outcome:
    """The envelope in ``body``."""
    reason_raw = body.get("reason")
    reason: Reason | None = None
    if isinstance(reason_raw, dict):
        reason = Reason(code=str(reason_raw.get("code", "")), message=str(reason_raw.get("message", "")))
    elif reason_raw is not None:
        raise ProtocolError(f"answer field 'reason' should be an object or null, got {reason_raw!r}")
    alerts = body.get("alerts") or []
    if not isinstance(alerts, list):
        raise ProtocolError(f"answer field 'alerts' should be a list, got {alerts!r}")
    return Outcome(
        status=_str(body, "status"),
        intent_key=_opt_str(body, "intent_key"),
        generation=_int(body, "generation", 0),
        attempt=_int(body, "attempt", 0),
        state=_opt_str(body, "state"),
        effect_ref=_opt_str(body, "effect_ref"),
        result=body.get("result"),
        approval_id=_opt_str(body, "approval_id"),
        reason=reason,
        alerts=alerts,
        message=str(body.get("message", "")),
        http_status=http_status,
        raw=body,
    )


def lease_seconds(
    expires_at: datetime.datetime, server_date: str | None, local_now: datetime.datetime | None = None
) -> float:
    """How long a lease has left, without trusting this machine's clock blindly.

    ``expires_at`` is the gateway's clock. The answer's HTTP ``Date`` is the gateway's
    clock too, truncated to the second, so ``expires_at - Date`` overestimates what is
    left by up to one second. The local clock is exact when it agrees with the gateway,
    and arbitrary when it does not: it is used only when it falls within that
    truncation (plus half a second of transit); otherwise the Date's estimate, reduced
    by the second it may overstate (never below half of itself, so a short lease still
    gets beats spaced apart). Heartbeating early costs a request; late costs the claim.
    """
    now = local_now or datetime.datetime.now(datetime.timezone.utc)
    local = (expires_at - now).total_seconds()
    served: datetime.datetime | None = None
    if server_date:
        try:
            served = parsedate_to_datetime(server_date)
        except (TypeError, ValueError):
            served = None
        if served is not None and served.tzinfo is None:
            served = None
    if served is None:
        return max(0.0, local)
    by_server = (expires_at - served).total_seconds()
    if by_server - 1.5 <= local <= by_server + 0.5:
        return max(0.0, min(local, by_server))
    return max(0.0, by_server - 1.0, by_server / 2)


def parse_execute(body: dict[str, Any], server_date: str | None = None) -> Execute:
    """An execute answer (or a heartbeat's, which has the same shape)."""
    expires = parse_timestamp(_str(body, "lease_expires_at"))
    arguments = body.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ProtocolError(f"answer field 'arguments' should be an object, got {arguments!r}")
    return Execute(
        intent_key=_str(body, "intent_key"),
        generation=_int(body, "generation", 1),
        attempt=_int(body, "attempt", 1),
        execution=_int(body, "execution", 1),
        lease_expires_at=expires,
        fencing_token=_str(body, "fencing_token"),
        idempotency_key=_str(body, "idempotency_key"),
        capability=str(body.get("capability", "")),
        arguments=arguments,
        message=str(body.get("message", "")),
        lease_seconds=lease_seconds(expires, server_date),
        received_at=time.monotonic(),
        raw=body,
    )


def parse_claim(body: dict[str, Any], http_status: int, server_date: str | None = None) -> ClaimAnswer:
    """A claim's answer: execute, pass_through, or the envelope."""
    status = body.get("status")
    if status == "execute":
        return parse_execute(body, server_date)
    if status == "pass_through":
        return PassThrough(message=str(body.get("message", "")), raw=body)
    return parse_outcome(body, http_status)


def parse_key_explanation(body: dict[str, Any]) -> KeyExplanation:
    """A ``/v1/keys/derive`` answer."""

    def _list(name: str) -> list[Any]:
        value = body.get(name) or []
        if not isinstance(value, list):
            raise ProtocolError(f"answer field {name!r} should be a list, got {value!r}")
        return value

    return KeyExplanation(
        key=_str(body, "key"),
        material=body.get("material"),
        inputs=_list("inputs"),
        ignored=_list("ignored"),
        notes=_list("notes"),
        scope=body.get("scope"),
        raw=body,
    )
