"""What ``protect()`` decides, apart from the I/O: shared by the sync and async clients.

Given the decorated function and its options: which capability arguments a call makes
(the bound arguments by name, minus the key parameter), how the oncegate key is passed
in, what an outcome means for the caller (return the stored result, or raise), and what
to record from a return value or an exception.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, overload

from . import not_sent as not_sent_rules
from ._json import effect_ref_at, to_json
from .models import CompletionOutcome, Outcome

__all__ = ["AsyncProtector", "KeyContext", "Protector", "Spec", "NotSentRule", "EffectRefRule", "error_text", "failure_outcome", "not_sent_predicate", "add_note"]

NotSentRule = Callable[[BaseException], bool] | Iterable[type[BaseException]] | None
EffectRefRule = str | Callable[[Any], "str | None"] | None

_MAX_ERROR_TEXT = 2000


@dataclasses.dataclass(frozen=True)
class KeyContext:
    """What a protected function receives as its FIRST parameter, when it is annotated
    ``KeyContext`` (instead of a keyword ``idempotency_key=``).

    This form exists for the type checker: ``protect`` then types the decorated function
    as ``Callable[P, R]`` where ``P`` is the function's parameters after this one, so
    mypy checks every argument and rejects a caller-supplied key (the key parameter is
    not in ``P``). ``idempotency_key`` is ``None`` on a pass-through (a ``read``
    capability), as with the keyword form.
    """

    idempotency_key: str | None


P = ParamSpec("P")
R = TypeVar("R")


class Protector(Protocol):
    """The type of ``Client.protect(...)``: what it does to a function's type.

    A function taking a :class:`KeyContext` first keeps its own parameters (minus that
    one) and return type, so mypy checks its callers' arguments and rejects a
    caller-supplied key. A function taking the key by keyword (``*, idempotency_key``)
    keeps its return type only: typing has no way to say "``P`` minus one keyword"
    (``ParamSpec`` drops leading positional parameters only, through ``Concatenate``),
    and keeping ``P`` whole would make every caller pass the key.

    Write the context parameter positional-only (``key: KeyContext, /``): when the
    function's type contains ``Any`` (a ``dict[str, Any]`` result), mypy resolves an
    overload that a named first parameter leaves ambiguous to ``Any``; with ``/`` both
    overloads see the same parameter and the typed one wins.
    """

    @overload
    def __call__(self, fn: Callable[Concatenate[KeyContext, P], R], /) -> Callable[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Callable[..., R]: ...


class AsyncProtector(Protocol):
    """The type of ``AsyncClient.protect(...)``; see :class:`Protector`."""

    @overload
    def __call__(
        self, fn: Callable[Concatenate[KeyContext, P], Awaitable[R]], /
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...
    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]], /) -> Callable[..., Coroutine[Any, Any, R]]: ...


def _takes_key_context(signature: inspect.Signature) -> bool:
    """True when the first parameter is annotated :class:`KeyContext` (the class, or
    its name as a string under ``from __future__ import annotations``)."""
    params = list(signature.parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        return False
    annotation = params[0].annotation
    if annotation is KeyContext:
        return True
    return isinstance(annotation, str) and annotation.rsplit(".", 1)[-1] == "KeyContext"


def error_text(exc: BaseException) -> str:
    """What the gateway stores as the attempt's error: the type and message, bounded."""
    text = f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"
    return text if len(text) <= _MAX_ERROR_TEXT else text[: _MAX_ERROR_TEXT - 3] + "..."


def not_sent_predicate(rule: NotSentRule) -> Callable[[BaseException], bool]:
    if rule is None:
        return not_sent_rules.is_not_sent
    if callable(rule) and not isinstance(rule, type):
        return rule
    extra = tuple(rule)  # type: ignore[arg-type]
    for t in extra:
        if not (isinstance(t, type) and issubclass(t, BaseException)):
            raise TypeError(f"not_sent= takes exception classes or a predicate, not {t!r}")

    def predicate(exc: BaseException) -> bool:
        return isinstance(exc, extra) or not_sent_rules.is_not_sent(exc)

    return predicate


