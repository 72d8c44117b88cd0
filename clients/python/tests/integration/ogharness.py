"""Real processes for the Python client's integration tests.

Each test gets its own `oncegate sandbox` (the simulated payment provider whose ledger
counts effects) and its own `oncegate serve` on a scratch registry and store, both on
loopback with ports the OS picks. Nothing here imitates the gateway: the tests talk to
the binary named by ONCEGATE_BIN, the one the Rust test driver built.

The provider call the decorated functions make (`create_charge`) is the sandbox's own
HTTP API through httpx, standing in for a payment SDK. The sandbox runs with
`--ignore-idempotency-key charges`: every POST that reaches it is a new charge, so a
second execution of one intent shows up as a second effect in the ledger instead of
being hidden by the provider's own dedupe. That is what lets each test fail.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx

SANDBOX_API_KEY = "sk_test_python_client"
AGENT_TOKEN = "tok-planner"
APPROVER_TOKEN = "tok-alice"
ADMIN_TOKEN = "tok-ops"
TOKENS: Mapping[str, str] = {
    "ONCEGATE_TOKEN_PLANNER": AGENT_TOKEN,
    "ONCEGATE_TOKEN_ALICE": APPROVER_TOKEN,
    "ONCEGATE_TOKEN_OPS": ADMIN_TOKEN,
}

#: The lease of a claim in the test registry: short, so that stalls and crashes outlast
#: it within test time, and longer than the sandbox round trips the functions make.
LEASE_SECONDS = 3.0
#: How often the gateway's sweep reconciles unknown intents and expired leases.
SWEEP_EVERY = "1s"

# A claim-only `charge_card` (no [capabilities.upstream]: the caller executes it through
# claim/complete), keyed like examples/payments.toml on the order and the money amount
# ("12.50", 12.5 and "12.50 USD" are one intent; the memo is free text and never part of
# the key). The reconciliation read looks the charge up by order id: the sandbox ignores
# idempotency keys for charges (see the module docstring), so it has no index by key,
# and the order is the business boundary the key is derived from.
REGISTRY = """\
[gateway]
tenant = "acme"
time_zone = "UTC"
listen = "127.0.0.1:0"

[store]
url = "sqlite://oncegate.db"

[[principals]]
name = "planner"
role = "agent"
token_env = "ONCEGATE_TOKEN_PLANNER"

[[principals]]
name = "alice"
role = "approver"
token_env = "ONCEGATE_TOKEN_ALICE"

[[principals]]
name = "ops"
role = "admin"
token_env = "ONCEGATE_TOKEN_OPS"

[[capabilities]]
name = "charge_card"
description = "Charge the customer's card for an order. One order is charged at most once."
category = "keyed"
replay_window = "24h"
attempt_ceiling = 100
lease = "{lease}"
settle_horizon = "1s"
on_unknown = "reconcile"
policy = "policies.cedar"

[capabilities.key]
business_ref = "order_id"
scope = "global"
significant = [
  {{ arg = "amount", type = "money", currency_arg = "currency", default_currency = "USD" }},
]

[capabilities.reconcile]
kind = "http"
url = "{{env.SANDBOX_URL}}/v1/charges?order_id={{business_ref}}"
headers = {{ Authorization = "Bearer {{env.SANDBOX_API_KEY}}" }}
timeout = "2s"
found = "/found"
effect_ref = "/charge/id"
result = "/charge"
"""


#: Charges above 1,000.00 wait for an approver (the approval tests charge 2500.00);
#: every smaller one is allowed as before.
APPROVAL_OVER = "1000.00"
POLICIES = """\
permit (principal, action == Action::"charge_card", resource) when { principal.role == "agent" };

