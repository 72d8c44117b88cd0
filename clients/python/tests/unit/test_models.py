"""Parsing the gateway's answers, with the bodies the wire contract shows."""

from __future__ import annotations

import datetime
from typing import Any

import httpx
import pytest

import oncegate
from oncegate import _wire
from oncegate.models import ProtocolError, lease_seconds, parse_claim, parse_timestamp

KEY = "ab" * 32

EXECUTE: dict[str, Any] = {
    "status": "execute",
    "intent_key": KEY,
    "generation": 1,
    "attempt": 2,
    "execution": 1,
    "lease_expires_at": "2026-12-01T17:00:30Z",
    "fencing_token": "g1.e1." + "0" * 32,
    "idempotency_key": "og_" + KEY,
    "capability": "charge_card",
    "arguments": {"order_id": "A-1", "amount": "12.50"},
    "message": "EXECUTE: charge_card",
}


def envelope(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "status": "replayed",
        "intent_key": KEY,
        "generation": 1,
        "attempt": 3,
        "state": "applied",
        "effect_ref": "ch_123",
        "result": {"id": "ch_123", "amount_minor": 1250},
        "approval_id": None,
        "reason": None,
        "alerts": [],
        "message": "ALREADY APPLIED as ch_123 - do not call again.",
    }
    body.update(over)
    return body


def test_timestamps() -> None:
    utc = datetime.timezone.utc
    assert parse_timestamp("2026-12-01T17:00:30Z") == datetime.datetime(2026, 12, 1, 17, 0, 30, tzinfo=utc)
    assert parse_timestamp("2026-12-01T17:00:30.123456789Z").microsecond == 123456
    assert parse_timestamp("2026-12-01T17:00:30.5+01:00") == datetime.datetime(
        2026, 12, 1, 16, 0, 30, 500000, tzinfo=utc
    )
    with pytest.raises(ProtocolError):
        parse_timestamp("yesterday")


def test_execute_answer() -> None:
    claim = parse_claim(EXECUTE, 200, "Tue, 01 Dec 2026 17:00:00 GMT")
    assert isinstance(claim, oncegate.Execute)
    assert claim.intent_key == KEY
    assert (claim.generation, claim.attempt, claim.execution) == (1, 2, 1)
    assert claim.idempotency_key == "og_" + KEY
    assert claim.fencing_token.startswith("g1.e1.")
    assert claim.arguments == {"order_id": "A-1", "amount": "12.50"}
    assert claim.lease_expires_at.tzinfo is not None
    # The local clock is far past 2026-12-01T17:00:30Z or before it; either way the
    # Date header bounds the estimate at 30 s or the local one is smaller.
    assert 0 <= claim.lease_seconds <= 30
    assert oncegate.Claim is oncegate.Execute


def test_lease_estimate_trusts_the_local_clock_only_when_it_agrees() -> None:
    utc = datetime.timezone.utc
    expires = datetime.datetime(2026, 12, 1, 17, 0, 30, tzinfo=utc)
    # In sync (the Date truncates 17:00:20.4 to :20): the exact local figure.
    local = datetime.datetime(2026, 12, 1, 17, 0, 20, 400000, tzinfo=utc)
    assert lease_seconds(expires, "Tue, 01 Dec 2026 17:00:20 GMT", local) == pytest.approx(9.6)
    # The local clock a minute behind: the gateway's Date decides, less the second it may overstate.
    behind = datetime.datetime(2026, 12, 1, 16, 59, 0, tzinfo=utc)
    assert lease_seconds(expires, "Tue, 01 Dec 2026 17:00:27 GMT", behind) == 2
    # The local clock an hour ahead (the lease looks long expired): still the Date.
    ahead = datetime.datetime(2026, 12, 1, 18, 0, 0, tzinfo=utc)
    assert lease_seconds(expires, "Tue, 01 Dec 2026 17:00:27 GMT", ahead) == 2
    # A one-second lease: never estimated at (nearly) nothing because of the truncation.
    assert lease_seconds(expires, "Tue, 01 Dec 2026 17:00:29 GMT", ahead) == 0.5
    # No usable Date: the local clock is all there is.
    assert lease_seconds(expires, None, local) == pytest.approx(9.6)
    assert lease_seconds(expires, "garbage", local) == pytest.approx(9.6)
    assert lease_seconds(expires, None, expires + datetime.timedelta(seconds=5)) == 0


def test_pass_through_answer() -> None:
    answer = parse_claim({"status": "pass_through", "intent_key": None, "message": "read"}, 200)
    assert isinstance(answer, oncegate.PassThrough)


