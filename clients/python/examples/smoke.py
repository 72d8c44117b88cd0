"""A manual smoke run of the Python client against a real gateway and provider.

Starts ``oncegate sandbox`` (the simulated payment provider) and ``oncegate serve`` on a
scratch registry with a claim-only ``charge_card`` (no upstream: the Python function
performs the charge itself, at the sandbox's HTTP API, with the claim's key), then
drives the client through its paths, counting charges in the sandbox's own ledger::

    python clients/python/examples/smoke.py --oncegate target/debug/oncegate

Prints one line per check; exit code 0 when every check holds. The integration tests
(clients/python/tests/integration) are the thorough version; this is the five-minute
look that a person can read.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

import oncegate

API_KEY = "sk_test_smoke"
TOKENS = {"ONCEGATE_TOKEN_AGENT": "tok-agent", "ONCEGATE_TOKEN_OPS": "tok-ops", "ONCEGATE_TOKEN_ALICE": "tok-alice"}

POLICIES = """
permit (principal, action, resource) when { principal.role == "agent" };

@id("refund-over-limit")
@oncegate("require_approval")
permit (principal, action == Action::"refund", resource)
when { principal.role == "agent" && context.amount > 10000 };
"""

REGISTRY = """
[gateway]
tenant = "smoke"

[store]
url = "sqlite://oncegate.db"

[[principals]]
name = "agent"
role = "agent"
token_env = "ONCEGATE_TOKEN_AGENT"

[[principals]]
name = "ops"
role = "admin"
token_env = "ONCEGATE_TOKEN_OPS"

[[principals]]
name = "alice"
role = "approver"
token_env = "ONCEGATE_TOKEN_ALICE"

[[capabilities]]
name = "charge_card"
category = "keyed"
lease = "2s"
settle_horizon = "1s"
on_unknown = "reconcile"
key = { business_ref = "order_id", significant = [{ arg = "amount", type = "money", default_currency = "USD" }] }

[capabilities.reconcile]
kind = "http"
url = "{env.SANDBOX_URL}/v1/charges?idempotency_key={key}"
headers = { Authorization = "Bearer {env.SANDBOX_API_KEY}" }
found = "/found"
effect_ref = "/charge/id"
result = "/charge"

# Keyed per run: the run id comes from the Oncegate-Run-Id header the client sends.
[[capabilities]]
name = "append_ledger"
category = "non_idempotent"
lease = "2s"
on_unknown = "escalate"
key = { business_ref = "entry_ref", scope = "run", significant = [{ arg = "account", type = "id" }] }

# Claim-only and held for a human above 100.00.
[[capabilities]]
name = "refund"
category = "keyed"
lease = "2s"
settle_horizon = "1s"
on_unknown = "reconcile"
policy = "policies.cedar"
key = { business_ref = "order_id", significant = [{ arg = "amount", type = "money", default_currency = "USD" }] }

[capabilities.reconcile]
kind = "http"
url = "{env.SANDBOX_URL}/v1/refunds?idempotency_key={key}"
headers = { Authorization = "Bearer {env.SANDBOX_API_KEY}" }
found = "/found"
effect_ref = "/refund/id"
result = "/refund"
"""


class CheckFailed(Exception):
    pass


def check(cond: bool, what: str, context: Any = None) -> None:
    if not cond:
        raise CheckFailed(f"FAIL {what}" + ("" if context is None else f"\n  got: {context!r}"))
    print(f"ok   {what}", flush=True)


@contextmanager
def process(cmd: list[str], env: dict[str, str], cwd: str) -> Iterator[str]:
    """Starts ``cmd``; yields the URL its first stdout line ends with; kills it after."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env={**os.environ, **env}, cwd=cwd, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split()[-1] if line.split() else ""
        if not url.startswith("http://"):
            raise CheckFailed(f"{cmd[:2]} did not print its URL: {line!r}")
        yield url
    finally:
        proc.kill()
        proc.wait()


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--oncegate", default=os.environ.get("ONCEGATE_BIN", "target/debug/oncegate"))
    args = p.parse_args()
    binary = os.path.abspath(args.oncegate)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "oncegate.toml"), "w") as f:
            f.write(REGISTRY)
        with open(os.path.join(tmp, "policies.cedar"), "w") as f:
            f.write(POLICIES)
        with process([binary, "sandbox", "--listen", "127.0.0.1:0", "--api-key", API_KEY], {}, tmp) as sandbox:
            env = {"SANDBOX_URL": sandbox, "SANDBOX_API_KEY": API_KEY, **TOKENS}
            serve = [binary, "serve", "--config", "oncegate.toml", "--listen", "127.0.0.1:0", "--init", "--sweep-every", "1s"]
            with process(serve, env, tmp) as gateway:
                try:
                    run_checks(gateway, sandbox)
                    asyncio.run(run_async_checks(gateway, sandbox))
                except CheckFailed as exc:
                    print(exc, file=sys.stderr)
                    return 1
    print("smoke: every check held")
    return 0


