"""Which exceptions prove that nothing reached the provider.

When a protected function raises, the client records ``unknown`` (the effect may have
happened: oncegate reconciles with the provider before anything runs again), EXCEPT for
exceptions that can only happen before a byte of the request left: then it records
``not_sent`` and the next claim executes again at once. Calling an exception "not sent"
that was sent can cause a second effect, so the list is short and strict:

- ``httpx.ConnectError`` (refused, DNS failure, TLS handshake failure), ``httpx.ConnectTimeout``,
  ``httpx.PoolTimeout`` (no connection was ever handed out);
- ``ConnectionRefusedError``, ``socket.gaierror`` (DNS), ``ssl.SSLCertVerificationError``;
- ``urllib.error.URLError`` whose ``reason`` is one of those;
- a known SDK's own check that refuses to build a request at all, raised before any
  connection is opened (looked up only when your code imported the SDK):
  ``stripe.AuthenticationError`` "No API key provided" with no HTTP status (stripe
  raises it in the request builder, before the HTTP client is called, when no API key
  is set), and ``openai.OpenAIError`` itself (not a subclass such as ``APIError``)
  "Missing credentials" (raised by ``openai.OpenAI()`` when no key is configured, as
  the client is constructed);
- when the library is imported by your code (never a dependency of this one):
  ``requests.exceptions.ConnectTimeout``, a ``requests.exceptions.ConnectionError`` whose
  cause is a urllib3 connect failure (``NewConnectionError``, ``NameResolutionError``,
  ``ConnectTimeoutError``), those urllib3 errors themselves, and
  ``aiohttp.ClientConnectorError`` / ``aiohttp.ConnectionTimeoutError``.

An exception whose explicit cause (``raise X from e``) is on the list counts too, so an
SDK that wraps a connect failure in its own error is read correctly. Implicit chaining
("during handling of ... another exception occurred") does not count.

NOT on the list, on purpose: read timeouts, ``ConnectionResetError``, broken pipes,
``requests.exceptions.ConnectionError`` for anything but a connect failure, any 5xx: the
request may have been processed. And note what the classification cannot see: a
function that makes one effecting call and then fails to CONNECT for a second one must
catch that second error itself (or be decorated with ``not_sent=oncegate.not_sent.never``),
and an HTTP library configured to retry POSTs after read errors may hide an attempt
that was sent behind a final connect failure.

Extend the list for your own provider SDK::

    oncegate.not_sent.register(MySdkConnectError)
    oncegate.not_sent.register_predicate(lambda e: isinstance(e, MySdkError) and e.code == "connect")
"""

from __future__ import annotations

import socket
import ssl
import sys
import threading
import urllib.error
from collections.abc import Callable

import httpx

__all__ = ["register", "register_predicate", "registered", "is_not_sent", "never"]

Predicate = Callable[[BaseException], bool]

_lock = threading.Lock()
_types: tuple[type[BaseException], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    ConnectionRefusedError,
    socket.gaierror,
    ssl.SSLCertVerificationError,
)
_predicates: tuple[Predicate, ...] = ()


def register(*types: type[BaseException]) -> None:
    """Adds exception types (and their subclasses) that prove nothing was sent."""
    global _types
    for t in types:
        if not (isinstance(t, type) and issubclass(t, BaseException)):
            raise TypeError(f"not_sent.register takes exception classes, not {t!r}")
    with _lock:
        _types = _types + tuple(t for t in types if t not in _types)


def register_predicate(predicate: Predicate) -> None:
    """Adds a test for exceptions a type alone cannot classify (an SDK error with a code)."""
    global _predicates
    with _lock:
        _predicates = _predicates + (predicate,)


def registered() -> tuple[type[BaseException], ...]:
    """The registered exception types (the built-in ones first)."""
    return _types


def never(exc: BaseException) -> bool:
    """A ``not_sent=`` rule that records every exception as ``unknown``."""
    return False


