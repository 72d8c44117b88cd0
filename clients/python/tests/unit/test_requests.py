"""What the client SENDS, checked on an ``httpx.MockTransport``.

These tests assert only the requests the client makes (paths, headers, bodies, their
order, and which ones it does not make). The canned answers are just enough to drive
the client to its next request; what the gateway does with them is checked by the
integration tests against a real ``oncegate serve``.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

import oncegate

KEY = "cd" * 32
TOKEN = "g1.e1." + "f" * 32


def lease(seconds: float) -> str:
    at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def execute(seconds: float = 30) -> dict[str, Any]:
    return {
        "status": "execute",
        "intent_key": KEY,
        "generation": 1,
        "attempt": 1,
        "execution": 1,
        "lease_expires_at": lease(seconds),
        "fencing_token": TOKEN,
        "idempotency_key": "og-key-1",
        "capability": "charge_card",
        "arguments": {},
        "message": "EXECUTE",
    }


def envelope(status: str, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "status": status,
        "intent_key": KEY,
        "generation": 1,
        "attempt": 1,
        "state": status,
        "effect_ref": None,
        "result": None,
        "approval_id": None,
        "reason": None,
        "alerts": [],
        "message": f"{status.upper()} line",
    }
    body.update(over)
    return body


class Recorder:
    """Records every request; ``answer(path)`` gives the (status, body) to reply with."""

    def __init__(self, answer: Callable[[str, dict[str, Any]], tuple[int, Any]]) -> None:
        self.answer = answer
        self.requests: list[tuple[str, str, httpx.Headers, Any]] = []
        self.lock = threading.Lock()

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        with self.lock:
            self.requests.append((request.method, request.url.path, request.headers, body))
        status, reply = self.answer(request.url.path, body or {})
        return httpx.Response(status, json=reply)

    async def ahandle(self, request: httpx.Request) -> httpx.Response:
        return self.handle(request)

    def paths(self) -> list[str]:
        return [p.rsplit("/", 1)[-1] for _, p, _, _ in self.requests]

    def bodies(self, suffix: str) -> list[Any]:
        return [b for _, p, _, b in self.requests if p.endswith(suffix)]


def client(rec: Recorder, **kw: Any) -> oncegate.Client:
    return oncegate.Client("http://gw.test/", "tok-planner", transport=httpx.MockTransport(rec.handle), **kw)


def aclient(rec: Recorder, **kw: Any) -> oncegate.AsyncClient:
    return oncegate.AsyncClient("http://gw.test", "tok-planner", transport=httpx.MockTransport(rec.ahandle), **kw)


def answers(mapping: dict[str, Any]) -> Callable[[str, dict[str, Any]], tuple[int, Any]]:
    def answer(path: str, body: dict[str, Any]) -> tuple[int, Any]:
        for suffix, reply in mapping.items():
            if path.endswith(suffix):
                got: tuple[int, Any] = reply(body) if callable(reply) else reply
                return got
        return 404, {"error": {"code": "not_found", "message": path}}

    return answer


def applied(body: dict[str, Any]) -> tuple[int, Any]:
    return 200, envelope("applied", effect_ref=body.get("effect_ref"), result=body.get("result"))


# -- headers and bodies ------------------------------------------------------------------


def test_claim_call_derive_carry_token_and_run_headers() -> None:
    rec = Recorder(answers({"claim": (200, execute()), "calls": (200, envelope("applied")), "derive": (200, {"key": KEY})}))
    with client(rec) as gate:
        gate.claim("charge_card", {"order_id": "A-1"})
        with oncegate.run("run-42", step="3"):
            gate.call("charge_card", {"order_id": "A-1"}, idempotency_key="orch-key-1")
            gate.derive_key("charge_card", {"order_id": "A-1"})
            with oncegate.step("4"):
                gate.claim("charge_card", {"order_id": "A-1"})
            gate.claim("charge_card", {"order_id": "A-1"}, run_id="run-override")
    (m0, p0, h0, b0), (m1, p1, h1, b1), (m2, p2, h2, b2), (_, _, h3, _), (_, _, h4, _) = rec.requests
    assert (m0, p0, b0) == ("POST", "/v1/intents/claim", {"capability": "charge_card", "arguments": {"order_id": "A-1"}})
    assert h0["authorization"] == "Bearer tok-planner"
    assert "oncegate-run-id" not in h0 and "oncegate-step-id" not in h0 and "idempotency-key" not in h0
    assert (p1, h1["oncegate-run-id"], h1["oncegate-step-id"], h1["idempotency-key"]) == (
        "/v1/calls",
        "run-42",
        "3",
        "orch-key-1",
    )
    assert p2 == "/v1/keys/derive"
    assert b2 == {"capability": "charge_card", "arguments": {"order_id": "A-1"}, "run_id": "run-42", "step_id": "3"}
    assert h2["oncegate-run-id"] == "run-42"
    assert (h3["oncegate-run-id"], h3["oncegate-step-id"]) == ("run-42", "4")
    assert h4["oncegate-run-id"] == "run-override"


def test_get_approval_reads_the_detail_with_the_token_and_no_body() -> None:
    detail = {"approval": {"id": "ap_1"}, "arguments": {"body": "hi"}, "money": [], "warning": None}
    rec = Recorder(answers({"ap_1": (200, detail)}))
    with client(rec) as gate:
        assert gate.get_approval("ap_1") == detail

    async def run() -> Any:
        async with aclient(rec) as agate:
            return await agate.get_approval("ap_1")

    assert asyncio.run(run()) == detail
    for method, path, headers, body in rec.requests:
        assert (method, path, body) == ("GET", "/v1/approvals/ap_1", None)
        assert headers["authorization"] == "Bearer tok-planner"


def test_threads_start_without_the_run_and_copy_context_carries_it() -> None:
    rec = Recorder(answers({"claim": (200, execute())}))
    gate = client(rec)
    with oncegate.run("run-7"):
        plain = threading.Thread(target=lambda: gate.claim("c", {}))
        plain.start()
        plain.join()
        ctx = contextvars.copy_context()
        copied = threading.Thread(target=lambda: ctx.run(gate.claim, "c", {}))
        copied.start()
        copied.join()
    assert "oncegate-run-id" not in rec.requests[0][2]
    assert rec.requests[1][2]["oncegate-run-id"] == "run-7"


async def _claim_in_task(gate: oncegate.AsyncClient) -> None:
    await gate.claim("c", {})


@pytest.mark.asyncio
async def test_asyncio_tasks_inherit_the_run() -> None:
    rec = Recorder(answers({"claim": (200, execute())}))
    async with aclient(rec) as gate:
        with oncegate.run("run-async", step="s1"):
            await asyncio.gather(*(asyncio.create_task(_claim_in_task(gate)) for _ in range(3)))
    assert [(h["oncegate-run-id"], h["oncegate-step-id"]) for _, _, h, _ in rec.requests] == [("run-async", "s1")] * 3


def test_complete_and_heartbeat_bodies() -> None:
    rec = Recorder(answers({"complete": applied, "heartbeat": (200, {**execute(), "status": "in_flight"})}))
    with client(rec) as gate:
        out = gate.complete(KEY, "applied", fencing_token=TOKEN, effect_ref="ch_1", result={"id": "ch_1"})
        gate.complete(KEY, "not_sent", fencing_token=TOKEN, error="connect refused")
        renewed = gate.heartbeat(KEY, fencing_token=TOKEN)
    assert out.status == "applied"
    assert isinstance(renewed, oncegate.Execute)
    (_, p0, _, b0), (_, _, _, b1), (_, p2, _, b2) = rec.requests
    assert p0 == f"/v1/intents/{KEY}/complete"
    assert b0 == {"fencing_token": TOKEN, "outcome": "applied", "effect_ref": "ch_1", "result": {"id": "ch_1"}}
    assert b1 == {"fencing_token": TOKEN, "outcome": "not_sent", "error": "connect refused"}
    assert (p2, b2) == (f"/v1/intents/{KEY}/heartbeat", {"fencing_token": TOKEN})
    with pytest.raises(ValueError):
        oncegate.Client("http://gw", "t").complete(KEY, "success", fencing_token=TOKEN)  # type: ignore[arg-type]


# -- the decorator's requests --------------------------------------------------------------


def test_protect_claims_with_bound_arguments_passes_the_key_and_records_applied() -> None:
    rec = Recorder(answers({"claim": (200, execute()), "complete": applied}))
    gate = client(rec)
    seen: list[str] = []

    @gate.protect("charge_card")
    def charge_card(order_id: str, amount: str, *, memo: str = "", idempotency_key: str) -> dict[str, Any]:
        seen.append(idempotency_key)
        return {"id": "ch_77", "amount_minor": 1250}

    assert charge_card("A-1", "12.50", memo="first") == {"id": "ch_77", "amount_minor": 1250}
    assert seen == ["og-key-1"]
    assert rec.paths() == ["claim", "complete"]
    assert rec.bodies("claim") == [
        {"capability": "charge_card", "arguments": {"order_id": "A-1", "amount": "12.50", "memo": "first"}}
    ]
    assert rec.bodies("complete") == [
        {
            "fencing_token": TOKEN,
            "outcome": "applied",
            "effect_ref": "ch_77",
            "result": {"id": "ch_77", "amount_minor": 1250},
        }
    ]


def test_protect_passes_a_key_context_first_and_claims_the_other_arguments() -> None:
    rec = Recorder(answers({"claim": (200, execute()), "complete": applied}))
    gate = client(rec)

    @gate.protect("charge_card")
    def charge_card(key: oncegate.KeyContext, /, order_id: str, amount: str) -> dict[str, Any]:
        return {"id": "ch_78", "key": key.idempotency_key}

    assert charge_card("A-1", "12.50") == {"id": "ch_78", "key": "og-key-1"}
    assert rec.bodies("claim") == [{"capability": "charge_card", "arguments": {"order_id": "A-1", "amount": "12.50"}}]
    assert [b["effect_ref"] for b in rec.bodies("complete")] == ["ch_78"]
    with pytest.raises(TypeError, match="idempotency_key"):
        charge_card("A-1", "12.50", idempotency_key="mine")  # type: ignore[call-arg]
    assert rec.paths() == ["claim", "complete"]


def test_protect_records_unknown_for_an_exception_that_may_have_been_sent() -> None:
    rec = Recorder(answers({"claim": (200, execute()), "complete": (202, envelope("unknown"))}))
    gate = client(rec)

    @gate.protect("charge_card")
    def charge_card(order_id: str, *, idempotency_key: str) -> None:
        raise httpx.ReadTimeout("provider too slow")

    with pytest.raises(httpx.ReadTimeout):
        charge_card("A-1")
    (body,) = rec.bodies("complete")
    assert body["outcome"] == "unknown"
    assert "ReadTimeout" in body["error"] and body["fencing_token"] == TOKEN


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def test_protect_records_not_sent_for_a_real_connection_refused() -> None:
    rec = Recorder(answers({"claim": (200, execute()), "complete": (200, envelope("failed", state="not_applied"))}))
    gate = client(rec)
    provider = f"http://127.0.0.1:{closed_port()}"

    @gate.protect("charge_card")
    def charge_card(order_id: str, *, idempotency_key: str) -> None:
        httpx.post(f"{provider}/v1/charges", headers={"Idempotency-Key": idempotency_key}, json={})

    with pytest.raises(httpx.ConnectError):
        charge_card("A-1")
    assert [b["outcome"] for b in rec.bodies("complete")] == ["not_sent"]


def test_protect_on_a_replay_sends_nothing_after_the_claim_and_never_calls_the_function() -> None:
    stored = {"id": "ch_1", "amount_minor": 1250}
    rec = Recorder(answers({"claim": (200, envelope("replayed", state="applied", effect_ref="ch_1", result=stored))}))
    gate = client(rec)
    calls: list[str] = []

    @gate.protect("charge_card", from_result=lambda r: ("restored", r["id"]))
    def charge_card(order_id: str, *, idempotency_key: str) -> Any:
        calls.append(order_id)

    assert charge_card("A-1") == ("restored", "ch_1")
    assert calls == [] and rec.paths() == ["claim"]


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (202, envelope("in_flight"), oncegate.InFlight),
        (202, envelope("unknown"), oncegate.OutcomeUnknown),
        (202, envelope("pending_approval", approval_id="ap_1"), oncegate.PendingApproval),
        (403, envelope("denied", reason={"code": "OG-0003", "message": "no"}), oncegate.Denied),
        (429, envelope("refused", reason={"code": "OG-0004", "message": "ceiling"}), oncegate.Refused),
        (200, envelope("replayed", state="failed", result={"declined": True}), oncegate.Failed),
        (200, envelope("dry_run", state=None), oncegate.DryRun),
    ],
)
def test_protect_raises_for_non_executing_outcomes_and_sends_nothing_else(
    status: int, body: dict[str, Any], error: type[oncegate.OutcomeError]
) -> None:
    rec = Recorder(answers({"claim": (status, body)}))
    gate = client(rec)

    @gate.protect("charge_card")
    def charge_card(order_id: str, *, idempotency_key: str) -> None:
        raise AssertionError("must not run")

    with pytest.raises(error) as info:
        charge_card("A-1")
    assert info.value.intent_key == KEY and info.value.message == body["message"]
    assert rec.paths() == ["claim"]


def test_protect_with_the_gateway_down_never_calls_the_function() -> None:
    gate = oncegate.Client(f"http://127.0.0.1:{closed_port()}", "tok")
    calls: list[str] = []

    @gate.protect("charge_card")
    def charge_card(order_id: str, *, idempotency_key: str) -> None:
        calls.append(order_id)

    with pytest.raises(oncegate.GatewayUnavailable):
        charge_card("A-1")
    assert calls == []


def test_heartbeats_while_the_function_runs_then_complete() -> None:
    # A lease long enough that a loaded machine still hands the function a claim with
    # time to send (the client refuses to start one whose lease is nearly gone).
    renewed = {**execute(1.5), "status": "in_flight"}
    rec = Recorder(answers({"claim": (200, execute(1.5)), "heartbeat": (200, renewed), "complete": applied}))
    gate = client(rec)

    @gate.protect("charge_card")
    def charge_card(order_id: str, *, idempotency_key: str) -> dict[str, str]:
        time.sleep(0.8)
        return {"id": "ch_1"}

    charge_card("A-1")
    paths = rec.paths()
    assert paths[0] == "claim" and paths[-1] == "complete"
    assert "heartbeat" in paths[1:-1], paths
    assert all(b == {"fencing_token": TOKEN} for b in rec.bodies("heartbeat"))


def test_a_lost_claim_still_tries_to_complete_then_raises_claim_lost() -> None:
    stale = (409, {"error": {"code": "OG-0024", "message": "stale claim"}})
    # Long enough to be started on a loaded machine (see the test above).
    rec = Recorder(answers({"claim": (200, execute(1.2)), "heartbeat": stale, "complete": stale}))
    gate = client(rec)

    @gate.protect("charge_card")
    def charge_card(order_id: str, *, idempotency_key: str) -> dict[str, str]:
        time.sleep(0.8)
        return {"id": "ch_late"}

    with pytest.raises(oncegate.ClaimLost) as info:
        charge_card("A-1")
    assert info.value.intent_key == KEY and info.value.value == {"id": "ch_late"}
    assert "lost while the function ran" in str(info.value)
    assert rec.paths()[-1] == "complete" and "heartbeat" in rec.paths()


def test_completion_is_retried_with_the_same_body_then_given_up() -> None:
    replies: Iterator[Any] = iter(
        [
            (503, {"error": {"code": "OG-0007", "message": "store down"}}),
            (503, envelope("refused", reason={"code": "OG-0007", "message": "store unavailable"})),
            applied,
        ]
    )

    def complete(body: dict[str, Any]) -> tuple[int, Any]:
        reply = next(replies)
        got: tuple[int, Any] = reply(body) if callable(reply) else reply
        return got

    rec = Recorder(answers({"complete": complete}))
    gate = client(rec, complete_retries=2)
    assert gate.complete(KEY, "applied", fencing_token=TOKEN, effect_ref="ch_1").status == "applied"
    bodies = rec.bodies("complete")
    assert len(bodies) == 3 and all(b == bodies[0] for b in bodies)

    down = oncegate.Client(f"http://127.0.0.1:{closed_port()}", "tok", complete_retries=1)
    with pytest.raises(oncegate.CompletionNotRecorded, match="reconcile") as info:
        down.complete(KEY, "applied", fencing_token=TOKEN)
    assert info.value.intent_key == KEY and isinstance(info.value, oncegate.GatewayUnavailable)


# -- intent() blocks ---------------------------------------------------------------------------


def test_intent_block_records_what_the_body_says() -> None:
    rec = Recorder(answers({"claim": (200, execute()), "complete": applied}))
    gate = client(rec)
    with gate.intent("refund", {"order_id": "o1", "amount": "30.00"}) as claim:
        assert claim.execute and not claim.replayed
        assert claim.idempotency_key == "og-key-1"
        claim.applied(effect_ref="re_1", result={"id": "re_1"})
    assert claim.result == {"id": "re_1"} and claim.effect_ref == "re_1"
    assert rec.paths() == ["claim", "complete"]
    assert rec.bodies("claim")[0] == {"capability": "refund", "arguments": {"order_id": "o1", "amount": "30.00"}}


def test_intent_block_on_a_replay_guards_the_key() -> None:
    rec = Recorder(answers({"claim": (200, envelope("replayed", state="applied", result={"id": "re_0"}))}))
    gate = client(rec)
    with gate.intent("refund", {"order_id": "o1"}) as claim:
        assert not claim.execute and claim.replayed and claim.result == {"id": "re_0"}
    with pytest.raises(oncegate.Replayed):
        with gate.intent("refund", {"order_id": "o1"}) as claim:
            claim.idempotency_key
    assert rec.paths() == ["claim", "claim"]


def test_intent_block_exception_and_silent_exit_record_unknown() -> None:
    rec = Recorder(answers({"claim": (200, execute()), "complete": (202, envelope("unknown"))}))
    gate = client(rec)
    with pytest.raises(RuntimeError):
        with gate.intent("refund", {"order_id": "o1"}):
            raise RuntimeError("provider exploded")
    with pytest.raises(oncegate.IntentNotRecorded):
        with gate.intent("refund", {"order_id": "o1"}):
            pass
    assert [b["outcome"] for b in rec.bodies("complete")] == ["unknown", "unknown"]


# -- async --------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_async_protect_requests() -> None:
    renewed = {**execute(0.45), "status": "in_flight"}
    rec = Recorder(answers({"claim": (200, execute(0.45)), "heartbeat": (200, renewed), "complete": applied}))
    gate = aclient(rec)

    @gate.protect("charge_card", effect_ref="/charge/id")
    async def charge_card(order_id: str, *, idempotency_key: str) -> dict[str, Any]:
        await asyncio.sleep(0.4)
        return {"charge": {"id": "ch_async"}, "key": idempotency_key}

    assert await charge_card("A-1") == {"charge": {"id": "ch_async"}, "key": "og-key-1"}
    paths = rec.paths()
    assert paths[0] == "claim" and paths[-1] == "complete" and "heartbeat" in paths
    (body,) = rec.bodies("complete")
    assert body["effect_ref"] == "ch_async" and body["outcome"] == "applied"
    await gate.aclose()


@pytest.mark.asyncio
async def test_async_protect_passes_a_key_context_first() -> None:
    rec = Recorder(answers({"claim": (200, execute()), "complete": applied}))
    gate = aclient(rec)

    @gate.protect("charge_card")
    async def charge_card(key: oncegate.KeyContext, /, order_id: str) -> dict[str, Any]:
        return {"id": "ch_79", "key": key.idempotency_key}

    assert await charge_card("A-1") == {"id": "ch_79", "key": "og-key-1"}
    assert rec.bodies("claim") == [{"capability": "charge_card", "arguments": {"order_id": "A-1"}}]
    assert rec.paths() == ["claim", "complete"]
    await gate.aclose()


@pytest.mark.asyncio
async def test_async_cancellation_records_unknown() -> None:
    rec = Recorder(answers({"claim": (200, execute()), "complete": (202, envelope("unknown"))}))
    gate = aclient(rec)

    @gate.protect("charge_card")
    async def charge_card(order_id: str, *, idempotency_key: str) -> None:
        await asyncio.sleep(10)

    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(charge_card("A-1"), 0.2)
    assert [b["outcome"] for b in rec.bodies("complete")] == ["unknown"]
    await gate.aclose()


@pytest.mark.asyncio
async def test_async_intent_block() -> None:
    rec = Recorder(answers({"claim": (200, execute()), "complete": applied}))
    async with aclient(rec) as gate:
        async with gate.intent("refund", {"order_id": "o1"}) as claim:
            assert claim.idempotency_key == "og-key-1"
            await claim.applied(effect_ref="re_2", result={"id": "re_2"})
    assert claim.effect_ref == "re_2"
    assert [b["outcome"] for b in rec.bodies("complete")] == ["applied"]


def test_a_result_the_gateway_refuses_is_recorded_without_it() -> None:
    def complete(body: dict[str, Any]) -> tuple[int, Any]:
        if "result" in body:
            return 422, {"error": {"code": "OG-0009", "message": "the JSON number 1e400 cannot be held exactly"}}
        return applied(body)

    rec = Recorder(answers({"claim": (200, execute()), "complete": complete}))
    gate = client(rec)

    @gate.protect("charge_card")
    def charge_card(order_id: str, *, idempotency_key: str) -> dict[str, Any]:
        return {"id": "ch_big", "amount": 10**30}

    with pytest.raises(TypeError, match="refused to store the result"):
        charge_card("A-1")
    first, second = rec.bodies("complete")
    assert first["result"] == {"id": "ch_big", "amount": 10**30}
    assert second == {"fencing_token": TOKEN, "outcome": "applied", "effect_ref": "ch_big"}


def test_intent_block_with_a_result_that_is_not_json_still_records_unknown() -> None:
    rec = Recorder(answers({"claim": (200, execute()), "complete": (202, envelope("unknown"))}))
    gate = client(rec)
    with pytest.raises(TypeError):
        with gate.intent("refund", {"order_id": "o1"}) as claim:
            claim.applied(effect_ref="re_1", result=object())
    assert [b["outcome"] for b in rec.bodies("complete")] == ["unknown"]


def test_a_claim_whose_lease_ran_out_before_the_call_sends_nothing_to_the_provider() -> None:
    # The lease has already run out when the claim's answer arrives (a process paused
    # between the claim and the call): the function must not run, and the client says
    # "not sent" to the gateway, which refuses it as stale or records it.
    stale = (409, {"error": {"code": "OG-0024", "message": "the claim's lease expired"}})
    rec = Recorder(answers({"claim": (200, execute(seconds=-5)), "complete": stale}))
    called: list[str] = []

    with client(rec) as gate:

        @gate.protect("charge_card")
        def charge(order_id: str, *, idempotency_key: str) -> dict[str, Any]:
            called.append(idempotency_key)
            return {"id": "ch_1"}

        with pytest.raises(oncegate.StaleClaim) as err:
            charge("A-1")
    assert called == []
    assert err.value.intent_key == KEY
    assert [b["outcome"] for b in rec.bodies("complete")] == ["not_sent"]


@pytest.mark.asyncio
async def test_async_a_claim_whose_lease_ran_out_before_the_call_sends_nothing() -> None:
    stale = (409, {"error": {"code": "OG-0024", "message": "the claim's lease expired"}})
    rec = Recorder(answers({"claim": (200, execute(seconds=-5)), "complete": stale}))
    called: list[str] = []
    async with aclient(rec) as gate:

        @gate.protect("charge_card")
        async def charge(order_id: str, *, idempotency_key: str) -> dict[str, Any]:
            called.append(idempotency_key)
            return {"id": "ch_1"}

        with pytest.raises(oncegate.StaleClaim):
            await charge("A-1")
    assert called == []
    assert [b["outcome"] for b in rec.bodies("complete")] == ["not_sent"]


def test_an_effect_ref_rule_that_raises_still_records_applied_then_raises() -> None:
    # The function returned: the effect happened. A broken effect_ref= rule must not
    # leave it unrecorded (the lease would expire into unknown and a human might
    # approve a second execution).
    rec = Recorder(answers({"claim": (200, execute()), "complete": applied}))
    with client(rec) as gate:

        @gate.protect("charge_card", effect_ref=lambda r: r["missing"])
        def charge(order_id: str, *, idempotency_key: str) -> dict[str, Any]:
            return {"id": "ch_1"}

        with pytest.raises(TypeError) as err:
            charge("A-1")
    assert isinstance(err.value.__cause__, KeyError)
    [body] = rec.bodies("complete")
    assert (body["outcome"], body.get("effect_ref")) == ("applied", None)
    assert body["result"] == {"id": "ch_1"}


def test_an_intent_block_whose_lease_ran_out_does_not_run() -> None:
    stale = (409, {"error": {"code": "OG-0024", "message": "the claim's lease expired"}})
    rec = Recorder(answers({"claim": (200, execute(seconds=-5)), "complete": stale}))
    ran: list[bool] = []
    with client(rec) as gate:
        with pytest.raises(oncegate.StaleClaim):
            with gate.intent("refund", {"order_id": "o1"}):
                ran.append(True)
    assert ran == []
    assert [b["outcome"] for b in rec.bodies("complete")] == ["not_sent"]