def charges(sandbox: str, order_id: str) -> list[Any]:
    r = httpx.get(f"{sandbox}/v1/effects", params={"kind": "charge", "order_id": order_id},
                  headers={"Authorization": f"Bearer {API_KEY}"})
    r.raise_for_status()
    effects: list[Any] = r.json()["effects"]
    return effects


def run_checks(gateway: str, sandbox: str) -> None:
    gate = oncegate.Client(gateway, "tok-agent")
    admin = oncegate.Client(gateway, "tok-ops")
    calls: list[str] = []
    provider: dict[str, Any] = {"url": sandbox, "fault": "", "timeout": 5.0}

    @gate.protect("charge_card")
    def charge_card(order_id: str, amount: Any, *, memo: str = "", idempotency_key: str) -> dict[str, Any]:
        calls.append(order_id)
        headers = {"Authorization": f"Bearer {API_KEY}", "Idempotency-Key": idempotency_key}
        if provider["fault"]:
            headers["Sandbox-Fault"] = str(provider["fault"])
            headers["Sandbox-Fault-Delay-Ms"] = "1500"
        r = httpx.post(
            f"{provider['url']}/v1/charges",
            headers=headers,
            json={"order_id": order_id, "amount_minor": 1250, "currency": "USD", "memo": memo},
            timeout=float(provider["timeout"]),
        )
        r.raise_for_status()
        body: dict[str, Any] = r.json()
        return body

    first = charge_card("S-1", "12.50", memo="first")
    check(isinstance(first, dict) and str(first.get("id", "")).startswith("ch_"), "execute: the function charged", first)
    again = charge_card("S-1", 12.5, memo="re-planned")
    check(again == first and calls == ["S-1"], "a drifted re-plan replays the stored result, function not called", (again, calls))
    check(len(charges(sandbox, "S-1")) == 1, "one charge in the provider's ledger")

    # Nothing left: connection refused at the provider is recorded not_sent, and the next call executes.
    provider["url"] = f"http://127.0.0.1:{closed_port()}"
    try:
        charge_card("S-2", "12.50")
        check(False, "a refused connection raises")
    except httpx.ConnectError:
        pass
    key = gate.derive_key("charge_card", {"order_id": "S-2", "amount": "12.50"}).key
    record = admin.get_intent(key)
    check(record.get("state") == "not_applied", "connection refused recorded not_sent (state not_applied)", record)
    provider["url"] = sandbox
    charge_card("S-2", "12.50")
    check(len(charges(sandbox, "S-2")) == 1, "the next call executed: one charge")

    # A timeout after the provider committed: unknown, then the gateway reconciles.
    provider["fault"], provider["timeout"] = "stall_after_commit", 0.5
    try:
        charge_card("S-3", "12.50")
        check(False, "a stalled provider times out")
    except httpx.ReadTimeout:
        pass
    provider["fault"], provider["timeout"] = "", 5.0
    answers: list[str] = []
    replay: Any = None
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            replay = charge_card("S-3", "12.50 USD", memo="again")
            break
        except (oncegate.OutcomeUnknown, oncegate.InFlight) as exc:
            answers.append(type(exc).__name__)
            time.sleep(0.5)
    ledger = charges(sandbox, "S-3")
    check(len(ledger) == 1, "timeout after commit: one charge", ledger)
    check(isinstance(replay, dict) and replay.get("id") == ledger[0].get("id"),
          f"re-plans answered {answers or 'nothing'} then the provider's record", replay)

    # Heartbeats: a function that runs past the 2 s lease keeps its claim.
    @gate.protect("charge_card")
    def slow_charge(order_id: str, amount: str, *, idempotency_key: str) -> dict[str, Any]:
        time.sleep(3.5)
        r = httpx.post(f"{sandbox}/v1/charges", headers={"Authorization": f"Bearer {API_KEY}", "Idempotency-Key": idempotency_key},
                       json={"order_id": order_id, "amount_minor": 1250, "currency": "USD"})
        r.raise_for_status()
        body: dict[str, Any] = r.json()
        return body

    slow = slow_charge("S-4", "12.50")
    check(str(slow.get("id", "")).startswith("ch_"), "a function outliving its lease completed (heartbeats held the claim)")

    # A stale claim: sleep past the lease without heartbeats, another worker takes over.
    stale = gate.claim("charge_card", {"order_id": "S-5", "amount": "12.50"})
    check(isinstance(stale, oncegate.Execute), "claim() answers Execute", stale)
    assert isinstance(stale, oncegate.Execute)
    time.sleep(3.5)
    second: oncegate.ClaimAnswer | None = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        second = gate.claim("charge_card", {"order_id": "S-5", "amount": "12.50"})
        if isinstance(second, oncegate.Execute):
            break
        time.sleep(0.5)
    check(isinstance(second, oncegate.Execute) and second.execution > stale.execution,
          "after the lease (and reconciliation: not found) a second claim executes", second)
    assert isinstance(second, oncegate.Execute)
    gate.complete(second, "applied", effect_ref="ch_second", result={"id": "ch_second"})
    try:
        gate.complete(stale, "applied", effect_ref="ch_stale")
        check(False, "the stale completion is refused")
    except oncegate.StaleClaim as exc:
        check(exc.intent_key == stale.intent_key, "the stale completion is refused (StaleClaim, OG-0024)")

    # The block form, on a replay.
    with gate.intent("charge_card", {"order_id": "S-1", "amount": "12.50"}) as claim:
        check(claim.replayed and not claim.execute and claim.result == first, "intent(): a replay skips the body's effect")

    # Run ids reach the gateway: a run-scoped intent is one per run.
    entry = {"entry_ref": "E-1", "account": "acct_1"}
    with oncegate.run("run-a", step="1"):
        in_a = gate.derive_key("append_ledger", entry).key
        claim_a = gate.claim("append_ledger", entry)
    with oncegate.run("run-b"):
        in_b = gate.derive_key("append_ledger", entry).key
    check(isinstance(claim_a, oncegate.Execute) and claim_a.intent_key == in_a != in_b,
          "oncegate.run(): the run id keys run-scoped intents (claim and derive agree)", (claim_a, in_a, in_b))
    assert isinstance(claim_a, oncegate.Execute)
    gate.complete(claim_a, "applied", effect_ref="le_1")
    with oncegate.run("run-a"):
        repeat = gate.claim("append_ledger", entry)
    check(isinstance(repeat, oncegate.Outcome) and repeat.status == "replayed", "the same run replays", repeat)

    # 16 threads, one order, one shared Client: one execution.
    import threading

    outcomes: list[Any] = []
    lock = threading.Lock()

    def worker() -> None:
        try:
            r: Any = charge_card("S-7", "12.50")
        except oncegate.OncegateError as exc:
            r = exc
        with lock:
            outcomes.append(r)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    executed = calls.count("S-7")
    kinds = sorted({type(o).__name__ for o in outcomes})
    check(executed == 1 and len(charges(sandbox, "S-7")) == 1,
          f"16 threads: 1 execution, 1 charge (answers: {kinds})", outcomes)
    # Held for a human: PendingApproval, an approver approves, the next call executes once.
    approver = oncegate.Client(gateway, "tok-alice")
    refunds: list[str] = []

    @gate.protect("refund")
    def refund(order_id: str, amount: str, *, idempotency_key: str) -> dict[str, Any]:
        refunds.append(order_id)
        r = httpx.post(f"{sandbox}/v1/refunds", headers={"Authorization": f"Bearer {API_KEY}", "Idempotency-Key": idempotency_key},
                       json={"order_id": order_id, "amount_minor": 15000, "currency": "USD"})
        r.raise_for_status()
        body: dict[str, Any] = r.json()
        return body

    try:
        refund("S-1", "150.00")
        check(False, "a refund over the limit is held")
    except oncegate.PendingApproval as held:
        check(bool(held.approval_id) and refunds == [], f"a refund over the limit is held ({held.approval_id}), nothing ran")
        decided = approver.approve(str(held.approval_id))
        check(decided.status == "approved", "the approver's decision answers approved (claim-only)", decided)
    done = refund("S-1", "150.00")
    again = refund("S-1", "150")
    check(refunds == ["S-1"] and again == done, "after approval the next call executes once; a repeat replays", (refunds, done, again))
    approver.close()
    gate.close()
    admin.close()


