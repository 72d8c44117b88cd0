"""The Python side of `oncegate bench`: CTRLRun as a peer, and an MCP load driver.

`oncegate bench` runs this with a throwaway virtualenv's python, after
`pip install` of `REQUIREMENTS` (which `python3 peer.py requirements` prints, one per line).

Modes:

- `protect --concurrency C --seconds S --dir DIR` measures CTRLRun in-process: a no-op
  function under `@ctrlrun.protect`, with a policy file at DIR/ctrlrun.yaml and CTRLRun's
  default store beside it (SQLite, DIR/.ctrlrun/state.db, plus its JSONL receipts), called
  by C threads (the decorator is synchronous, so threads are its natural mode) in a closed
  loop, each call a distinct effect (a new order id).
- `gateway --upstream URL --listen HOST:PORT --dir DIR` measures nothing: it runs CTRLRun's
  MCP gateway (`ctrlrun gateway`, called in-process through `ctrlrun.gateway.serve`) in
  front of URL, with a policy at DIR/ctrlrun.yaml that allows `create_charge` under the
  effect key `charge:{order_id}`. Upstream bearer: $SANDBOX_API_KEY if set, else whatever
  the client sent (the gateway relays the client's headers). Prints one line
  `ready http://HOST:PORT/mcp` when it accepts connections and serves until SIGTERM.
- `mcp --url URL --tool TOOL --concurrency C --seconds S [--token T] [--args-template JSON]`
  measures any MCP Streamable HTTP server through the official SDK client: C sessions
  (asyncio, each its own ClientSession and HTTP client, initialized once with the
  2025-11-25 handshake, opened one at a time before the clock starts), each calling TOOL in
  a closed loop with "{n}" in the template replaced by a unique number. A JSON-RPC error or
  an isError result fails that call; a session whose connection dies counts one error and
  is replaced by a new one.

Each measuring mode warms up for 1 s, then measures for S s, and prints one JSON line:
`{"ops", "errors", "seconds", "p50_ms", "p99_ms", "p999_ms"}`. `ops` counts successful
calls started in the measured window, `errors` the failed ones (an exception, or an MCP
result with isError), the percentiles are over the successful calls' latencies, and
`seconds` runs from the window's start until the last caller finished. The first error's
text goes to stderr once. Exit status is non-zero only when setup fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # the venv's packages; imported for real inside the modes that use them
    from ctrlrun.gateway.outcome import Observed
    from ctrlrun.gateway.server import GatewayConfig
    from ctrlrun.gateway.transport import HTTPForwarder
    from ctrlrun.policy import Policy
    from mcp import ClientSession
    from mcp.types import CallToolResult

    Forwarded = tuple[Observed, bytes | None, int, Mapping[str, str]]

REQUIREMENTS = ["ctrlrun[gateway]==0.12.2", "mcp==2.3.0", "httpx==0.28.1"]

WARMUP_SECONDS = 1.0
#: How often `mcp` tries to open each session before setup fails.
SETUP_ATTEMPTS = 3
#: A call that has not answered by then fails (the SDK's own request timeout).
CALL_TIMEOUT_SECONDS = 30.0
#: Between a lost session and its replacement, so a refusing server is not spun against.
RECONNECT_PAUSE_SECONDS = 0.01
#: The gateway's alias: tools are actions named `mcp.<alias>.<tool>`.
GATEWAY_ALIAS = "sandbox"
GATEWAY_PATH = "/mcp"
PRINCIPAL = "bench-agent"

PROTECT_POLICY = """\
schema: ctrlrun.policy/v2
actions:
  bench.charge:
    effect: "charge:{order_id}"
    decision: allow
"""

GATEWAY_POLICY = f"""\
schema: ctrlrun.policy/v2
actions:
  mcp.{GATEWAY_ALIAS}.create_charge:
    effect: "charge:{{order_id}}"
    decision: allow
