"""Requests and answers of the gateway's JSON API, without I/O.

The sync and async clients differ only in how they send; what they send (paths, bodies,
headers) and how an answer is read (envelope, execute, error body, garbage) is decided
here once, so the two cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from . import context
from ._json import to_json
from .errors import GatewayError, GatewayUnavailable, StaleClaim
from .models import CompletionOutcome

__all__ = ["Request", "Wire", "decode", "retry_delays", "transport_error"]

_COMPLETIONS = ("applied", "failed", "unknown", "not_sent")
_STALE = "OG-0024"


@dataclasses.dataclass(frozen=True)
class Request:
    """One request to send: method, path under the gateway URL, JSON body, headers."""

    method: str
    path: str
    body: Any
    headers: dict[str, str]
    timeout: float | None = None


class Wire:
    """Builds every request the clients send, with the token and the run/step headers."""

    def __init__(self, token: str, extra_headers: Mapping[str, str] | None = None) -> None:
        if not isinstance(token, str) or not token:
            raise ValueError("a bearer token is required (the principal comes from the token alone)")
        self._base = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if extra_headers:
            self._base.update(extra_headers)

    def headers(
        self,
        *,
        run_id: str | None = None,
        step_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, str]:
        """The headers of a decision request: explicit ids win over the context's."""
        ctx = context.current()
        h = dict(self._base)
        run = run_id if run_id is not None else ctx.run_id
        step = step_id if step_id is not None else ctx.step_id
        if run is not None:
            h["Oncegate-Run-Id"] = context.check_header_value("run id", run)
        if step is not None:
            h["Oncegate-Step-Id"] = context.check_header_value("step id", step)
        if idempotency_key is not None:
            h["Idempotency-Key"] = context.check_header_value("Idempotency-Key", idempotency_key)
        return h

    def claim(
        self,
        capability: str,
        arguments: Mapping[str, Any] | None,
        *,
        idempotency_key: str | None = None,
        run_id: str | None = None,
        step_id: str | None = None,
    ) -> Request:
        return self._decided("/v1/intents/claim", capability, arguments, idempotency_key, run_id, step_id)

    def call(
        self,
        capability: str,
        arguments: Mapping[str, Any] | None,
        *,
        idempotency_key: str | None = None,
        run_id: str | None = None,
        step_id: str | None = None,
    ) -> Request:
        return self._decided("/v1/calls", capability, arguments, idempotency_key, run_id, step_id)

    def _decided(
        self,
        path: str,
        capability: str,
        arguments: Mapping[str, Any] | None,
        idempotency_key: str | None,
        run_id: str | None,
        step_id: str | None,
    ) -> Request:
        """A request the gateway decides (a claim or a call): the same body and headers."""
        return Request(
            "POST",
            path,
            {"capability": capability, "arguments": _arguments(arguments)},
            self.headers(run_id=run_id, step_id=step_id, idempotency_key=idempotency_key),
        )

    def complete(
        self,
        intent_key: str,
        fencing_token: str,
        outcome: CompletionOutcome,
        *,
        effect_ref: str | None = None,
        result: Any = None,
        error: str | None = None,
    ) -> Request:
        if outcome not in _COMPLETIONS:
            raise ValueError(f"outcome must be one of {', '.join(_COMPLETIONS)}, not {outcome!r}")
        body: dict[str, Any] = {"fencing_token": fencing_token, "outcome": outcome}
        if effect_ref is not None:
            body["effect_ref"] = effect_ref
        if result is not None:
            body["result"] = to_json(result)
        if error is not None:
            body["error"] = error
        return Request("POST", f"/v1/intents/{_segment(intent_key)}/complete", body, self.headers())

    def heartbeat(self, intent_key: str, fencing_token: str, timeout: float | None = None) -> Request:
        return Request(
            "POST",
            f"/v1/intents/{_segment(intent_key)}/heartbeat",
            {"fencing_token": fencing_token},
            self.headers(),
            timeout,
        )

    def derive_key(
        self,
        capability: str,
        arguments: Mapping[str, Any] | None,
        *,
        run_id: str | None = None,
        step_id: str | None = None,
    ) -> Request:
        ctx = context.current()
        body: dict[str, Any] = {"capability": capability, "arguments": _arguments(arguments)}
        run = run_id if run_id is not None else ctx.run_id
        step = step_id if step_id is not None else ctx.step_id
        if run is not None:
            body["run_id"] = run
        if step is not None:
            body["step_id"] = step
        return Request("POST", "/v1/keys/derive", body, self.headers(run_id=run_id, step_id=step_id))

    def get_intent(self, intent_key: str) -> Request:
        return Request("GET", f"/v1/intents/{_segment(intent_key)}", None, dict(self._base))

    def get_approval(self, approval_id: str) -> Request:
        return Request("GET", f"/v1/approvals/{_segment(approval_id)}", None, dict(self._base))

    def decide(self, approval_id: str, verdict: str) -> Request:
        return Request("POST", f"/v1/approvals/{_segment(approval_id)}/{verdict}", {}, dict(self._base))


