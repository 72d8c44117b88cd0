"""Must FAIL ``mypy --strict``: each line marked ``# E`` must be reported (the test
checks each one), and no other line."""

from __future__ import annotations

from typing import Any

import oncegate
from oncegate import KeyContext

gate = oncegate.Client("http://127.0.0.1:7878", token="t")
agate = oncegate.AsyncClient("http://127.0.0.1:7878", token="t")


@gate.protect("charge_card")
def charge_card(key: KeyContext, /, order_id: str, amount: str) -> dict[str, Any]:
    return {"id": "ch_1", "key": key.idempotency_key}


@agate.protect("charge_card")
async def acharge_card(key: KeyContext, order_id: str, amount: int) -> int:
    return amount


def use() -> None:
    charge_card("A-1", 1250)  # E: a wrong argument type
    charge_card("A-1", "12.50", idempotency_key="mine")  # E: the decorator supplies the key
    charge_card("A-1")  # E: a missing argument
    wrong: int = charge_card("A-1", "12.50")  # E: the return type is the function's own
    del wrong


async def ause() -> None:
    await acharge_card("A-1", "12.50")  # E: a wrong argument type (async)
    await acharge_card("A-1", 1, idempotency_key="mine")  # E: the key (async)
    wrong: str = await acharge_card("A-1", 1)  # E: the return type (async)
    del wrong