"""

DEFAULT_ARGS_TEMPLATE: dict[str, Any] = {
    "order_id": "bench-{n}",
    "amount_minor": 1250,
    "currency": "USD",
    "memo": "bench",
    "idempotency_key": "bench-{n}",
}


class SetupError(Exception):
    """The benchmark could not start: reported on stderr, exit status 1."""


# --- measuring ---------------------------------------------------------------------------


@dataclass
class Window:
    """A closed-loop run: calls started before `measure_from` are warm-up."""

    measure_from: float
    until: float

    @classmethod
    def starting_now(cls, seconds: float) -> Window:
        now = time.perf_counter()
        return cls(now + WARMUP_SECONDS, now + WARMUP_SECONDS + seconds)


@dataclass
class Tally:
    """One caller's results; merged at the end so callers share no lock on the hot path."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0


class FirstError:
    """Prints the first error's text to stderr, once, whichever caller hits it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._said = False

    def report(self, text: str) -> None:
        with self._lock:
            if self._said:
                return
            self._said = True
        print(f"peer.py: first error: {text}", file=sys.stderr, flush=True)


class Numbers:
    """Unique numbers for "{n}": a nanosecond clock base, so later runs never reuse one."""

    def __init__(self) -> None:
        self._counter = itertools.count(time.time_ns())

    def next(self) -> int:
        return next(self._counter)  # atomic under the GIL, from threads as well as tasks


def percentile(ordered: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending list, in milliseconds (0 for no samples)."""
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(fraction * len(ordered) - 1e-9))
    return round(ordered[min(rank, len(ordered)) - 1] * 1000.0, 3)


def summary(tallies: list[Tally], window: Window, finished: float) -> dict[str, object]:
    """The run's figures, and every latency in whole microseconds (the Rust bench puts
    them into the same kind of histogram as its own, so rounds merge exactly)."""
    latencies = sorted(itertools.chain.from_iterable(t.latencies for t in tallies))
    return {
        "ops": len(latencies),
        "errors": sum(t.errors for t in tallies),
        "seconds": round(finished - window.measure_from, 3),
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
        "p999_ms": percentile(latencies, 0.999),
        "latencies_us": [max(1, round(x * 1_000_000)) for x in latencies],
    }


def emit(result: Mapping[str, object]) -> None:
    print(json.dumps(result), flush=True)


def leaf(exc: BaseException) -> BaseException:
    """A task group's first leaf exception; any other exception itself."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    """An exception's type and text (a task group's: its first leaf's)."""
    exc = leaf(exc)
    root = exc  # httpx's ReadError says nothing; the error under it does
    while not str(root) and (under := root.__cause__ or root.__context__) is not None:
        root = under
    named = "" if root is exc else f"{type(exc).__name__}: "
    return f"{named}{type(root).__name__}: {root}"


# --- protect -----------------------------------------------------------------------------


