"""The asyncio client: :class:`AsyncClient`, the same API as :class:`oncegate.Client`, awaited.

Differences that matter: heartbeats run as a task on your event loop, and completions
are shielded from cancellation, so a caller that gives up (``asyncio.wait_for``, a
closed agent stream) cannot stop an effect's outcome from being recorded.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar, cast

import httpx

from . import _wire
from ._json import to_json
from ._protect import AsyncProtector, EffectRefRule, NotSentRule, Spec, add_note, error_text, failure_outcome, not_sent_predicate
from .client import _RESULT_REFUSED, DEFAULT_TIMEOUT, MIN_BEAT, _key_and_token
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

__all__ = ["AsyncClient", "AsyncIntent"]

log = logging.getLogger("oncegate")

R = TypeVar("R")


class AsyncClient:
    """A connection to one oncegate gateway for asyncio code; see :class:`oncegate.Client`.

    ``async with AsyncClient(url, token) as gate:`` (or ``await gate.aclose()``).
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        complete_retries: int = 4,
        headers: Mapping[str, str] | None = None,
        http: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"the gateway URL must start with http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.complete_retries = complete_retries
        self._wire = _wire.Wire(token, headers)
        self._owns_http = http is None
        self._http = http if http is not None else httpx.AsyncClient(timeout=timeout, transport=transport)

    async def aclose(self) -> None:
        """Closes the HTTP connections this client opened (not a lent ``http=`` client)."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None
    ) -> None:
        await self.aclose()

    async def claim(
        self,
        capability: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        run_id: str | None = None,
        step_id: str | None = None,
    ) -> ClaimAnswer:
        """See :meth:`oncegate.Client.claim`."""
        req = self._wire.claim(capability, arguments, idempotency_key=idempotency_key, run_id=run_id, step_id=step_id)
        response = await self._send(req, "claim")
        return parse_claim(_wire.decode(response), response.status_code, response.headers.get("date"))

    async def complete(
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
        """See :meth:`oncegate.Client.complete`."""
        key, token = _key_and_token(claim, fencing_token)
        req = self._wire.complete(key, token, outcome, effect_ref=effect_ref, result=result, error=error)
        delays = _wire.retry_delays(self.complete_retries if retries is None else retries)
        last: GatewayUnavailable | None = None
        for attempt in range(len(delays) + 1):
            if attempt:
                await asyncio.sleep(delays[attempt - 1])
            try:
                response = await self._send(req, f"record {outcome}", key)
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

    async def heartbeat(
        self, claim: Execute | str, *, fencing_token: str | None = None, timeout: float | None = None
    ) -> Execute:
        """See :meth:`oncegate.Client.heartbeat`."""
        key, token = _key_and_token(claim, fencing_token)
        response = await self._send(self._wire.heartbeat(key, token, timeout), "heartbeat", key)
        return parse_execute(_wire.decode(response, intent_key=key), response.headers.get("date"))

    async def call(
        self,
        capability: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        run_id: str | None = None,
        step_id: str | None = None,
    ) -> Outcome:
        """See :meth:`oncegate.Client.call`."""
        req = self._wire.call(capability, arguments, idempotency_key=idempotency_key, run_id=run_id, step_id=step_id)
        response = await self._send(req, "call")
        return parse_outcome(_wire.decode(response), response.status_code)

    async def derive_key(
        self,
        capability: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        step_id: str | None = None,
    ) -> KeyExplanation:
        """See :meth:`oncegate.Client.derive_key`."""
        req = self._wire.derive_key(capability, arguments, run_id=run_id, step_id=step_id)
        response = await self._send(req, "derive a key")
        return parse_key_explanation(_wire.decode(response))

    async def get_intent(self, intent_key: str) -> dict[str, Any]:
        """See :meth:`oncegate.Client.get_intent`."""
        response = await self._send(self._wire.get_intent(intent_key), "read an intent", intent_key)
        return _wire.decode(response, intent_key=intent_key)

    async def get_approval(self, approval_id: str) -> dict[str, Any]:
        """See :meth:`oncegate.Client.get_approval`."""
        response = await self._send(self._wire.get_approval(approval_id), "read an approval")
        return _wire.decode(response)

    async def approve(self, approval_id: str) -> Outcome:
        """See :meth:`oncegate.Client.approve`."""
        response = await self._send(self._wire.decide(approval_id, "approve"), "approve")
        return parse_outcome(_wire.decode(response), response.status_code)

    async def deny(self, approval_id: str) -> Outcome:
        """See :meth:`oncegate.Client.deny`."""
        response = await self._send(self._wire.decide(approval_id, "deny"), "deny")
        return parse_outcome(_wire.decode(response), response.status_code)

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
    ) -> AsyncProtector:
        """See :meth:`oncegate.Client.protect`; for ``async def`` functions only (a plain
        function raises ``TypeError``: decorate it with :class:`oncegate.Client`)."""

        def decorate(fn: Callable[..., Awaitable[R]]) -> Callable[..., Coroutine[Any, Any, R]]:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError(
                    f"{fn.__qualname__} is not async: decorate it with oncegate.Client(...).protect, "
                    "or make it an async def"
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
            async def wrapper(*args: Any, **kwargs: Any) -> R:
                return cast(R, await self._run_protected(spec, args, kwargs))

            wrapper.__oncegate_capability__ = capability  # type: ignore[attr-defined]
            # What the framework adapters (oncegate.langgraph, oncegate.openai_agents) read.
            wrapper.__oncegate_protected__ = (self, spec)  # type: ignore[attr-defined]
            return wrapper

        # The overloads of AsyncProtector say what decorate does to each form's type.
        return cast(AsyncProtector, decorate)

    async def _run_protected(
        self, spec: Spec, args: tuple[Any, ...], kwargs: dict[str, Any], first: ClaimAnswer | None = None
    ) -> Any:
        """One protected call; ``first`` is a claim answer already asked for these
        arguments (the framework adapters claim before the framework decides to run the
        tool, so that a held call can pause the run the framework's way)."""
        claim_args = spec.claim_arguments(args, kwargs)
        spec.check_bindable(args, kwargs)
        answer = first if first is not None else await self.claim(spec.capability, claim_args)
        if isinstance(answer, Outcome) and answer.status == "approved":
            answer = await self.claim(spec.capability, claim_args)
            if isinstance(answer, Outcome) and answer.status == "approved":
                # Never a success: nothing was executed and the function must not run.
                raise OutcomeError(answer)
        if isinstance(answer, PassThrough):
            return await spec.invoke(args, kwargs, None)
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
                await self.complete(answer, "not_sent", error="the lease ran out before the effect was sent")
            except OncegateError:
                pass
            raise StaleClaim(
                f"the claim on {answer.intent_key} expired before {spec.function.__qualname__} was called; "
                "nothing was sent: call again to see where the intent stands",
                intent_key=answer.intent_key,
            )
        beat = _AsyncHeartbeat(self, answer) if spec.heartbeat else None
        if beat is not None:
            beat.start()
        try:
            value = await spec.invoke(args, kwargs, answer.idempotency_key)
        except BaseException as exc:
            claim = await beat.stop() if beat is not None else answer
            outcome = spec.failure_outcome(exc)
            try:
                await _shielded(self.complete(claim, outcome, error=error_text(exc)))
            except OncegateError as record_exc:
                log.error("oncegate: %s after %s on %s: %s", outcome, type(exc).__name__, claim.intent_key, record_exc)
                add_note(exc, f"oncegate: recording {outcome!r} failed: {record_exc}")
            raise
        claim = await beat.stop() if beat is not None else answer
        ref, stored, problem = spec.applied_record(value)
        try:
            try:
                await _shielded(self.complete(claim, "applied", effect_ref=ref, result=stored))
            except GatewayError as exc:
                if isinstance(exc, StaleClaim) or stored is None or exc.status_code not in _RESULT_REFUSED:
                    raise
                # The gateway refused the result itself (too large, a number it cannot
                # hold exactly): the effect happened all the same, so record it without.
                await _shielded(self.complete(claim, "applied", effect_ref=ref))
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

    @asynccontextmanager
    async def intent(
        self,
        capability: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        run_id: str | None = None,
        step_id: str | None = None,
        not_sent: NotSentRule = None,
        heartbeat: bool = True,
    ) -> AsyncIterator[AsyncIntent]:
        """See :meth:`oncegate.Client.intent`; ``async with``, and the record methods are awaited."""
        is_not_sent = not_sent_predicate(not_sent)
        answer = await self.claim(capability, arguments, idempotency_key=idempotency_key, run_id=run_id, step_id=step_id)
        if isinstance(answer, Outcome) and answer.status == "approved":
            answer = await self.claim(
                capability, arguments, idempotency_key=idempotency_key, run_id=run_id, step_id=step_id
            )
        if isinstance(answer, Outcome) and answer.status == "approved":
            raise OutcomeError(answer)
        if isinstance(answer, Outcome):
            err = error_for_outcome(answer)
            if err is not None:
                raise err
        if isinstance(answer, Execute) and answer.too_late_to_send():
            # As in protect(): the lease (nearly) ran out before the block could start.
            try:
                await self.complete(answer, "not_sent", error="the lease ran out before the effect was sent")
            except OncegateError:
                pass
            raise StaleClaim(
                f"the claim on {answer.intent_key} expired before the intent() block started; nothing was sent",
                intent_key=answer.intent_key,
            )
        handle = AsyncIntent(self, answer)
        if isinstance(answer, Execute) and heartbeat:
            handle._beat = _AsyncHeartbeat(self, answer)
            handle._beat.start()
        try:
            yield handle
        except BaseException as exc:
            await handle._stop_beat()
            if isinstance(answer, Execute) and not handle._record_tried:
                outcome = failure_outcome(is_not_sent, exc)
                try:
                    await handle._record(outcome, error=error_text(exc))
                except OncegateError as record_exc:
                    log.error("oncegate: %s after %s on %s: %s", outcome, type(exc).__name__, answer.intent_key, record_exc)
                    add_note(exc, f"oncegate: recording {outcome!r} failed: {record_exc}")
            raise
        await handle._stop_beat()
        if isinstance(answer, Execute) and not handle._record_tried:
            await handle._record("unknown", error="the intent() block ended without recording an outcome")
            raise IntentNotRecorded(
                f"the intent() block for {capability} held the execution of {answer.intent_key} and ended "
                "without claim.applied()/failed()/not_sent(); recorded 'unknown' (the gateway reconciles)",
                intent_key=answer.intent_key,
            )

    async def _send(self, req: _wire.Request, what: str, intent_key: str | None = None) -> httpx.Response:
        try:
            return await self._http.request(
                req.method,
                self.url + req.path,
                content=None if req.body is None else _wire.encode(req.body),
                headers={**req.headers, **({"Content-Type": "application/json"} if req.body is not None else {})},
                timeout=req.timeout if req.timeout is not None else self.timeout,
            )
        except httpx.TransportError as exc:
            raise _wire.transport_error(exc, what, intent_key) from exc


async def _shielded(awaitable: Awaitable[Outcome]) -> Outcome:
    """Runs a completion to its end even if the caller is cancelled meanwhile.

    The record is what keeps a second effect from happening; a cancelled caller still
    gets its ``CancelledError``, and the completion finishes as its own task.
    """
    return await asyncio.shield(awaitable)


class AsyncIntent:
    """The handle an ``async with gate.intent(...)`` block gets; see :class:`oncegate.Intent`."""

    def __init__(self, client: AsyncClient, answer: ClaimAnswer) -> None:
        self._client = client
        self._beat: _AsyncHeartbeat | None = None
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

    async def applied(self, effect_ref: str | None = None, result: Any = None) -> Outcome:
        """Records that the effect took place (with the provider's reference)."""
        return await self._record("applied", effect_ref=effect_ref, result=result)

    async def failed(self, error: str | None = None, result: Any = None) -> Outcome:
        """Records that the provider said no, definitely: repeats replay this failure."""
        return await self._record("failed", error=error, result=result)

    async def unknown(self, error: str | None = None) -> Outcome:
        """Records that the effect may or may not have happened: the gateway reconciles."""
        return await self._record("unknown", error=error)

    async def not_sent(self, error: str | None = None) -> Outcome:
        """Records that nothing reached the provider: the next claim executes again."""
        return await self._record("not_sent", error=error)

    async def _stop_beat(self) -> None:
        if self._beat is not None:
            latest = await self._beat.stop()
            self._beat = None
            self.claim = latest

    async def _record(
        self, outcome: CompletionOutcome, *, effect_ref: str | None = None, result: Any = None, error: str | None = None
    ) -> Outcome:
        if self.replay is not None:
            raise Replayed(self.replay)
        if self.claim is None:
            raise TypeError("a read capability (pass_through) has no intent to record")
        # Converted before the record counts as tried: a result that is not JSON raises
        # here, and the block's exit still records unknown for the effect that ran.
        result = to_json(result)
        await self._stop_beat()
        self._record_tried = True
        recorded = await _shielded(
            self._client.complete(self.claim, outcome, effect_ref=effect_ref, result=result, error=error)
        )
        self.recorded = recorded
        return recorded


class _AsyncHeartbeat:
    """Keeps a claim's lease alive from a task while the effect runs (see ``_Heartbeat``)."""

    def __init__(self, client: AsyncClient, claim: Execute) -> None:
        self._client = client
        self.claim = claim
        self.lost: StaleClaim | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"oncegate-heartbeat-{self.claim.intent_key[:12]}"
        )

    async def stop(self) -> Execute:
        """Stops beating (letting a beat in progress finish) and returns the latest claim."""
        self._stop.set()
        if self._task is not None:
            try:
                await asyncio.shield(self._task)
            except Exception:  # _run logs its own failures; never mask the caller's outcome
                pass
        return self.claim

    def _interval(self) -> float:
        # A third of what is LEFT of the lease (not of its length): a claim that arrived
        # late, or a beat that failed, makes the next one come sooner.
        return max(MIN_BEAT, self.claim.lease_left() / 3)

    def _beat_timeout(self) -> float:
        # Shorter than an interval, so one hung beat does not use up the lease.
        return max(0.5, self.claim.lease_seconds / 6)

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._stop.wait(), self._interval())
                return
            except asyncio.TimeoutError:
                pass
            try:
                self.claim = await self._client.heartbeat(self.claim, timeout=self._beat_timeout())
            except StaleClaim as exc:
                self.lost = exc
                log.warning("oncegate: claim on %s lost: %s", self.claim.intent_key, exc)
                return
            except OncegateError as exc:
                log.warning("oncegate: heartbeat for %s failed: %s", self.claim.intent_key, exc)
            except Exception:
                log.exception("oncegate: heartbeat for %s failed", self.claim.intent_key)
