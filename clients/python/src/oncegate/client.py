"""The synchronous client: the two-phase API, the ``protect`` decorator and ``intent`` blocks.

The order of things is the point of this module. A protected function runs only after
the gateway granted a claim; its outcome is recorded before the caller sees it; a
failure is recorded as ``unknown`` unless it proves nothing left (``oncegate.not_sent``);
and a replay returns the stored result without calling the function at all.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
import types
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import httpx

from . import _wire
from ._json import to_json
from ._protect import EffectRefRule, NotSentRule, Protector, Spec, add_note, error_text, failure_outcome, not_sent_predicate
from .errors import (
    CompletionNotRecorded,
    GatewayError,
    GatewayUnavailable,
    IntentNotRecorded,
    OncegateError,
    OutcomeError,
    Replayed,
    StaleClaim,
    error_for_outcome,
)
from .models import (
    ClaimAnswer,
    CompletionOutcome,
    Execute,
    KeyExplanation,
    Outcome,
    PassThrough,
    parse_claim,
    parse_execute,
    parse_key_explanation,
    parse_outcome,
)

__all__ = ["Client", "Intent"]

log = logging.getLogger("oncegate")

R = TypeVar("R")

DEFAULT_TIMEOUT = 30.0
"""Seconds per request: a claim may wait for the gateway to reconcile an earlier attempt."""

_RESULT_REFUSED = (400, 413, 422)
"""Statuses of a completion refused for its body (a result too large or not exact JSON)."""

MIN_BEAT = 0.1
"""The shortest heartbeat interval, so a lease that looks expired is not hammered."""


class Client:
    """A connection to one oncegate gateway, as one principal (the token's).

    ``Client(url, token)``; use it as a context manager (or call :meth:`close`) to close
    the HTTP connections it opened. ``http=`` lends it an ``httpx.Client`` you own (it
    is then not closed here); ``transport=`` is passed to the ``httpx.Client`` it makes.
    ``complete_retries`` is how many times a completion is retried when the gateway
    cannot be reached or answers 5xx.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        complete_retries: int = 4,
        headers: Mapping[str, str] | None = None,
        http: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"the gateway URL must start with http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.complete_retries = complete_retries
        self._wire = _wire.Wire(token, headers)
        self._owns_http = http is None
        self._http = http if http is not None else httpx.Client(timeout=timeout, transport=transport)

    # -- lifetime -----------------------------------------------------------------

    def close(self) -> None:
        """Closes the HTTP connections this client opened (not a lent ``http=`` client)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None
    ) -> None:
        self.close()

    # -- the two-phase API ----------------------------------------------------------

    def claim(
        self,
        capability: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        run_id: str | None = None,
        step_id: str | None = None,
    ) -> ClaimAnswer:
        """Asks to execute ``capability`` with ``arguments``: the decision, before any effect.

        Returns :class:`Execute` (run the effect with its ``idempotency_key``, then
        :meth:`complete`), :class:`PassThrough` (a read: just run it) or the
        :class:`Outcome` envelope (replayed, in_flight, unknown, ...: do not execute).
        Raises :class:`GatewayUnavailable` when the gateway cannot be reached (nothing
        was claimed for you) and :class:`GatewayError` when it refuses the request.
        """
        req = self._wire.claim(
            capability, arguments, idempotency_key=idempotency_key, run_id=run_id, step_id=step_id
        )
        response = self._send(req, "claim")
        return parse_claim(_wire.decode(response), response.status_code, response.headers.get("date"))

    def complete(
        self,
        claim: Execute | str,
        outcome: CompletionOutcome,
        *,
        fencing_token: str | None = None,
        effect_ref: str | None = None,
        result: Any = None,
        error: str | None = None,
        retries: int | None = None,
    ) -> Outcome:
        """Records what happened to a claimed execution, and returns what was recorded.

        ``claim`` is the :class:`Execute` (or its intent key, with ``fencing_token=``).
        ``outcome``: ``applied`` (with ``effect_ref`` and ``result``), ``failed`` (the
        provider said no), ``unknown`` (it may have happened) or ``not_sent`` (proof that
        nothing left). Retried with backoff when the gateway is unreachable or answers
        5xx: a repeat answers what was recorded. Raises :class:`StaleClaim` when the
        claim was lost (nothing recorded) and :class:`CompletionNotRecorded` when every
        try failed.
        """
        key, token = _key_and_token(claim, fencing_token)
        req = self._wire.complete(key, token, outcome, effect_ref=effect_ref, result=result, error=error)
        delays = _wire.retry_delays(self.complete_retries if retries is None else retries)
        last: GatewayUnavailable | None = None
        for attempt in range(len(delays) + 1):
            if attempt:
                time.sleep(delays[attempt - 1])
            try:
                response = self._send(req, f"record {outcome}", key)
                recorded = parse_outcome(_wire.decode(response, intent_key=key), response.status_code)
                if recorded.http_status == 503:
                    # An envelope refused for the store (OG-0007): nothing recorded yet.
                    raise GatewayUnavailable(recorded.message, intent_key=key, status_code=503, code=recorded.reason_code)
                return recorded
            except GatewayUnavailable as exc:
                last = exc
                log.warning("oncegate: recording %s for %s failed (try %d): %s", outcome, key, attempt + 1, exc)
        raise CompletionNotRecorded(
            f"could not record {outcome!r} for intent {key} after {len(delays) + 1} tries ({last}); "
            "its lease will expire and the gateway will reconcile the intent with the provider",
            intent_key=key,
            outcome=outcome,
        ) from last

    def heartbeat(
        self, claim: Execute | str, *, fencing_token: str | None = None, timeout: float | None = None
    ) -> Execute:
        """Extends the lease of a claim you hold; returns the claim with its new lease.

        Raises :class:`StaleClaim` when the claim is no longer yours.
        """
        key, token = _key_and_token(claim, fencing_token)
        response = self._send(self._wire.heartbeat(key, token, timeout), "heartbeat", key)
        return parse_execute(_wire.decode(response, intent_key=key), response.headers.get("date"))

    # -- the gateway executes ---------------------------------------------------------

    def call(
        self,
        capability: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        run_id: str | None = None,
        step_id: str | None = None,
    ) -> Outcome:
        """``POST /v1/calls``: the gateway decides and executes its own upstream.

        Returns every envelope (``.raise_for_status()`` raises for non-successes).
        """
        req = self._wire.call(capability, arguments, idempotency_key=idempotency_key, run_id=run_id, step_id=step_id)
        response = self._send(req, "call")
        return parse_outcome(_wire.decode(response), response.status_code)

    def derive_key(
        self,
        capability: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        step_id: str | None = None,
    ) -> KeyExplanation:
        """The intent key these arguments make, and which inputs entered it."""
        response = self._send(self._wire.derive_key(capability, arguments, run_id=run_id, step_id=step_id), "derive a key")
        return parse_key_explanation(_wire.decode(response))

    def get_intent(self, intent_key: str) -> dict[str, Any]:
        """The stored intent record (approver and admin tokens only)."""
        response = self._send(self._wire.get_intent(intent_key), "read an intent", intent_key)
        return _wire.decode(response, intent_key=intent_key)

    def get_approval(self, approval_id: str) -> dict[str, Any]:
        """What an approver weighs (approver and admin tokens only): every argument the
        held call sends, the digest the approval is bound to, the rendered request
        (secrets masked), money in its currency, why it is held, and a warning when the
        first attempt's outcome is unknown (``GET /v1/approvals/{id}``)."""
        response = self._send(self._wire.get_approval(approval_id), "read an approval")
        return _wire.decode(response)

    def approve(self, approval_id: str) -> Outcome:
        """Approves a held call (approver tokens); answers its outcome."""
        response = self._send(self._wire.decide(approval_id, "approve"), "approve")
        return parse_outcome(_wire.decode(response), response.status_code)

    def deny(self, approval_id: str) -> Outcome:
        """Denies a held call (approver tokens); answers its outcome."""
        response = self._send(self._wire.decide(approval_id, "deny"), "deny")
        return parse_outcome(_wire.decode(response), response.status_code)

    # -- the decorator ------------------------------------------------------------------

    def protect(
        self,
        capability: str,
        *,
        key_param: str = "idempotency_key",
        arguments: Callable[..., Mapping[str, Any]] | None = None,
        effect_ref: EffectRefRule = "/id",
        result: Callable[[Any], Any] | None = None,
        from_result: Callable[[Any], Any] | None = None,
        not_sent: NotSentRule = None,
        heartbeat: bool = True,
    ) -> Protector:
        """Makes a function that performs ``capability``'s effect run at most once per intent.

        Each call claims first (capability arguments: the function's bound arguments by
        name, without ``key_param``; or ``arguments(*args, **kwargs)``), then:

        - execute: calls the function with ``key_param=`` the claim's idempotency key
          (send it to the provider as its idempotency key), or with
          ``KeyContext(idempotency_key)`` as its first argument when its first parameter
          is annotated :class:`KeyContext`, heartbeating the lease in a
          thread, and records ``applied`` with the effect reference at ``effect_ref`` (a
          JSON pointer into the result, or a callable) and the return value as the result
          (through ``result=`` if given). An exception is recorded as ``unknown``, or as
          ``not_sent`` when ``not_sent`` (default: :mod:`oncegate.not_sent`) proves nothing
          left, then re-raised;
        - replayed: returns the stored result (through ``from_result=`` if given) without
          calling the function;
        - anything else raises its typed error (:class:`InFlight`, :class:`OutcomeUnknown`,
          :class:`PendingApproval`, :class:`Denied`, :class:`Refused`, :class:`Failed`,
          :class:`DryRun`).

        ``async def`` functions need :class:`AsyncClient`; this raises ``TypeError``.
        Typing (:class:`Protector`): with a :class:`KeyContext` first parameter the
        wrapper is ``Callable[P, R]``, ``P`` the parameters after it, so mypy checks the
        arguments and rejects ``idempotency_key=``; with the keyword form it is
        ``Callable[..., R]`` (typing cannot say "``P`` minus one keyword"), and the
        parameters are bound, and checked, before the claim.
        """

        def decorate(fn: Callable[..., R]) -> Callable[..., R]:
            if inspect.iscoroutinefunction(fn):
                raise TypeError(
                    f"{fn.__qualname__} is async: decorate it with oncegate.AsyncClient(...).protect, "
                    "whose heartbeats and completion are awaited on your event loop"
                )
            spec = Spec.build(
                capability,
                fn,
                key_param=key_param,
                arguments=arguments,
                effect_ref=effect_ref,
                result=result,
                from_result=from_result,
                not_sent=not_sent,
                heartbeat=heartbeat,
            )

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> R:
                return cast(R, self._run_protected(spec, args, kwargs))

            wrapper.__oncegate_capability__ = capability  # type: ignore[attr-defined]
            # What the framework adapters (oncegate.langgraph, oncegate.openai_agents) read.
            wrapper.__oncegate_protected__ = (self, spec)  # type: ignore[attr-defined]
            return wrapper

        # The overloads of Protector say what decorate does to each form's type.
        return cast(Protector, decorate)

    def _run_protected(
        self, spec: Spec, args: tuple[Any, ...], kwargs: dict[str, Any], first: ClaimAnswer | None = None
    ) -> Any:
        """One protected call; ``first`` is a claim answer already asked for these
        arguments (the framework adapters claim before the framework decides to run the
        tool, so that a held call can pause the run the framework's way)."""
        claim_args = spec.claim_arguments(args, kwargs)
        spec.check_bindable(args, kwargs)
        answer = first if first is not None else self.claim(spec.capability, claim_args)
        if isinstance(answer, Outcome) and answer.status == "approved":
            # An approval decided for a claim-only capability: the next claim executes.
            answer = self.claim(spec.capability, claim_args)
            if isinstance(answer, Outcome) and answer.status == "approved":
                # Never a success: nothing was executed and the function must not run.
                raise OutcomeError(answer)
        if isinstance(answer, PassThrough):
            return spec.invoke(args, kwargs, None)
        if isinstance(answer, Outcome):
            err = error_for_outcome(answer)
            if err is not None:
                raise err
            return spec.replay_value(answer)

        if answer.too_late_to_send():
            # This process paused between the claim and the call for (nearly) the whole
            # lease: the claim may be another attempt's already, and a request sent now
            # would race it where no fence can stop it (the gateway never sees it).
            # Send nothing, and say so.
            try:
                self.complete(answer, "not_sent", error="the lease ran out before the effect was sent")
            except OncegateError:
                pass
            raise StaleClaim(
                f"the claim on {answer.intent_key} expired before {spec.function.__qualname__} was called; "
                "nothing was sent: call again to see where the intent stands",
                intent_key=answer.intent_key,
            )
        beat = _Heartbeat(self, answer) if spec.heartbeat else None
        if beat is not None:
            beat.start()
        try:
            value = spec.invoke(args, kwargs, answer.idempotency_key)
        except BaseException as exc:
            claim = beat.stop() if beat is not None else answer
            outcome = spec.failure_outcome(exc)
            try:
                self.complete(claim, outcome, error=error_text(exc))
            except OncegateError as record_exc:
                log.error("oncegate: %s after %s on %s: %s", outcome, type(exc).__name__, claim.intent_key, record_exc)
                add_note(exc, f"oncegate: recording {outcome!r} failed: {record_exc}")
            raise
        claim = beat.stop() if beat is not None else answer
        ref, stored, problem = spec.applied_record(value)
        try:
            try:
                self.complete(claim, "applied", effect_ref=ref, result=stored)
            except GatewayError as exc:
                if isinstance(exc, StaleClaim) or stored is None or exc.status_code not in _RESULT_REFUSED:
                    raise
                # The gateway refused the result itself (too large, a number it cannot
                # hold exactly): the effect happened all the same, so record it without.
                self.complete(claim, "applied", effect_ref=ref)
                problem = TypeError(f"the gateway refused to store the result: {exc}")
        except (StaleClaim, CompletionNotRecorded) as exc:
            exc.value = value
            if beat is not None and beat.lost is not None and isinstance(exc, StaleClaim):
                exc.message = f"the claim on {claim.intent_key} was lost while the function ran: {beat.lost.message}"
            raise
        if problem is not None:
            raise TypeError(
                f"{spec.function.__qualname__} returned a value that could not be stored ({problem}); "
                "the effect was recorded as applied without a result: pass result= to convert or trim it"
            ) from problem
        return value

    # -- the block form -----------------------------------------------------------------

    @contextmanager
    def intent(
        self,
        capability: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        run_id: str | None = None,
        step_id: str | None = None,
        not_sent: NotSentRule = None,
        heartbeat: bool = True,
    ) -> Iterator[Intent]:
        """A claim for code that is not one function::

            with gate.intent("refund", {"order_id": "o1", "amount": "30.00"}) as claim:
                if claim.execute:
                    r = provider.refund(..., idempotency_key=claim.idempotency_key)
                    claim.applied(effect_ref=r["id"], result=r)
            print(claim.result)

        On a replay the block still runs but ``claim.execute`` is False, ``claim.result``
        holds the stored result, and touching ``claim.idempotency_key`` or recording
        raises :class:`Replayed`: an effect cannot be sent by accident with the key.
        Other non-executing outcomes raise their typed error before the block runs.
        An exception in the block is recorded (``unknown``, or ``not_sent`` on proof)
        and re-raised. Leaving the block without recording records ``unknown`` (the
        effect may have run) and raises :class:`IntentNotRecorded`.
        """
        is_not_sent = not_sent_predicate(not_sent)
        answer = self.claim(capability, arguments, idempotency_key=idempotency_key, run_id=run_id, step_id=step_id)
        if isinstance(answer, Outcome) and answer.status == "approved":
            answer = self.claim(capability, arguments, idempotency_key=idempotency_key, run_id=run_id, step_id=step_id)
        if isinstance(answer, Outcome) and answer.status == "approved":
            raise OutcomeError(answer)
        if isinstance(answer, Outcome):
            err = error_for_outcome(answer)
            if err is not None:
                raise err
        if isinstance(answer, Execute) and answer.too_late_to_send():
            # As in protect(): the lease (nearly) ran out before the block could start.
            try:
                self.complete(answer, "not_sent", error="the lease ran out before the effect was sent")
            except OncegateError:
                pass
            raise StaleClaim(
                f"the claim on {answer.intent_key} expired before the intent() block started; nothing was sent",
                intent_key=answer.intent_key,
            )
        handle = Intent(self, answer)
        beat = _Heartbeat(self, answer) if isinstance(answer, Execute) and heartbeat else None
        handle._beat = beat
        if beat is not None:
            beat.start()
        try:
            yield handle
        except BaseException as exc:
            handle._stop_beat()
            if isinstance(answer, Execute) and not handle._record_tried:
                outcome = failure_outcome(is_not_sent, exc)
                try:
                    handle._record(outcome, error=error_text(exc))
                except OncegateError as record_exc:
                    log.error("oncegate: %s after %s on %s: %s", outcome, type(exc).__name__, answer.intent_key, record_exc)
                    add_note(exc, f"oncegate: recording {outcome!r} failed: {record_exc}")
            raise
        handle._stop_beat()
        if isinstance(answer, Execute) and not handle._record_tried:
            handle._record("unknown", error="the intent() block ended without recording an outcome")
            raise IntentNotRecorded(
                f"the intent() block for {capability} held the execution of {answer.intent_key} and ended "
                "without claim.applied()/failed()/not_sent(); recorded 'unknown' (the gateway reconciles)",
                intent_key=answer.intent_key,
            )

    # -- plumbing -------------------------------------------------------------------------

    def _send(self, req: _wire.Request, what: str, intent_key: str | None = None) -> httpx.Response:
        try:
            return self._http.request(
                req.method,
                self.url + req.path,
                content=None if req.body is None else _wire.encode(req.body),
                headers={**req.headers, **({"Content-Type": "application/json"} if req.body is not None else {})},
                timeout=req.timeout if req.timeout is not None else self.timeout,
            )
        except httpx.TransportError as exc:
            raise _wire.transport_error(exc, what, intent_key) from exc


def _key_and_token(claim: Execute | str, fencing_token: str | None) -> tuple[str, str]:
    if isinstance(claim, Execute):
        return claim.intent_key, fencing_token or claim.fencing_token
    if fencing_token is None:
        raise TypeError("pass the Execute claim, or its intent key with fencing_token=")
    return claim, fencing_token


class Intent:
    """The handle an ``intent()`` block gets: the claim, or the replay, and the record.

    ``execute`` is True when this block holds the execution (and for a read, which has
    no intent: ``pass_through`` is then True and there is nothing to record).
    ``replayed`` is True when the intent was applied before: ``result`` and
    ``effect_ref`` are the stored ones. After ``applied()`` they are what was recorded.
    """

    def __init__(self, client: Client, answer: ClaimAnswer) -> None:
        self._client = client
        self._answer = answer
        self._beat: _Heartbeat | None = None
        self._record_tried = False
        self.recorded: Outcome | None = None
        self.claim: Execute | None = answer if isinstance(answer, Execute) else None
        self.replay: Outcome | None = answer if isinstance(answer, Outcome) else None
        self.pass_through = isinstance(answer, PassThrough)
        self.execute = not isinstance(answer, Outcome)
        self.replayed = self.replay is not None

    @property
    def intent_key(self) -> str | None:
        if self.claim is not None:
            return self.claim.intent_key
        return self.replay.intent_key if self.replay is not None else None

    @property
    def idempotency_key(self) -> str | None:
        """The key to send to the provider. Raises :class:`Replayed` on a replay."""
        if self.replay is not None:
            raise Replayed(self.replay)
        if self.claim is None:
            return None
        current = self._beat.claim if self._beat is not None else self.claim
        if current.lease_left() <= 0:
            # The block paused past its lease before sending: the claim may be another
            # attempt's now, and the gateway would never see a request sent with it.
            raise StaleClaim(
                f"the claim on {current.intent_key} expired before its key was read; do not send the effect",
                intent_key=current.intent_key,
            )
        return self.claim.idempotency_key

    @property
    def result(self) -> Any:
        if self.recorded is not None:
            return self.recorded.result
        return self.replay.result if self.replay is not None else None

    @property
    def effect_ref(self) -> str | None:
        if self.recorded is not None:
            return self.recorded.effect_ref
        return self.replay.effect_ref if self.replay is not None else None

    def applied(self, effect_ref: str | None = None, result: Any = None) -> Outcome:
        """Records that the effect took place (with the provider's reference)."""
        return self._record("applied", effect_ref=effect_ref, result=result)

    def failed(self, error: str | None = None, result: Any = None) -> Outcome:
        """Records that the provider said no, definitely: repeats replay this failure."""
        return self._record("failed", error=error, result=result)

    def unknown(self, error: str | None = None) -> Outcome:
        """Records that the effect may or may not have happened: the gateway reconciles."""
        return self._record("unknown", error=error)

    def not_sent(self, error: str | None = None) -> Outcome:
        """Records that nothing reached the provider: the next claim executes again."""
        return self._record("not_sent", error=error)

    def _stop_beat(self) -> None:
        if self._beat is not None:
            latest = self._beat.stop()
            self._beat = None
            self.claim = latest

    def _record(
        self, outcome: CompletionOutcome, *, effect_ref: str | None = None, result: Any = None, error: str | None = None
    ) -> Outcome:
        if self.replay is not None:
            raise Replayed(self.replay)
        if self.claim is None:
            raise TypeError("a read capability (pass_through) has no intent to record")
        # Converted before the record counts as tried: a result that is not JSON raises
        # here, and the block's exit still records unknown for the effect that ran.
        result = to_json(result)
        self._stop_beat()
        self._record_tried = True
        recorded = self._client.complete(self.claim, outcome, effect_ref=effect_ref, result=result, error=error)
        self.recorded = recorded
        return recorded


class _Heartbeat:
    """Keeps a claim's lease alive from a daemon thread while the effect runs.

    Beats every third of the lease (so two may fail before it runs out), each with a
    timeout of one interval so a hung request cannot skip the next beat. A 409 means
    the claim was lost: beating stops and ``lost`` says so; the completion will then be
    refused too, and the caller hears :class:`StaleClaim`.
    """

    def __init__(self, client: Client, claim: Execute) -> None:
        self._client = client
        self.claim = claim
        self.lost: StaleClaim | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"oncegate-heartbeat-{claim.intent_key[:12]}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> Execute:
        """Stops beating (waiting for a beat in progress) and returns the latest claim."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.claim

    def _interval(self) -> float:
        # A third of what is LEFT of the lease (not of its length): a claim that arrived
        # late, or a beat that failed, makes the next one come sooner.
        return max(MIN_BEAT, self.claim.lease_left() / 3)

    def _beat_timeout(self) -> float:
        # Shorter than an interval, so one hung beat does not use up the lease.
        return max(0.5, self.claim.lease_seconds / 6)

    def _run(self) -> None:
        while not self._stop.wait(self._interval()):
            try:
                self.claim = self._client.heartbeat(self.claim, timeout=self._beat_timeout())
            except StaleClaim as exc:
                self.lost = exc
                log.warning("oncegate: claim on %s lost: %s", self.claim.intent_key, exc)
                return
            except OncegateError as exc:
                log.warning("oncegate: heartbeat for %s failed: %s", self.claim.intent_key, exc)
            except Exception:  # never let a heartbeat thread die silently
                log.exception("oncegate: heartbeat for %s failed", self.claim.intent_key)

