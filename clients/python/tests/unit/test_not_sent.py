"""Which failures may be recorded as ``not_sent``: real exceptions from real sockets.

Each exception here is produced by actually trying to talk to a port on this machine
(closed, or open and silent, or open and hanging up), not constructed by hand, because
the classification is only worth what the libraries really raise. A misclassification
in the unsafe direction (a sent request called not_sent) is a second effect.
"""

from __future__ import annotations

import socket
import struct
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import httpx
import pytest
import requests

import oncegate
from oncegate import not_sent


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (kernel backlog) and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield int(s.getsockname()[1])
    s.close()


def read_request(conn: socket.socket) -> None:
    """Reads one whole HTTP request (headers and Content-Length body).

    Closing with unread bytes in the receive buffer makes the kernel answer with a
    reset instead of a clean end of stream, which a client reports differently; reading
    everything first makes the hang-up the same on every run.
    """
    conn.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk


def hanging_up(reset: bool) -> Iterator[int]:
    """A port that reads each request whole, then closes without answering: the request
    was sent. With ``reset`` it closes with SO_LINGER 0, so the client sees a reset."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    stop = threading.Event()

    def serve() -> None:
        s.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = s.accept()
            except OSError:
                continue
            read_request(conn)
            if reset:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield int(s.getsockname()[1])
    stop.set()
    t.join()
    s.close()


@pytest.fixture
def hangup_port() -> Iterator[int]:
    """Reads the request, then ends the stream cleanly."""
    yield from hanging_up(reset=False)


@pytest.fixture
def reset_port() -> Iterator[int]:
    """Reads the request, then resets the connection."""
    yield from hanging_up(reset=True)


def raised(fn: object) -> BaseException:
    assert callable(fn)
    with pytest.raises(BaseException) as info:
        fn()
    return info.value


def test_httpx_connection_refused_is_not_sent() -> None:
    exc = raised(lambda: httpx.post(f"http://127.0.0.1:{closed_port()}/v1/charges", json={}))
    assert isinstance(exc, httpx.ConnectError)
    assert not_sent.is_not_sent(exc)


def test_httpx_dns_failure_is_not_sent() -> None:
    exc = raised(lambda: httpx.post("http://no-such-host.invalid/v1/charges", json={}, timeout=5))
    assert isinstance(exc, httpx.ConnectError)
    assert not_sent.is_not_sent(exc)


def test_httpx_read_timeout_may_have_been_sent(silent_port: int) -> None:
    exc = raised(
        lambda: httpx.post(f"http://127.0.0.1:{silent_port}/v1/charges", json={}, timeout=httpx.Timeout(0.3))
    )
    assert isinstance(exc, httpx.ReadTimeout)
    assert not not_sent.is_not_sent(exc)


def test_httpx_hang_up_after_send_may_have_been_sent(hangup_port: int) -> None:
    exc = raised(lambda: httpx.post(f"http://127.0.0.1:{hangup_port}/v1/charges", json={}, timeout=5))
    # A clean end of stream; a reset (ReadError) would be just as sent, and just as unknown.
    assert isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError))
    assert not not_sent.is_not_sent(exc)


def test_a_reset_after_send_may_have_been_sent(reset_port: int) -> None:
    exc = raised(lambda: httpx.post(f"http://127.0.0.1:{reset_port}/v1/charges", json={}, timeout=5))
    assert isinstance(exc, httpx.ReadError)
    assert not not_sent.is_not_sent(exc)
    raw = socket.create_connection(("127.0.0.1", reset_port), timeout=5)
    raw.sendall(b"POST /v1/charges HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    reset = raised(lambda: raw.recv(1))
    raw.close()
    assert isinstance(reset, ConnectionResetError)
    assert not not_sent.is_not_sent(reset)


def test_socket_refused_and_dns_are_not_sent() -> None:
    refused = raised(lambda: socket.create_connection(("127.0.0.1", closed_port()), timeout=2))
    assert isinstance(refused, ConnectionRefusedError)
    assert not_sent.is_not_sent(refused)
    dns = raised(lambda: socket.getaddrinfo("no-such-host.invalid", 80))
    assert isinstance(dns, socket.gaierror)
    assert not_sent.is_not_sent(dns)


def test_urllib_refused_is_not_sent_but_its_read_timeout_is_not(silent_port: int) -> None:
    refused = raised(lambda: urllib.request.urlopen(f"http://127.0.0.1:{closed_port()}/", data=b"{}", timeout=2))
    assert isinstance(refused, urllib.error.URLError)
    assert not_sent.is_not_sent(refused)
    timeout = raised(lambda: urllib.request.urlopen(f"http://127.0.0.1:{silent_port}/", data=b"{}", timeout=0.3))
    assert not not_sent.is_not_sent(timeout)


def test_requests_connect_failure_is_not_sent_but_a_hang_up_is_not(hangup_port: int) -> None:
    refused = raised(lambda: requests.post(f"http://127.0.0.1:{closed_port()}/v1/charges", json={}, timeout=2))
    assert isinstance(refused, requests.exceptions.ConnectionError)
    assert not_sent.is_not_sent(refused)
    # The same exception class, but the request went out: requests says ConnectionError
    # ("Connection aborted") for both, and only the cause tells them apart.
    aborted = raised(lambda: requests.post(f"http://127.0.0.1:{hangup_port}/v1/charges", json={}, timeout=2))
    assert isinstance(aborted, requests.exceptions.ConnectionError)
    assert not not_sent.is_not_sent(aborted)


def test_requests_read_timeout_may_have_been_sent(silent_port: int) -> None:
    exc = raised(lambda: requests.post(f"http://127.0.0.1:{silent_port}/v1/charges", json={}, timeout=(2, 0.3)))
    assert isinstance(exc, requests.exceptions.ReadTimeout)
    assert not not_sent.is_not_sent(exc)


def test_everything_else_is_unknown() -> None:
    for exc in (ConnectionResetError(), BrokenPipeError(), TimeoutError(), ValueError("x"), KeyboardInterrupt()):
        assert not not_sent.is_not_sent(exc), exc


def test_a_wrapped_connect_error_proves_nothing_without_a_rule_for_the_wrapper() -> None:
    # An SDK that retries by default raises its own error "from" the last try's refused
    # connection; its first try may have reached the provider and timed out. Neither the
    # explicit cause nor the implicit context is proof.
    refused = raised(lambda: httpx.post(f"http://127.0.0.1:{closed_port()}/", json={}))

    class SdkError(Exception):
        pass

    wrapped = SdkError("could not connect")
    wrapped.__cause__ = refused
    assert not not_sent.is_not_sent(wrapped)

    during = SdkError("failed while handling another error")
    during.__context__ = refused
    assert not not_sent.is_not_sent(during)


def test_register_extends_the_list_with_subclasses() -> None:
    class MyConnectError(Exception):
        pass

    class MySubError(MyConnectError):
        pass

    assert not not_sent.is_not_sent(MySubError())
    oncegate.not_sent.register(MyConnectError)
    assert MyConnectError in not_sent.registered()
    assert not_sent.is_not_sent(MySubError())
    with pytest.raises(TypeError):
        not_sent.register("ConnectError")  # type: ignore[arg-type]


def test_register_predicate() -> None:
    class CodedError(Exception):
        def __init__(self, code: str) -> None:
            super().__init__(code)
            self.code = code

    not_sent.register_predicate(lambda e: isinstance(e, CodedError) and e.code == "connect_failed")
    assert not_sent.is_not_sent(CodedError("connect_failed"))
    assert not not_sent.is_not_sent(CodedError("read_timeout"))


def test_never_rule() -> None:
    refused = raised(lambda: httpx.post(f"http://127.0.0.1:{closed_port()}/", json={}))
    assert not not_sent.never(refused)


# -- a known SDK's own refusal to build a request (issue 36) ---------------------------


@pytest.fixture
def answers_401() -> Iterator[int]:
    """A port that reads each request and answers 401 with a Stripe-shaped error body:
    the request was sent (and refused by the provider)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    stop = threading.Event()
    body = b'{"error": {"message": "Invalid API Key provided: sk_test_x", "type": "invalid_request_error"}}'

    def serve() -> None:
        s.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = s.accept()
            except OSError:
                continue
            read_request(conn)
            conn.sendall(
                b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield int(s.getsockname()[1])
    stop.set()
    t.join()
    s.close()


def test_stripe_without_an_api_key_is_not_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    # stripe raises this in its request builder, before its HTTP client is called.
    import stripe

    monkeypatch.setattr(stripe, "api_key", None)
    monkeypatch.setattr(stripe, "api_base", f"http://127.0.0.1:{closed_port()}")
    exc = raised(lambda: stripe.PaymentIntent.create(amount=1250, currency="usd", idempotency_key="k1"))
    assert isinstance(exc, stripe.AuthenticationError) and exc.http_status is None, repr(exc)
    assert not_sent.is_not_sent(exc)


def test_a_stripe_authentication_error_from_the_provider_was_sent(
    monkeypatch: pytest.MonkeyPatch, answers_401: int
) -> None:
    # The same class for a 401 the provider answered: the request reached it.
    import stripe

    monkeypatch.setattr(stripe, "api_base", f"http://127.0.0.1:{answers_401}")
    monkeypatch.setattr(stripe, "max_network_retries", 0)
    exc = raised(lambda: stripe.PaymentIntent.create(amount=1250, currency="usd", api_key="sk_test_x"))
    assert isinstance(exc, stripe.AuthenticationError) and exc.http_status == 401, repr(exc)
    assert not not_sent.is_not_sent(exc)


def test_openai_without_credentials_is_not_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    # openai.OpenAI() refuses to be built without credentials: nothing can have left.
    import openai

    for name in ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)
    exc = raised(lambda: openai.OpenAI())
    assert type(exc) is openai.OpenAIError, repr(exc)
    assert not_sent.is_not_sent(exc)


def test_an_openai_connection_error_is_unknown() -> None:
    # Even a refused connection: openai wraps it in its own error (and retries by
    # default), and the cause chain is not followed.
    import openai

    client = openai.OpenAI(api_key="sk-test", base_url=f"http://127.0.0.1:{closed_port()}/v1", max_retries=0)
    exc = raised(lambda: client.models.list())
    assert isinstance(exc, openai.APIConnectionError), repr(exc)
    assert not not_sent.is_not_sent(exc)