def test_replayed_envelope() -> None:
    outcome = parse_claim(envelope(), 200)
    assert isinstance(outcome, oncegate.Outcome)
    assert outcome.status == "replayed"
    assert outcome.result == {"id": "ch_123", "amount_minor": 1250}
    assert outcome.effect_ref == "ch_123"
    assert outcome.succeeded and not outcome.failed
    assert outcome.raise_for_status() is outcome


@pytest.mark.parametrize(
    ("over", "error"),
    [
        ({"status": "in_flight", "state": "in_flight"}, oncegate.InFlight),
        ({"status": "unknown", "state": "unknown"}, oncegate.OutcomeUnknown),
        ({"status": "pending_approval", "approval_id": "ap_1"}, oncegate.PendingApproval),
        ({"status": "denied", "reason": {"code": "OG-0001", "message": "policy"}}, oncegate.Denied),
        ({"status": "refused", "reason": {"code": "OG-0004", "message": "ceiling"}}, oncegate.Refused),
        ({"status": "failed", "state": "failed"}, oncegate.Failed),
        ({"status": "replayed", "state": "failed", "result": {"error": "card_declined"}}, oncegate.Failed),
        ({"status": "dry_run", "state": None}, oncegate.DryRun),
        ({"status": "something_new"}, oncegate.OutcomeError),
    ],
)
def test_non_successes_raise_typed_errors(over: dict[str, Any], error: type[oncegate.OutcomeError]) -> None:
    outcome = oncegate.error_for_outcome(parse_claim(envelope(**over), 202))  # type: ignore[arg-type]
    assert type(outcome) is error
    assert isinstance(outcome, oncegate.OncegateError)
    assert outcome.intent_key == KEY
    assert str(outcome) == "ALREADY APPLIED as ch_123 - do not call again."
    assert outcome.outcome.status == over["status"]


def test_error_fields() -> None:
    pending = oncegate.error_for_outcome(parse_claim(envelope(status="pending_approval", approval_id="ap_7"), 202))  # type: ignore[arg-type]
    assert isinstance(pending, oncegate.PendingApproval) and pending.approval_id == "ap_7"
    refused = oncegate.error_for_outcome(
        parse_claim(envelope(status="refused", reason={"code": "OG-0015", "message": "contention"}), 429)  # type: ignore[arg-type]
    )
    assert isinstance(refused, oncegate.Refused) and refused.code == "OG-0015"
    failed = oncegate.error_for_outcome(parse_claim(envelope(status="replayed", state="failed", result={"x": 1}), 200))  # type: ignore[arg-type]
    assert isinstance(failed, oncegate.Failed) and failed.result == {"x": 1}


def response(status: int, body: Any, **headers: str) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers, request=httpx.Request("POST", "http://gw/x"))


def test_decode_error_bodies() -> None:
    with pytest.raises(oncegate.StaleClaim) as stale:
        _wire.decode(response(409, {"error": {"code": "OG-0024", "message": "stale claim"}}), intent_key=KEY)
    assert stale.value.intent_key == KEY and stale.value.status_code == 409
    assert oncegate.ClaimLost is oncegate.StaleClaim
    with pytest.raises(oncegate.GatewayError) as bad_token:
        _wire.decode(response(401, {"error": {"code": "OG-0054", "message": "bad token"}}))
    assert bad_token.value.code == "OG-0054"
    assert "OG-0054" in str(bad_token.value)
    with pytest.raises(oncegate.GatewayUnavailable) as store:
        _wire.decode(response(503, {"error": {"code": "OG-0007", "message": "store down"}}))
    assert store.value.code == "OG-0007"
    gateway_html = httpx.Response(502, text="<html>bad gateway</html>", request=httpx.Request("POST", "http://gw/x"))
    with pytest.raises(oncegate.GatewayUnavailable):
        _wire.decode(gateway_html)


def test_decode_an_intent_record_with_an_error_member_is_not_an_error() -> None:
    record = {"key": KEY, "state": "not_applied", "error": {"code": "OG-0010", "message": "connection refused"}}
    assert _wire.decode(response(200, record)) == record


def test_decode_envelopes_with_4xx_statuses() -> None:
    body = _wire.decode(response(409, envelope(status="refused", reason={"code": "OG-0012", "message": "kill"})))
    assert body["status"] == "refused"
    body = _wire.decode(response(403, envelope(status="denied")))
    assert body["status"] == "denied"


def test_key_explanation() -> None:
    from oncegate.models import parse_key_explanation

    explained = parse_key_explanation(
        {"key": KEY, "material": "{...}", "inputs": [{"path": "amount"}], "ignored": ["memo"], "scope": {"kind": "global"}}
    )
    assert explained.key == KEY and explained.ignored == ["memo"] and explained.notes == []
