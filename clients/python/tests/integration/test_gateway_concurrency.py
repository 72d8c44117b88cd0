"""Many callers of one decorated function at once: one intent, one effect.

The function sleeps before it posts, so every caller's claim arrives while the first
execution is still running; the sandbox charges every post it gets (keys ignored), so
a second execution anywhere would be a second charge in its ledger.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import oncegate

from ogharness import AGENT_TOKEN, Stack, acreate_charge, create_charge, new_order

CALLERS = 16
#: Long enough that all the callers' claims land while the first execution runs.
WORK_SECONDS = 0.5


def _classify(outcomes: list[object], charge_ids: set[str]) -> Counter[str]:
    """Counts what the callers got: the charge (executed or replayed) or InFlight.

    Anything else (another exception, another charge) fails the test.
    """
    kinds: Counter[str] = Counter()
    for outcome in outcomes:
        if isinstance(outcome, oncegate.InFlight):
            assert outcome.intent_key, "InFlight names the intent"
            kinds["in_flight"] += 1
        elif isinstance(outcome, dict):
            assert outcome["id"] in charge_ids, f"a caller got another charge: {outcome}"
            kinds["charge"] += 1
        else:
            raise AssertionError(f"unexpected outcome {outcome!r}")
    return kinds


def test_sixteen_threads_charge_one_order_once(stack: Stack) -> None:
    """16 threads call the decorated function for one order, at once.

    Can fail: every execution posts a charge, so two claims handed `execute` would be
    two charges; and the function counts its own runs.
    """
    order = new_order("threads")
    runs: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(CALLERS)
    with oncegate.Client(stack.url, token=AGENT_TOKEN) as gate:

        @gate.protect("charge_card")
        def charge_card(
            order_id: str, amount: str, memo: str, *, idempotency_key: str
        ) -> dict[str, Any]:
            with lock:
                runs.append(memo)
            threading.Event().wait(WORK_SECONDS)
            return create_charge(
                stack.sandbox_url,
                order_id=order_id,
                amount=amount,
                memo=memo,
                idempotency_key=idempotency_key,
            )

        def caller(i: int) -> object:
            start.wait()
            try:
                return charge_card(order, "20.00", memo=f"thread {i}")
            except oncegate.InFlight as error:
                return error

        with ThreadPoolExecutor(max_workers=CALLERS) as pool:
            outcomes = list(pool.map(caller, range(CALLERS)))

    charges = stack.charges(order)
    assert len(charges) == 1, f"{len(charges)} charges for one order"
    assert len(runs) == 1, f"the function ran {len(runs)} times"
    kinds = _classify(outcomes, {charges[0]["id"]})
    assert kinds["charge"] >= 1
    assert sum(kinds.values()) == CALLERS
    assert stack.intent(stack.intent_key({"order_id": order, "amount": "20.00"}))["state"] == "applied"


def test_sixteen_asyncio_tasks_charge_one_order_once(stack: Stack) -> None:
    """16 asyncio tasks await the decorated async function for one order, at once.

    Can fail: as with threads, any second execution posts a second charge.
    """
    order = new_order("tasks")
    runs: list[str] = []

    async def scenario() -> list[object]:
        async with oncegate.AsyncClient(stack.url, token=AGENT_TOKEN) as gate:

            @gate.protect("charge_card")
            async def charge_card(
                order_id: str, amount: str, memo: str, *, idempotency_key: str
            ) -> dict[str, Any]:
                runs.append(memo)
                await asyncio.sleep(WORK_SECONDS)
                return await acreate_charge(
                    stack.sandbox_url,
                    order_id=order_id,
                    amount=amount,
                    memo=memo,
                    idempotency_key=idempotency_key,
                )

            async def caller(i: int) -> object:
                try:
                    return await charge_card(order, "21.00", memo=f"task {i}")
                except oncegate.InFlight as error:
                    return error

            return list(await asyncio.gather(*(caller(i) for i in range(CALLERS))))

    outcomes = asyncio.run(scenario())
    charges = stack.charges(order)
    assert len(charges) == 1, f"{len(charges)} charges for one order"
    assert len(runs) == 1, f"the function ran {len(runs)} times"
    kinds = _classify(outcomes, {charges[0]["id"]})
    assert kinds["charge"] >= 1
    assert sum(kinds.values()) == CALLERS


def test_five_orders_at_once_are_five_charges(stack: Stack) -> None:
    """Five distinct orders, three concurrent callers each: five intents, five charges.

    Can fail both ways: a key that ignored the order would merge the orders into fewer
    charges; a claim that let two callers of one order through would make more.
    """
    orders = [new_order(f"many{i}") for i in range(5)]
    runs: Counter[str] = Counter()
    lock = threading.Lock()
    jobs = [(order, n) for order in orders for n in range(3)]
    start = threading.Barrier(len(jobs))
    with oncegate.Client(stack.url, token=AGENT_TOKEN) as gate:

        @gate.protect("charge_card")
        def charge_card(
            order_id: str, amount: str, memo: str, *, idempotency_key: str
        ) -> dict[str, Any]:
            with lock:
                runs[order_id] += 1
            threading.Event().wait(WORK_SECONDS)
            return create_charge(
                stack.sandbox_url,
                order_id=order_id,
                amount=amount,
                memo=memo,
                idempotency_key=idempotency_key,
            )

        def caller(job: tuple[str, int]) -> tuple[str, object]:
            order, n = job
            start.wait()
            try:
                return order, charge_card(order, "7.00", memo=f"caller {n}")
            except oncegate.InFlight as error:
                return order, error

        with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            outcomes = list(pool.map(caller, jobs))

    assert len(stack.all_charges()) == 5
    for order in orders:
        charges = stack.charges(order)
        assert len(charges) == 1, f"order {order}: {len(charges)} charges"
        assert runs[order] == 1
        _classify([o for (k, o) in outcomes if k == order], {charges[0]["id"]})