@dataclasses.dataclass(frozen=True)
class Spec:
    """One ``protect()`` decoration, checked once when the decorator is applied."""

    capability: str
    function: Callable[..., Any]
    signature: inspect.Signature
    key_param: str
    key_by_kwargs: bool
    # The key arrives as a KeyContext in the first positional parameter, not by keyword.
    key_by_context: bool
    arguments: Callable[..., Mapping[str, Any]] | None
    effect_ref: EffectRefRule
    result: Callable[[Any], Any] | None
    from_result: Callable[[Any], Any] | None
    is_not_sent: Callable[[BaseException], bool]
    heartbeat: bool

    @classmethod
    def build(
        cls,
        capability: str,
        function: Callable[..., Any],
        *,
        key_param: str,
        arguments: Callable[..., Mapping[str, Any]] | None,
        effect_ref: EffectRefRule,
        result: Callable[[Any], Any] | None,
        from_result: Callable[[Any], Any] | None,
        not_sent: NotSentRule,
        heartbeat: bool,
    ) -> Spec:
        if not capability:
            raise ValueError("protect() needs the capability's name")
        if inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function):
            # A generator's body runs after the call returns: there would be nothing to
            # record when the decorator records, and the effect would run unclaimed.
            raise TypeError(f"{function.__qualname__} is a generator; protect() needs a function that performs the effect")
        signature = inspect.signature(function)
        by_context = _takes_key_context(signature)
        param = signature.parameters.get(key_param)
        accepts_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
        if by_context:
            param = None
        elif param is None and not accepts_kwargs:
            raise TypeError(
                f"{function.__qualname__} has no parameter {key_param!r}: the oncegate key is passed in "
                f"as {key_param}=...; add it (keyword-only is best) or pass key_param= to protect()"
            )
        if param is not None and param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(f"{function.__qualname__}: {key_param!r} must be passable by keyword")
        if isinstance(effect_ref, str) and effect_ref and not effect_ref.startswith("/"):
            raise ValueError(f"effect_ref={effect_ref!r} is not a JSON pointer (like '/id')")
        return cls(
            capability=capability,
            function=function,
            signature=signature,
            key_param=key_param,
            key_by_kwargs=param is None and not by_context,
            key_by_context=by_context,
            arguments=arguments,
            effect_ref=effect_ref,
            result=result,
            from_result=from_result,
            is_not_sent=not_sent_predicate(not_sent),
            heartbeat=heartbeat,
        )

    def check_call(self, kwargs: Mapping[str, Any]) -> None:
        """Refuses a caller-supplied key: the runtime owns the key, never the caller."""
        if self.key_param in kwargs:
            raise TypeError(
                f"{self.function.__qualname__}: do not pass {self.key_param}=; oncegate derives the key "
                "and passes it in"
            )

    def claim_arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The capability arguments of one call: ``arguments=`` if given, else the bound
        arguments by name (defaults applied, ``self``/``cls`` and the key left out,
        ``**kwargs`` flattened, ``*args`` as a list under its name)."""
        self.check_call(kwargs)
        if self.arguments is not None:
            produced = self.arguments(*args, **kwargs)
            converted = to_json(produced)
            if not isinstance(converted, dict):
                raise TypeError("arguments= must return a mapping of capability argument names to values")
            return converted
        params = list(self.signature.parameters.values())
        lead: tuple[Any, ...] = (KeyContext(None),) if self.key_by_context else ()
        try:
            bound = self.signature.bind_partial(*lead, *args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.function.__qualname__}: {exc}") from None
        bound.apply_defaults()
        out: dict[str, Any] = {}
        for index, (name, value) in enumerate(bound.arguments.items()):
            p = self.signature.parameters[name]
            if self.key_by_context and index == 0:
                continue
            if name == self.key_param and not self.key_by_context:
                continue
            if index == 0 and name in ("self", "cls") and params and params[0].name == name:
                continue
            if p.kind is inspect.Parameter.VAR_KEYWORD:
                for k, v in value.items():
                    if k != self.key_param:
                        out[k] = v
            elif p.kind is inspect.Parameter.VAR_POSITIONAL:
                if value:
                    out[name] = list(value)
            else:
                out[name] = value
        converted = to_json(out)
        assert isinstance(converted, dict)
        return converted

    def check_bindable(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """Fails before the claim when the call could not run (missing argument, ...)."""
        try:
            if self.key_by_context:
                self.signature.bind(KeyContext(None), *args, **kwargs)
            else:
                self.signature.bind(*args, **{**kwargs, self.key_param: ""})
        except TypeError as exc:
            raise TypeError(f"{self.function.__qualname__}: {exc}") from None

    def invoke(self, args: tuple[Any, ...], kwargs: Mapping[str, Any], key: str | None) -> Any:
        """Calls the function with the oncegate key passed in (for an ``async def``,
        answers the coroutine to await)."""
        if self.key_by_context:
            return self.function(KeyContext(key), *args, **kwargs)
        return self.function(*args, **self.with_key(kwargs, key))

    def with_key(self, kwargs: Mapping[str, Any], key: str | None) -> dict[str, Any]:
        """The keyword arguments to call the function with, the oncegate key included."""
        return {**kwargs, self.key_param: key}

    def applied_record(self, value: Any) -> tuple[str | None, Any, Exception | None]:
        """(effect_ref, result JSON, conversion error) to record for a return value.

        The effect happened whatever the conversion says, so a result or reference that
        cannot be taken (a value that is not JSON, a `result=` or `effect_ref=` callable
        that raises, a pydantic serialisation error) is recorded as applied without it,
        and the error is raised after the record: the truth is kept, and the bug is loud.
        Never raises: an exception here would leave the effect unrecorded.
        """
        problem: Exception | None = None
        try:
            stored = self.result(value) if self.result is not None else value
            stored = to_json(stored)
        except Exception as exc:
            stored, problem = None, exc
        ref: str | None = None
        rule = self.effect_ref
        try:
            if callable(rule):
                raw_ref = rule(value)
                ref = None if raw_ref is None else str(raw_ref)
            elif isinstance(rule, str) and stored is not None:
                ref = effect_ref_at(stored, rule)
        except Exception as exc:
            ref, problem = None, problem or exc
        return ref, stored, problem

    def failure_outcome(self, exc: BaseException) -> CompletionOutcome:
        """What to record for an exception the function raised."""
        return failure_outcome(self.is_not_sent, exc)

    def replay_value(self, outcome: Outcome) -> Any:
        """What the function "returns" on a replay: the stored result, never a new call."""
        return self.from_result(outcome.result) if self.from_result is not None else outcome.result


def failure_outcome(is_not_sent: Callable[[BaseException], bool], exc: BaseException) -> CompletionOutcome:
    """``not_sent`` only on proof that nothing left; ``unknown`` for anything else."""
    try:
        return "not_sent" if is_not_sent(exc) else "unknown"
    except Exception:
        # A broken custom rule must never turn an unknown into a not_sent.
        return "unknown"


def add_note(exc: BaseException, note: str) -> None:
    """PEP 678 notes where the runtime has them (3.11+); a log line covers 3.10."""
    adder = getattr(exc, "add_note", None)
    if callable(adder):
        adder(note)