def is_not_sent(exc: BaseException) -> bool:
    """True when ``exc`` itself proves nothing was sent.

    The ``__cause__`` chain is deliberately not followed: SDKs retry by default (the
    OpenAI and Anthropic SDKs, several email SDKs), so an SDK error caused by a refused
    connection may come from the third try of a request whose first try reached the
    provider and timed out. Register an SDK's own connect error (``register``) or a
    ``register_predicate`` that knows how that SDK retries.
    """
    return _is_not_sent_here(exc)


def _is_not_sent_here(exc: BaseException) -> bool:
    if isinstance(exc, _types):
        return True
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
        return isinstance(exc.reason, (ConnectionRefusedError, socket.gaierror, ssl.SSLCertVerificationError))
    if _third_party(exc) or _sdk_configuration(exc):
        return True
    return any(p(exc) for p in _predicates)


def _sdk_configuration(exc: BaseException) -> bool:
    """A known SDK's local refusal to build a request (no credentials configured).

    Each is matched on the exact type and message the SDK raises before it sends, and
    only while the SDK is imported: ``stripe.AuthenticationError`` is also what a 401
    from Stripe raises, which is why the HTTP status must be absent; and every other
    openai error derives from ``OpenAIError``, which is why the type must be exact.
    """
    stripe = sys.modules.get("stripe")
    auth_error = getattr(stripe, "AuthenticationError", None) if stripe is not None else None
    if (
        isinstance(auth_error, type)
        and isinstance(exc, auth_error)
        and getattr(exc, "http_status", None) is None
        and getattr(exc, "http_body", None) is None
        and str(exc).startswith("No API key provided")
    ):
        return True
    openai = sys.modules.get("openai")
    base_error = getattr(openai, "OpenAIError", None) if openai is not None else None
    return (
        isinstance(base_error, type)
        and type(exc) is base_error
        and str(exc).startswith(("Missing credentials.", "The api_key client option must be set"))
    )


def _third_party(exc: BaseException) -> bool:
    """requests / urllib3 / aiohttp errors, looked up only if the program imported them.

    Reading ``sys.modules`` keeps them optional: an exception of a library nobody
    imported cannot be in flight.
    """
    urllib3_exc = sys.modules.get("urllib3.exceptions")
    urllib3_connect: tuple[type[BaseException], ...] = ()
    if urllib3_exc is not None:
        urllib3_connect = tuple(
            t
            for t in (getattr(urllib3_exc, "ConnectTimeoutError", None), getattr(urllib3_exc, "NewConnectionError", None))
            if isinstance(t, type)
        )
        if urllib3_connect and isinstance(exc, urllib3_connect):
            return True
        max_retry = getattr(urllib3_exc, "MaxRetryError", None)
        if isinstance(max_retry, type) and isinstance(exc, max_retry) and urllib3_connect:
            return isinstance(getattr(exc, "reason", None), urllib3_connect)

    requests_exc = sys.modules.get("requests.exceptions")
    if requests_exc is not None:
        connect_timeout = getattr(requests_exc, "ConnectTimeout", None)
        if isinstance(connect_timeout, type) and isinstance(exc, connect_timeout):
            return True
        connection_error = getattr(requests_exc, "ConnectionError", None)
        ssl_error = getattr(requests_exc, "SSLError", None)
        if (
            isinstance(connection_error, type)
            and isinstance(exc, connection_error)
            and not (isinstance(ssl_error, type) and isinstance(exc, ssl_error))
            and urllib3_connect
        ):
            # requests raises ConnectionError(MaxRetryError(reason=...)) for every
            # network failure; only a connect-phase reason proves nothing was sent.
            inner = exc.args[0] if exc.args else None
            reason = getattr(inner, "reason", inner)
            return isinstance(reason, urllib3_connect)

    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is not None:
        connect_types = tuple(
            t
            for t in (getattr(aiohttp, "ClientConnectorError", None), getattr(aiohttp, "ConnectionTimeoutError", None))
            if isinstance(t, type)
        )
        if connect_types and isinstance(exc, connect_types):
            return True
    return False