@id("charge-over-1000")
@oncegate("require_approval")
permit (principal, action == Action::"charge_card", resource)
when { principal.role == "agent" && context.amount > 100000 };
"""

class HarnessError(RuntimeError):
    """The harness could not start or drive a process: a broken setup, not a test result."""


def oncegate_bin() -> Path:
    """The gateway binary under test; loudly absent rather than silently skipped."""
    value = os.environ.get("ONCEGATE_BIN")
    if not value:
        raise HarnessError(
            "ONCEGATE_BIN is not set: point it at the oncegate binary to test "
            "(the Rust driver sets it to CARGO_BIN_EXE_oncegate)"
        )
    path = Path(value)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise HarnessError(f"ONCEGATE_BIN={value} is not an executable file")
    return path


@dataclass
class Proc:
    """A child process that printed the URL it listens on as its first stdout line."""

    name: str
    popen: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def stop(self) -> None:
        """Kills the process (tests leave nothing running) and reaps it."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=10)

    def log_tail(self, lines: int = 60) -> str:
        """The end of what it wrote, for a failing test's report."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as error:
            return f"<no log: {error}>"
        return "\n".join(text.splitlines()[-lines:])


def _pump(stream: IO[bytes], sink: IO[bytes]) -> None:
    """Copies the rest of a child's stdout to its log, so a full pipe never blocks it."""
    for chunk in iter(lambda: stream.readline(), b""):
        sink.write(chunk)
        sink.flush()


def spawn(
    name: str, argv: Sequence[str], env: Mapping[str, str], cwd: Path, log_dir: Path
) -> Proc:
    """Starts `argv` and waits (at most 30 s) for the listening line it prints first."""
    log_path = log_dir / f"{name}.log"
    log = log_path.open("ab")
    popen = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=log,
        env=dict(env),
        cwd=cwd,
    )
    stdout = popen.stdout
    assert stdout is not None
    first: list[bytes] = []
    reader = threading.Thread(target=lambda: first.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout=30)
    line = first[0].decode(errors="replace").strip() if first else ""
    url = line.split()[-1] if line else ""
    if not url.startswith("http://"):
        popen.kill()
        popen.wait(timeout=10)
        log.close()
        raise HarnessError(
            f"{name} did not print its URL (first line {line!r}); log:\n"
            + log_path.read_text(errors="replace")
        )
    log.write(f"[harness] {line}\n".encode())
    log.flush()
    threading.Thread(target=_pump, args=(stdout, log), daemon=True).start()
    return Proc(name=name, popen=popen, url=url.rstrip("/"), log_path=log_path)


T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 0.2) -> T:
    """Polls `probe` until it answers something other than None; fails saying what it waited for."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = probe()
        if last is not None:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(every)


def closed_port() -> int:
    """A loopback port nothing listens on: connecting is refused before a byte is sent."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def money_minor(amount: str | float | int) -> tuple[int, str]:
    """The charge amount in minor units and currency, from the spellings planners emit.

    The "payment SDK" side of the tests must accept what the model sent ("12.50", 12.5,
    "12.50 USD"), as a real integration would, to send the provider integer minor units.
    """
    text = str(amount).strip()
    currency = "USD"
    parts = text.split()
    if len(parts) == 2:
        text, currency = parts[0], parts[1].upper()
    minor = Decimal(text) * 100
    if minor != minor.to_integral_value():
        raise ValueError(f"{amount!r} is not a whole number of cents")
    return int(minor), currency


def create_charge(
    sandbox_url: str,
    *,
    order_id: str,
    amount: str | float | int,
    memo: str,
    idempotency_key: str,
    timeout: float = 5.0,
    fault: str | None = None,
    fault_delay_ms: int | None = None,
) -> dict[str, Any]:
    """POST {sandbox}/v1/charges as a payment SDK would: the key in `Idempotency-Key`.

    `fault` asks the sandbox to misbehave on this one request (`stall_after_commit`:
    commit the charge, then answer only after `fault_delay_ms`, past `timeout`).
    """
    url, headers, body = _charge_request(
        sandbox_url, order_id, amount, memo, idempotency_key, fault, fault_delay_ms
    )
    response = httpx.post(url, headers=headers, json=body, timeout=timeout)
    response.raise_for_status()
    charge: dict[str, Any] = response.json()
    return charge


