"""Must pass ``mypy --strict``: protected functions keep their parameters and return type."""

from __future__ import annotations

from typing import Any

import oncegate
from oncegate import KeyContext

gate = oncegate.Client("http://127.0.0.1:7878", token="t")
agate = oncegate.AsyncClient("http://127.0.0.1:7878", token="t")


@gate.protect("charge_card")
def charge_card(key: KeyContext, /, order_id: str, amount: str, *, memo: str = "") -> dict[str, Any]:
    return {"id": "ch_1", "key": key.idempotency_key, "order_id": order_id, "amount": amount, "memo": memo}


@agate.protect("charge_card")
async def acharge_card(key: KeyContext, order_id: str, amount: int) -> int:
    return amount


# Without the "/", a return type free of Any is enough for mypy to pick the typed form.
@gate.protect("refund")
def refund_typed(key: KeyContext, order_id: str, amount_minor: int) -> str:
    return f"{order_id}:{amount_minor}:{key.idempotency_key}"


# Today's keyword form still type-checks as before (its return type is kept).
@gate.protect("refund")
def refund(order_id: str, *, idempotency_key: str) -> str:
    return idempotency_key


def use() -> None:
    charge: dict[str, Any] = charge_card("A-1", "12.50", memo="m")
    kept: str = refund("A-1")
    typed: str = refund_typed("A-1", 1250)
    del charge, kept, typed


async def ause() -> int:
    return await acharge_card("A-1", 1250)