async def run_async_checks(gateway: str, sandbox: str) -> None:
    async with oncegate.AsyncClient(gateway, "tok-agent") as gate, httpx.AsyncClient() as http:
        calls: list[str] = []

        @gate.protect("charge_card")
        async def charge_card(order_id: str, amount: str, *, idempotency_key: str) -> dict[str, Any]:
            calls.append(order_id)
            await asyncio.sleep(0.2)
            r = await http.post(f"{sandbox}/v1/charges", headers={"Authorization": f"Bearer {API_KEY}", "Idempotency-Key": idempotency_key},
                                json={"order_id": order_id, "amount_minor": 1250, "currency": "USD"})
            r.raise_for_status()
            body: dict[str, Any] = r.json()
            return body

        results = await asyncio.gather(*(charge_card("S-6", "12.50") for _ in range(8)), return_exceptions=True)
        done = [r for r in results if isinstance(r, dict)]
        busy = [r for r in results if isinstance(r, oncegate.InFlight)]
        check(len(done) + len(busy) == 8 and len(calls) == 1, f"8 concurrent tasks: {len(done)} results, {len(busy)} InFlight, 1 execution", results)
        check(len(charges(sandbox, "S-6")) == 1, "async: one charge")
        replay = await charge_card("S-6", "12.5")
        check(replay == done[0] and calls == ["S-6"], "async: a repeat replays")


if __name__ == "__main__":
    sys.exit(main())