def _arguments(arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    converted = to_json({} if arguments is None else arguments)
    if not isinstance(converted, dict):
        raise TypeError("capability arguments must be a mapping of names to values")
    return converted


def _segment(value: str) -> str:
    if not value:
        raise ValueError("an intent key or approval id is required")
    return quote(value, safe="")


def encode(body: Any) -> bytes:
    """The request body. ``allow_nan=False``: NaN is not JSON, and the gateway is strict."""
    return json.dumps(body, allow_nan=False, separators=(",", ":")).encode()


def decode(response: httpx.Response, *, intent_key: str | None = None) -> dict[str, Any]:
    """The JSON object of an answer that carries one (an envelope, a claim, a record).

    Raises the typed error for ``{"error": ...}`` bodies and for answers with no JSON
    object: :class:`StaleClaim` for OG-0024, :class:`GatewayUnavailable` for 5xx (no
    decision was made), :class:`GatewayError` otherwise.
    """
    status = response.status_code
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    # Only a 4xx/5xx is an error answer: an intent record (200) has an "error" member of
    # its own, the attempt's.
    if status >= 400 and isinstance(body, dict) and isinstance(body.get("error"), dict) and "status" not in body:
        err = body["error"]
        code = err.get("code") if isinstance(err.get("code"), str) else None
        message = str(err.get("message") or code or f"HTTP {status}")
        if code == _STALE:
            raise StaleClaim(message, status_code=status, intent_key=intent_key, body=body)
        if status >= 500:
            raise GatewayUnavailable(
                f"{code + ': ' if code else ''}{message}", intent_key=intent_key, status_code=status, code=code
            )
        raise GatewayError(message, code=code, status_code=status, intent_key=intent_key, body=body)
    if isinstance(body, dict) and (200 <= status < 300 or isinstance(body.get("status"), str)):
        return body
    snippet = response.text[:200]
    if status >= 500:
        raise GatewayUnavailable(
            f"the gateway answered HTTP {status} without an outcome: {snippet!r}",
            intent_key=intent_key,
            status_code=status,
        )
    raise GatewayError(
        f"unexpected answer: {snippet!r}", code=None, status_code=status, intent_key=intent_key, body=body
    )


def transport_error(exc: httpx.HTTPError, what: str, intent_key: str | None = None) -> GatewayUnavailable:
    """The error for a request that never got an answer from the gateway."""
    return GatewayUnavailable(
        f"could not reach the oncegate gateway to {what}: {type(exc).__name__}: {exc}", intent_key=intent_key
    )


def retry_delays(retries: int, first: float = 0.25, cap: float = 4.0) -> list[float]:
    """Backoff before each retry of a completion: 0.25 s, 0.5 s, 1 s, 2 s, ... capped."""
    return [min(cap, first * (2**i)) for i in range(max(0, retries))]
