"""How protect() turns a Python call into capability arguments, and what it refuses."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

import pytest

import oncegate
from oncegate._protect import Spec


def spec(fn: Any, **over: Any) -> Spec:
    options: dict[str, Any] = dict(
        key_param="idempotency_key",
        arguments=None,
        effect_ref="/id",
        result=None,
        from_result=None,
        not_sent=None,
        heartbeat=True,
    )
    options.update(over)
    return Spec.build("charge_card", fn, **options)


def charge(order_id: str, amount: str, currency: str = "USD", *, memo: str = "", idempotency_key: str) -> dict[str, Any]:
    return {"id": "ch_1"}


def test_bound_arguments_by_name_with_defaults_and_without_the_key() -> None:
    s = spec(charge)
    assert s.claim_arguments(("A-1",), {"amount": Decimal("12.50")}) == {
        "order_id": "A-1",
        "amount": "12.50",
        "currency": "USD",
        "memo": "",
    }


def test_the_caller_cannot_pass_the_key() -> None:
    with pytest.raises(TypeError, match="oncegate derives the key"):
        spec(charge).claim_arguments(("A-1", "1"), {"idempotency_key": "mine"})


def test_a_function_without_the_key_parameter_is_refused_at_decoration() -> None:
    def no_key(order_id: str) -> None: ...

    with pytest.raises(TypeError, match="idempotency_key"):
        spec(no_key)

    def other_name(order_id: str, *, key: str) -> None: ...

    assert spec(other_name, key_param="key").claim_arguments(("A-1",), {}) == {"order_id": "A-1"}


def test_kwargs_are_flattened_and_varargs_listed() -> None:
    def f(order_id: str, *lines: str, idempotency_key: str, **extra: Any) -> None: ...

    s = spec(f)
    assert s.claim_arguments(("A-1", "l1", "l2"), {"amount": "3"}) == {
        "order_id": "A-1",
        "lines": ["l1", "l2"],
        "amount": "3",
    }


def test_key_through_kwargs_only() -> None:
    def f(order_id: str, **extra: Any) -> None: ...

    s = spec(f)
    assert s.key_by_kwargs
    assert s.with_key({"a": 1}, "k") == {"a": 1, "idempotency_key": "k"}


def test_key_through_a_key_context_first_parameter() -> None:
    def f(key: oncegate.KeyContext, /, order_id: str, amount: str = "1", *, memo: str = "") -> Any:
        return (key, order_id, amount, memo)

    s = spec(f)
    assert s.key_by_context and not s.key_by_kwargs
    assert s.claim_arguments(("A-1",), {"memo": "m"}) == {"order_id": "A-1", "amount": "1", "memo": "m"}
    s.check_bindable(("A-1",), {})
    with pytest.raises(TypeError, match="order_id"):
        s.check_bindable((), {})
    assert s.invoke(("A-1",), {}, "k") == (oncegate.KeyContext("k"), "A-1", "1", "")
    # The annotation as a class object (no `from __future__ import annotations`) too.
    f.__annotations__["key"] = oncegate.KeyContext
    assert spec(f).key_by_context


def test_self_is_not_an_argument() -> None:
    class Payments:
        def charge(self, order_id: str, *, idempotency_key: str) -> None: ...

    s = spec(Payments.charge)
    assert s.claim_arguments((Payments(), "A-1"), {}) == {"order_id": "A-1"}


def test_arguments_callable_overrides() -> None:
    @dataclasses.dataclass
    class Order:
        id: str
        total: Decimal

    def f(order: Order, *, idempotency_key: str) -> None: ...

    s = spec(f, arguments=lambda order: {"order_id": order.id, "amount": order.total})
    assert s.claim_arguments((Order("A-2", Decimal("9.90")),), {}) == {"order_id": "A-2", "amount": "9.90"}


def test_a_call_that_could_not_run_fails_before_the_claim() -> None:
    with pytest.raises(TypeError, match="missing"):
        spec(charge).check_bindable(("A-1",), {})


def test_applied_record_effect_ref_and_result() -> None:
    s = spec(charge)
    assert s.applied_record({"id": "ch_9", "amount": 1}) == ("ch_9", {"id": "ch_9", "amount": 1}, None)
    nested = spec(charge, effect_ref="/charge/id")
    assert nested.applied_record({"charge": {"id": "ch_8"}})[0] == "ch_8"
    by_callable = spec(charge, effect_ref=lambda r: r["ref"])
    assert by_callable.applied_record({"ref": "re_1"})[0] == "re_1"
    converted = spec(charge, result=lambda r: {"id": r.upper()})
    assert converted.applied_record("ch_lower") == ("CH_LOWER", {"id": "CH_LOWER"}, None)


def test_a_result_that_cannot_be_stored_is_reported_not_hidden() -> None:
    ref, stored, problem = spec(charge).applied_record(object())
    assert (ref, stored) == (None, None)
    assert isinstance(problem, TypeError)


def test_failure_outcome_rules() -> None:
    class SdkDown(Exception):
        pass

    assert spec(charge).failure_outcome(ConnectionRefusedError()) == "not_sent"
    assert spec(charge).failure_outcome(TimeoutError()) == "unknown"
    assert spec(charge, not_sent=[SdkDown]).failure_outcome(SdkDown()) == "not_sent"
    assert spec(charge, not_sent=oncegate.not_sent.never).failure_outcome(ConnectionRefusedError()) == "unknown"

    def broken(exc: BaseException) -> bool:
        raise RuntimeError("bug in a custom rule")

    assert spec(charge, not_sent=broken).failure_outcome(ConnectionRefusedError()) == "unknown"


def test_sync_and_async_are_not_mixed() -> None:
    gate = oncegate.Client("http://127.0.0.1:9", "tok")
    agate = oncegate.AsyncClient("http://127.0.0.1:9", "tok")

    async def async_charge(order_id: str, *, idempotency_key: str) -> None: ...

    def sync_charge(order_id: str, *, idempotency_key: str) -> None: ...

    with pytest.raises(TypeError, match="AsyncClient"):
        gate.protect("charge_card")(async_charge)
    with pytest.raises(TypeError, match="oncegate.Client"):
        agate.protect("charge_card")(sync_charge)  # type: ignore[arg-type]  # mypy sees it too
    gate.close()


def test_generators_are_refused() -> None:
    def gen(order_id: str, *, idempotency_key: str) -> Any:
        yield order_id

    with pytest.raises(TypeError, match="generator"):
        spec(gen)


def test_effect_ref_must_be_a_pointer() -> None:
    with pytest.raises(ValueError):
        spec(charge, effect_ref="id")


def test_run_and_step_ids_are_checked_where_set() -> None:
    with pytest.raises(ValueError):
        with oncegate.run("run with spaces"):
            pass
    with pytest.raises(ValueError):
        with oncegate.run("x" * 256):
            pass
    with oncegate.run("run-1", step="1") as ctx:
        assert ctx == oncegate.RunContext("run-1", "1")
        with oncegate.step("2"):
            assert oncegate.current() == oncegate.RunContext("run-1", "2")
        with oncegate.run("run-2"):
            assert oncegate.current() == oncegate.RunContext("run-2", None)
        assert oncegate.current() == oncegate.RunContext("run-1", "1")
    assert oncegate.current() == oncegate.RunContext(None, None)