async def acreate_charge(
    sandbox_url: str,
    *,
    order_id: str,
    amount: str | float | int,
    memo: str,
    idempotency_key: str,
    timeout: float = 5.0,
) -> dict[str, Any]:
    """`create_charge` for async code, over httpx.AsyncClient."""
    url, headers, body = _charge_request(sandbox_url, order_id, amount, memo, idempotency_key)
    async with httpx.AsyncClient(timeout=timeout) as http:
        response = await http.post(url, headers=headers, json=body)
    response.raise_for_status()
    charge: dict[str, Any] = response.json()
    return charge


def _charge_request(
    sandbox_url: str,
    order_id: str,
    amount: str | float | int,
    memo: str,
    idempotency_key: str,
    fault: str | None = None,
    fault_delay_ms: int | None = None,
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """URL, headers and body of a charge, shared by the sync and async SDK calls."""
    minor, currency = money_minor(amount)
    headers = {
        "Authorization": f"Bearer {SANDBOX_API_KEY}",
        "Idempotency-Key": idempotency_key,
    }
    if fault is not None:
        headers["Sandbox-Fault"] = fault
        if fault_delay_ms is not None:
            headers["Sandbox-Fault-Delay-Ms"] = str(fault_delay_ms)
    body = {"order_id": order_id, "amount_minor": minor, "currency": currency, "memo": memo}
    return f"{sandbox_url}/v1/charges", headers, body


def new_order(prefix: str) -> str:
    """An order id no other test uses, so ledgers and intents never mix across tests."""
    return f"{prefix}-{secrets.token_hex(4)}"


@dataclass
class Stack:
    """One sandbox and one gateway in front of it, on a scratch registry and store."""

    dir: Path
    sandbox: Proc
    gateway: Proc
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """The gateway's base URL, as a client is given it."""
        return self.gateway.url

    @property
    def sandbox_url(self) -> str:
        """The provider's base URL, for the functions the tests decorate."""
        return self.sandbox.url

    def _http(self) -> httpx.Client:
        return httpx.Client(timeout=20.0)

    def charges(self, order_id: str) -> list[dict[str, Any]]:
        """Every charge the sandbox committed for `order_id`: the effect count the tests assert."""
        with self._http() as http:
            r = http.get(
                f"{self.sandbox_url}/v1/effects",
                params={"kind": "charge", "order_id": order_id},
                headers={"Authorization": f"Bearer {SANDBOX_API_KEY}"},
            )
        r.raise_for_status()
        effects: list[dict[str, Any]] = r.json()["effects"]
        return effects

    def all_charges(self) -> list[dict[str, Any]]:
        """Every charge the sandbox committed in this test."""
        with self._http() as http:
            r = http.get(
                f"{self.sandbox_url}/v1/effects",
                params={"kind": "charge"},
                headers={"Authorization": f"Bearer {SANDBOX_API_KEY}"},
            )
        r.raise_for_status()
        effects: list[dict[str, Any]] = r.json()["effects"]
        return effects

    def intent(self, key: str) -> dict[str, Any]:
        """The gateway's stored intent record (GET /v1/intents/{key}, admin token)."""
        with self._http() as http:
            r = http.get(
                f"{self.url}/v1/intents/{key}",
                headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            )
        if r.status_code != 200:
            raise AssertionError(f"GET /v1/intents/{key}: {r.status_code} {r.text}")
        record: dict[str, Any] = r.json()
        return record

    def audit(self, key: str) -> list[dict[str, Any]]:
        """The audit events of intent `key`, oldest first (GET /v1/audit, admin token)."""
        with self._http() as http:
            r = http.get(f"{self.url}/v1/audit", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        if r.status_code != 200:
            raise AssertionError(f"GET /v1/audit: {r.status_code} {r.text}")
        events = [json.loads(line)["record"]["event"] for line in r.text.splitlines() if line.strip()]
        return [e for e in events if e.get("key") == key]

    def intent_key(self, arguments: Mapping[str, Any]) -> str:
        """The key the gateway derives for a charge_card call (POST /v1/keys/derive)."""
        with self._http() as http:
            r = http.post(
                f"{self.url}/v1/keys/derive",
                headers={"Authorization": f"Bearer {AGENT_TOKEN}"},
                json={"capability": "charge_card", "arguments": dict(arguments)},
            )
        if r.status_code != 200:
            raise AssertionError(f"POST /v1/keys/derive: {r.status_code} {r.text}")
        key: str = r.json()["key"]
        return key

    def wait_state(self, key: str, state: str, timeout: float) -> dict[str, Any]:
        """Waits until the stored intent reaches `state` (the sweep runs every second)."""

        def probe() -> dict[str, Any] | None:
            record = self.intent(key)
            return record if record.get("state") == state else None

        return wait_for(f"intent {key[:12]}… to be {state}", probe, timeout)

    def logs(self) -> str:
        """Both processes' log tails, for a failing test's report."""
        return (
            f"--- gateway log ({self.gateway.log_path}) ---\n{self.gateway.log_tail()}\n"
            f"--- sandbox log ({self.sandbox.log_path}) ---\n{self.sandbox.log_tail()}"
        )

    def stop(self) -> None:
        """Stops the gateway and then the sandbox."""
        self.gateway.stop()
        self.sandbox.stop()


def start_stack(dir: Path) -> Stack:
    """Starts a sandbox, then `oncegate init` and `oncegate serve` on a fresh registry in `dir`.

    `init` then `serve` (no `--init`) is how a deployment starts, so the tests run the
    gateway the way users do.
    """
    binary = str(oncegate_bin())
    dir.mkdir(parents=True, exist_ok=True)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("ONCEGATE_", "SANDBOX_"))}
    # Info level: the sandbox logs each committed effect and the gateway its decisions,
    # which is what a failing test's report shows. ONCEGATE_LOG overrides.
    base_env["ONCEGATE_LOG"] = os.environ.get("ONCEGATE_LOG", "info,rmcp=off")
    base_env["NO_COLOR"] = "1"
    sandbox = spawn(
        "sandbox",
        [
            binary,
            "sandbox",
            "--listen",
            "127.0.0.1:0",
            "--api-key",
            SANDBOX_API_KEY,
            "--ignore-idempotency-key",
            "charges",
        ],
        base_env,
        dir,
        dir,
    )
    try:
        config = dir / "oncegate.toml"
        config.write_text(REGISTRY.format(lease=f"{LEASE_SECONDS:g}s"))
        (dir / "policies.cedar").write_text(POLICIES)
        env = dict(base_env)
        env.update(TOKENS)
        env["SANDBOX_URL"] = sandbox.url
        env["SANDBOX_API_KEY"] = SANDBOX_API_KEY
        init = subprocess.run(
            [binary, "init", "--config", str(config)],
            env=env,
            cwd=dir,
            capture_output=True,
            timeout=60,
        )
        if init.returncode != 0:
            raise HarnessError(
                f"oncegate init failed ({init.returncode}):\n{init.stdout.decode()}{init.stderr.decode()}"
            )
        gateway = spawn(
            "gateway",
            [
                binary,
                "serve",
                "--config",
                str(config),
                "--listen",
                "127.0.0.1:0",
                "--sweep-every",
                SWEEP_EVERY,
            ],
            env,
            dir,
            dir,
        )
    except BaseException:
        sandbox.stop()
        raise
    return Stack(dir=dir, sandbox=sandbox, gateway=gateway, env=env)