def run_protect(concurrency: int, seconds: float, directory: Path) -> dict[str, object]:
    directory.mkdir(parents=True, exist_ok=True)
    policy = directory / "ctrlrun.yaml"
    policy.write_text(PROTECT_POLICY, encoding="utf-8")
    # CTRLRun's default wiring: the policy named by $CTRLRUN_CONFIG, the SQLite store beside it.
    os.environ["CTRLRUN_CONFIG"] = str(policy)
    os.environ.pop("CTRLRUN_STATE", None)

    import ctrlrun

    @ctrlrun.protect("bench.charge", effect="charge:{order_id}")
    def charge(order_id: str, amount_minor: int) -> str:
        return order_id  # the no-op effect

    numbers = Numbers()
    try:
        with ctrlrun.context(agent=PRINCIPAL):
            charge(order_id=f"setup-{numbers.next()}", amount_minor=1250)
    except Exception as exc:
        raise SetupError(f"a protected call failed before the run: {describe(exc)}") from exc

    first_error = FirstError()
    window = Window.starting_now(seconds)
    tallies = [Tally() for _ in range(concurrency)]

    def caller(tally: Tally) -> None:
        with ctrlrun.context(agent=PRINCIPAL):
            while (started := time.perf_counter()) < window.until:
                try:
                    charge(order_id=f"order-{numbers.next()}", amount_minor=1250)
                except Exception as exc:
                    first_error.report(describe(exc))
                    if started >= window.measure_from:
                        tally.errors += 1
                    continue
                if started >= window.measure_from:
                    tally.latencies.append(time.perf_counter() - started)

    threads = [threading.Thread(target=caller, args=(t,), daemon=True) for t in tallies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return summary(tallies, window, time.perf_counter())


# --- gateway -----------------------------------------------------------------------------


class BearerForwarder:
    """CTRLRun's own forwarder, with the upstream's bearer token set on every request.

    The gateway relays the client's headers and has no option for an upstream credential
    of its own, so this is the one thing added to it: a header, not a different transport.
    """

    def __init__(self, inner: HTTPForwarder, token: str) -> None:
        self._inner = inner
        self._authorization = f"Bearer {token}"

    def _headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        kept = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        kept["Authorization"] = self._authorization
        return kept

    def __call__(self, body: bytes, headers: Mapping[str, str], *, fresh: bool) -> Forwarded:
        return self._inner(body, self._headers(headers), fresh=fresh)

    def request(
        self, method: str, body: bytes, headers: Mapping[str, str], *, fresh: bool = False
    ) -> Forwarded:
        return self._inner.request(method, body, self._headers(headers), fresh=fresh)

    def close(self) -> None:
        self._inner.close()


def bindable_port(host: str, port: int) -> int:
    """`port` (0: a free one) if it can be bound, so the ready line never names another
    process's listener; the gateway binds it again a moment later."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise SetupError(f"cannot listen on {host}:{port}: {exc}") from exc
        bound: int = probe.getsockname()[1]
        return bound


def announce_when_listening(host: str, port: int, out: TextIO, stopped: threading.Event) -> None:
    """Print the ready line once the port accepts a connection."""
    while not stopped.is_set():
        try:
            with socket.create_connection((host, port), timeout=0.5):
                pass
        except OSError:
            time.sleep(0.02)
            continue
        url_host = f"[{host}]" if ":" in host else host
        print(f"ready http://{url_host}:{port}{GATEWAY_PATH}", file=out, flush=True)
        return


def run_gateway(upstream: str, listen: str, directory: Path) -> None:
    host, _, port_text = listen.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    port = bindable_port(host, int(port_text))
    directory.mkdir(parents=True, exist_ok=True)
    policy = directory / "ctrlrun.yaml"
    policy.write_text(GATEWAY_POLICY, encoding="utf-8")
    os.environ["CTRLRUN_CONFIG"] = str(policy)
    os.environ.pop("CTRLRUN_STATE", None)

    import ctrlrun.gateway
    import ctrlrun.gateway.server

    token = os.environ.get("SANDBOX_API_KEY")
    if token:
        forwarder = ctrlrun.gateway.server.httpx_forwarder

        def with_bearer(config: GatewayConfig, policy: Policy | None = None) -> BearerForwarder:
            return BearerForwarder(forwarder(config, policy), token)

        # `serve` looks the factory up in this module when it starts.
        ctrlrun.gateway.server.httpx_forwarder = with_bearer

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, terminate)
    stdout = sys.stdout
    stopped = threading.Event()
    threading.Thread(
        target=announce_when_listening, args=(host, port, stdout, stopped), daemon=True
    ).start()
    try:
        # CTRLRun prints its startup block on stdout; ours is only the ready line.
        with contextlib.redirect_stdout(sys.stderr):
            ctrlrun.gateway.serve(
                upstream=upstream,
                alias=GATEWAY_ALIAS,
                host=host,
                port=port,
                path=GATEWAY_PATH,
                principal=PRINCIPAL,
            )
    except Exception as exc:
        raise SetupError(f"the CTRLRun gateway did not start: {describe(exc)}") from exc
    finally:
        stopped.set()


# --- mcp ---------------------------------------------------------------------------------


def fill(template: Any, n: int) -> Any:
    """The template with every "{n}" inside a string replaced by `n`."""
    if isinstance(template, str):
        return template.replace("{n}", str(n))
    if isinstance(template, dict):
        return {key: fill(value, n) for key, value in template.items()}
    if isinstance(template, list):
        return [fill(value, n) for value in template]
    return template


def tool_error_text(result: CallToolResult) -> str:
    texts = [getattr(block, "text", "") for block in result.content]
    return "tool result isError: " + (" ".join(t for t in texts if t) or repr(result))


class Start:
    """Holds every caller until all C sessions are open, then starts the clock once."""

    def __init__(self, sessions: int, seconds: float) -> None:
        #: Sessions open one at a time: a herd of C connects would test the server's listen
        #: backlog (CTRLRun's gateway has the stdlib's 5), and setup is not what is measured.
        self.opening = asyncio.Lock()
        self._pending = sessions
        self._seconds = seconds
        self._go = asyncio.Event()
        self.window: Window | None = None
        self.failure: str | None = None

    def arrive(self) -> None:
        """One more session is open (each caller arrives once, whatever it retries)."""
        self._pending -= 1
        if self._pending == 0 and self.failure is None:
            self.window = Window.starting_now(self._seconds)
            self._go.set()

    async def wait(self) -> Window | None:
        """The window, once every session is open; None if setup failed."""
        await self._go.wait()
        return self.window

    def fail(self, text: str) -> None:
        if self.failure is None:
            self.failure = text
        self._go.set()


@dataclass
class McpTarget:
    url: str
    tool: str
    headers: dict[str, str]
    template: dict[str, Any]
    numbers: Numbers


@contextlib.asynccontextmanager
async def open_session(target: McpTarget) -> AsyncIterator[ClientSession]:
    """One initialized SDK ClientSession over its own HTTP client (and so its own pool)."""
    import httpx2  # the HTTP client the mcp SDK's transport is built on
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx2.Timeout(30.0, read=300.0)  # the SDK's own defaults
    async with (
        httpx2.AsyncClient(headers=target.headers, timeout=timeout) as http,
        streamable_http_client(target.url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


class SessionLost(Exception):
    """The session can take no more calls: its transport died under it."""


async def call(session: ClientSession, target: McpTarget) -> str | None:
    """One tools/call with fresh arguments: None, or the error's text.

    An MCP error response fails this call only; a closed connection (the SDK answers every
    later call on it with CONNECTION_CLOSED at once) or any other exception loses the session.
    """
    from mcp import MCPError
    from mcp.types import CONNECTION_CLOSED

    arguments = fill(target.template, target.numbers.next())
    try:
        result = await session.call_tool(target.tool, arguments, CALL_TIMEOUT_SECONDS)
    except MCPError as exc:
        if exc.error.code == CONNECTION_CLOSED:
            raise SessionLost(describe(exc)) from exc
        return describe(exc)
    return tool_error_text(result) if result.is_error else None


async def mcp_caller(target: McpTarget, start: Start, first_error: FirstError) -> Tally:
    """One session's closed loop. A session that breaks counts an error and is reopened."""
    tally = Tally()
    window: Window | None = None
    attempts = 0
    arrived = False
    while True:
        try:
            async with contextlib.AsyncExitStack() as stack:
                if window is None:
                    async with start.opening:
                        session = await stack.enter_async_context(open_session(target))
                        # The SDK lists the tools on a session's first call (to validate
                        # results), so that call is made here, before the clock.
                        if (failed := await call(session, target)) is not None:
                            raise SetupError(f"{target.tool} failed before the run: {failed}")
                    if not arrived:
                        arrived = True
                        start.arrive()
                    window = await start.wait()
                    if window is None:
                        return tally
                else:
                    session = await stack.enter_async_context(open_session(target))
                while (started := time.perf_counter()) < window.until:
                    measured = started >= window.measure_from
                    if (failed := await call(session, target)) is not None:
                        first_error.report(failed)
                        tally.errors += int(measured)
                    elif measured:
                        tally.latencies.append(time.perf_counter() - started)
            return tally
        except Exception as exc:  # the session itself broke (its transport's task group)
            if window is None:
                attempts += 1
                if isinstance(leaf(exc), SetupError) or attempts >= SETUP_ATTEMPTS:
                    start.fail(describe(exc))
                    return tally
                continue  # a connection reset while opening: try that session again
            now = time.perf_counter()
            if now >= window.until:
                return tally
            first_error.report(f"session lost: {describe(exc)}")
            tally.errors += int(now >= window.measure_from)
            await asyncio.sleep(RECONNECT_PAUSE_SECONDS)


async def run_mcp(
    url: str,
    tool: str,
    concurrency: int,
    seconds: float,
    token: str | None,
    template: dict[str, Any],
) -> dict[str, object]:
    # The SDK logs a traceback for every broken session and a warning for every closing
    # DELETE answered 202; errors are counted here and the first one is reported once.
    logging.getLogger("mcp").setLevel(logging.CRITICAL)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    target = McpTarget(url, tool, headers, template, Numbers())
    start = Start(concurrency, seconds)
    first_error = FirstError()
    tallies = await asyncio.gather(
        *(mcp_caller(target, start, first_error) for _ in range(concurrency))
    )
    if start.failure is not None or start.window is None:
        raise SetupError(f"could not open {concurrency} MCP sessions to {url}: {start.failure}")
    return summary(list(tallies), start.window, time.perf_counter())


# --- command line ------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="peer.py", description=__doc__.splitlines()[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    modes.add_parser("requirements", help="print the pip requirements, one per line")

    protect = modes.add_parser("protect", help="CTRLRun @protect in-process")
    protect.add_argument("--concurrency", type=int, required=True)
    protect.add_argument("--seconds", type=float, required=True)
    protect.add_argument("--dir", type=Path, required=True)

    gateway = modes.add_parser("gateway", help="run CTRLRun's MCP gateway until SIGTERM")
    gateway.add_argument("--upstream", required=True)
    gateway.add_argument("--listen", required=True, help="HOST:PORT (port 0: any free one)")
    gateway.add_argument("--dir", type=Path, required=True)

    mcp = modes.add_parser("mcp", help="drive an MCP server with the Python SDK client")
    mcp.add_argument("--url", required=True)
    mcp.add_argument("--tool", required=True)
    mcp.add_argument("--concurrency", type=int, required=True)
    mcp.add_argument("--seconds", type=float, required=True)
    mcp.add_argument("--token", default=None)
    mcp.add_argument("--args-template", default=None, help='JSON; "{n}" becomes a unique number')
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    options = parse(argv)
    try:
        if options.mode == "requirements":
            print("\n".join(REQUIREMENTS))
        elif options.mode == "protect":
            emit(run_protect(positive(options.concurrency), options.seconds, options.dir))
        elif options.mode == "gateway":
            run_gateway(options.upstream, options.listen, options.dir)
        else:
            template = (
                DEFAULT_ARGS_TEMPLATE
                if options.args_template is None
                else json.loads(options.args_template)
            )
            if not isinstance(template, dict):
                raise SetupError("--args-template must be a JSON object")
            emit(
                asyncio.run(
                    run_mcp(
                        options.url,
                        options.tool,
                        positive(options.concurrency),
                        options.seconds,
                        options.token,
                        template,
                    )
                )
            )
    except (SetupError, ValueError) as exc:  # ValueError: a bad --listen or JSON
        print(f"peer.py: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


def positive(concurrency: int) -> int:
    if concurrency < 1:
        raise SetupError("--concurrency must be at least 1")
    return concurrency


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
