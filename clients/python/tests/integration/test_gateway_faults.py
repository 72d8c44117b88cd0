"""The decorator and the two-phase API against a real gateway when things go wrong.

Every test counts the charges the sandbox committed: the sandbox ignores idempotency
keys for charges, so any second execution of an intent would be a second charge in its
ledger. Each test also reads what the gateway recorded (GET /v1/intents/{key}).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import oncegate
import pytest

from ogharness import (
    AGENT_TOKEN,
    LEASE_SECONDS,
    Stack,
    closed_port,
    create_charge,
    new_order,
    wait_for,
)

T = TypeVar("T")

WORKER = Path(__file__).with_name("killable_worker.py")


def until_settled(call: Callable[[], T], timeout: float = 20.0) -> tuple[T, int]:
    """Calls `call` until it stops raising OutcomeUnknown; answers its result and how
    many OutcomeUnknown came first.

    An intent whose attempt timed out is `unknown` until the gateway has reconciled it
    (on this claim or by its sweep); the client says so with a typed OutcomeUnknown,
    and the caller's right move is to wait and ask again, never to re-execute.
    """
    deadline = time.monotonic() + timeout
    unknowns = 0
    while True:
        try:
            return call(), unknowns
        except oncegate.OutcomeUnknown:
            unknowns += 1
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.3)


def test_timeout_after_commit_then_drifting_replans_charge_once(stack: Stack) -> None:
    """The provider commits, then stalls past the SDK's timeout; the planner re-plans
    three times with drifted arguments and a new memo each time.

    Can fail: the function posts every time it runs, and the sandbox charges every post
    (keys ignored), so a re-plan that re-executed would be a second charge, and a
    re-plan keyed on the raw text ("12.50" vs 12.5 vs "12.50 USD") would be a new intent.
    """
    order = new_order("timeout")
    calls: list[dict[str, Any]] = []
    with oncegate.Client(stack.url, token=AGENT_TOKEN) as gate:

        @gate.protect("charge_card")
        def charge_card(
            order_id: str, amount: str | float, memo: str, *, idempotency_key: str
        ) -> dict[str, Any]:
            calls.append({"amount": amount, "memo": memo, "key": idempotency_key})
            first = len(calls) == 1
            return create_charge(
                stack.sandbox_url,
                order_id=order_id,
                amount=amount,
                memo=memo,
                idempotency_key=idempotency_key,
                timeout=1.0,
                # The first attempt commits, then answers only after 10 s.
                fault="stall_after_commit" if first else None,
                fault_delay_ms=10_000 if first else None,
            )

        with pytest.raises(httpx.ReadTimeout):
            charge_card(order, "12.50", memo="charge for the order")
        committed = stack.charges(order)
        assert len(committed) == 1, "the provider committed the first attempt"
        charge_id = committed[0]["id"]
        assert committed[0]["idempotency_key"] == calls[0]["key"], "the key reached the provider"

        key = stack.intent_key({"order_id": order, "amount": "12.50"})
        # The client recorded `unknown` (a timeout may have reached the provider); the
        # sweep may already have reconciled it.
        assert stack.intent(key)["state"] in ("unknown", "applied")

        replans: list[tuple[str | float, str]] = [
            (12.5, "retrying: the previous result was lost"),
            ("12.50 USD", "the charge timed out, trying once more"),
            ("12.50", "final attempt, customer is waiting"),
        ]
        for amount, memo in replans:
            result, _unknowns = until_settled(lambda: charge_card(order, amount, memo=memo))
            assert result["id"] == charge_id, f"re-plan {amount!r} got the stored charge"

    assert len(calls) == 1, f"the function ran again: {calls}"
    assert [c["id"] for c in stack.charges(order)] == [charge_id]
    record = stack.intent(key)
    assert record["state"] == "applied"
    assert record["effect_ref"] == charge_id
    assert record["executions"] == 1
    # What the gateway heard: the client's `unknown`, then a reconciliation that found
    # the provider's charge (by the sweep or by a re-plan's claim).
    moves = [(e["kind"], e["to"]) for e in stack.audit(key)]
    assert ("effect", "unknown") in moves, moves
    assert ("reconcile", "applied") in moves, moves
    assert moves.index(("effect", "unknown")) < moves.index(("reconcile", "applied")), moves


def test_a_worker_stalled_past_its_lease_cannot_complete(stack: Stack) -> None:
    """Worker A claims and stalls past its lease; worker B claims, executes and completes;
    A's heartbeat and completions then bounce with StaleClaim and change nothing.

    Can fail: if the gateway took A's late `not_sent`, the intent would read not_applied
    and the last claim would execute again (a second charge: keys are ignored); if it
    took A's `applied`, the record would name A's made-up charge instead of B's.
    """
    order = new_order("stale")
    args = {"order_id": order, "amount": "30.00", "memo": "worker A"}
    with oncegate.Client(stack.url, token=AGENT_TOKEN) as gate:
        a = gate.claim("charge_card", args)
        assert isinstance(a, oncegate.Execute), f"A holds the execution: {a!r}"
        time.sleep(LEASE_SECONDS + 0.5)

        def claim_b() -> oncegate.Execute | None:
            b = gate.claim("charge_card", {**args, "memo": "worker B"})
            if isinstance(b, oncegate.Outcome) and b.status in ("unknown", "in_flight"):
                # A's lease expired with nothing recorded: unknown until the settle
                # horizon has passed with the provider showing no charge.
                return None
            assert isinstance(b, oncegate.Execute), f"B is handed the execution: {b!r}"
            return b

        b = wait_for("worker B to be handed the execution", claim_b, timeout=20)
        assert b.intent_key == a.intent_key
        assert b.fencing_token != a.fencing_token
        assert b.execution > a.execution
        assert b.idempotency_key == a.idempotency_key, "a re-execution sends the same key"

        charge = create_charge(
            stack.sandbox_url,
            order_id=order,
            amount="30.00",
            memo="worker B",
            idempotency_key=b.idempotency_key,
        )
        done = gate.complete(b, "applied", effect_ref=charge["id"], result=charge)
        assert done.status == "applied"
        assert done.effect_ref == charge["id"]

        # A wakes up: every move of its claim is a 409 OG-0024 that records nothing.
        with pytest.raises(oncegate.StaleClaim) as stale:
            gate.heartbeat(a)
        assert (stale.value.status_code, stale.value.code) == (409, "OG-0024")
        with pytest.raises(oncegate.StaleClaim) as stale:
            gate.complete(a, "applied", effect_ref="ch_made_up_by_a", result={"id": "ch_made_up_by_a"})
        assert (stale.value.status_code, stale.value.code) == (409, "OG-0024")
        with pytest.raises(oncegate.StaleClaim):
            gate.complete(a, "not_sent")
        with pytest.raises(oncegate.StaleClaim):
            gate.complete(a, "failed", error="worker A gave up")

        record = stack.intent(a.intent_key)
        assert record["state"] == "applied"
        assert record["effect_ref"] == charge["id"]

        again = gate.claim("charge_card", {**args, "memo": "worker C"})
        assert isinstance(again, oncegate.Outcome), f"a later claim replays: {again!r}"
        assert again.status == "replayed"
        assert again.effect_ref == charge["id"]

    assert [c["id"] for c in stack.charges(order)] == [charge["id"]]


def _worker(stack: Stack, order: str, mode: str) -> subprocess.Popen[str]:
    """Starts killable_worker.py, which charges `order` through the decorator."""
    env = {
        **os.environ,
        "OG_URL": stack.url,
        "OG_TOKEN": AGENT_TOKEN,
        "OG_SANDBOX_URL": stack.sandbox_url,
        "OG_ORDER": order,
        "OG_MODE": mode,
    }
    return subprocess.Popen(
        [sys.executable, str(WORKER)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def read_line(proc: subprocess.Popen[str], prefix: str, timeout: float) -> str:
    """The first line `proc` prints that starts with `prefix`, waiting at most `timeout`."""
    found: queue.Queue[str] = queue.Queue()

    def reader() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(prefix):
                found.put(line.strip())
                return
        found.put("")

    threading.Thread(target=reader, daemon=True).start()
    try:
        line = found.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"the worker printed no {prefix!r} line in {timeout}s") from None
    if not line:
        err = proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
        raise AssertionError(f"the worker ended without a {prefix!r} line: {err}")
    return line


def test_sigkill_after_the_provider_committed_is_reconciled_and_replayed(stack: Stack) -> None:
    """The process running the decorated function is SIGKILLed after the provider
    committed and before anything was recorded; the gateway turns the intent unknown
    after the lease, reconciles it against the provider, and a re-run of the script
    gets the charge back without calling the function.

    Can fail: the re-run's function would post again (a second charge: keys are
    ignored) and print CALLED if the gateway handed it the execution.
    """
    order = new_order("killed")
    proc = _worker(stack, order, "hang")
    try:
        line = read_line(proc, "COMMITTED ", timeout=30)
        _, charge_id, sent_key = line.split()
        [effect] = stack.charges(order)
        assert effect["id"] == charge_id and effect["idempotency_key"] == sent_key
        key = stack.intent_key({"order_id": order, "amount": "45.00"})
        assert stack.intent(key)["state"] == "in_flight", "claimed, nothing recorded yet"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL

    record = stack.wait_state(key, "applied", timeout=LEASE_SECONDS + 15)
    assert record["effect_ref"] == charge_id
    assert record["executions"] == 1
    # Nobody completed it: the sweep took the expired claim and found the charge.
    [reconciled] = [e for e in stack.audit(key) if e["to"] == "applied"]
    assert reconciled["kind"] == "reconcile", reconciled
    assert reconciled["detail"]["effect_ref"] == charge_id

    rerun = _worker(stack, order, "normal")
    out, err = rerun.communicate(timeout=60)
    assert rerun.returncode == 0, f"re-run failed:\n{out}\n{err}"
    assert "CALLED" not in out, f"the function ran again:\n{out}"
    [result_line] = [l for l in out.splitlines() if l.startswith("RESULT ")]
    assert json.loads(result_line.removeprefix("RESULT "))["id"] == charge_id

    assert [c["id"] for c in stack.charges(order)] == [charge_id]


def test_an_exception_before_anything_left_is_not_sent_and_the_next_call_executes(
    stack: Stack,
) -> None:
    """The first attempt's provider call is refused at connect (a closed port): nothing
    left, so the client records not_sent. charge_card has a reconciliation read, so
    the gateway keeps the intent unknown until the read checks that word (a worker may
    mislabel a timeout); the provider has nothing, and the next call executes at once
    (no settle-horizon wait): one charge.

    Can fail: a client that recorded `unknown` would leave the intent unknown without
    `not_sent_reported` (the next call answers OutcomeUnknown until the settle
    horizon); one that recorded `failed` would replay the failure instead of executing.
    """
    order = new_order("notsent")
    provider = {"url": f"http://127.0.0.1:{closed_port()}"}
    keys: list[str] = []
    with oncegate.Client(stack.url, token=AGENT_TOKEN) as gate:

        @gate.protect("charge_card")
        def charge_card(
            order_id: str, amount: str, memo: str, *, idempotency_key: str
        ) -> dict[str, Any]:
            keys.append(idempotency_key)
            return create_charge(
                provider["url"],
                order_id=order_id,
                amount=amount,
                memo=memo,
                idempotency_key=idempotency_key,
            )

        with pytest.raises(httpx.ConnectError):
            charge_card(order, "9.99", memo="first")
        key = stack.intent_key({"order_id": order, "amount": "9.99"})
        record = stack.intent(key)
        assert record["state"] == "unknown" and record["not_sent_reported"], record
        assert stack.charges(order) == []

        provider["url"] = stack.sandbox_url
        charge = charge_card(order, "9.99", memo="second")

    assert len(keys) == 2 and keys[0] == keys[1], "the re-execution sends the same key"
    assert [c["id"] for c in stack.charges(order)] == [charge["id"]]
    record = stack.intent(key)
    assert record["state"] == "applied"
    assert record["effect_ref"] == charge["id"]
