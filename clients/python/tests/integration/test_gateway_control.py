"""The control: without oncegate, the same scenarios charge more than once.

Every other test asserts "one charge" on the sandbox's ledger. That only means
something if the ledger would show a second charge when a function ran twice, even with
the same idempotency key, as a re-execution through the gateway would send it. These
controls run the provider calls with no gateway in front and show that it does.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from ogharness import Stack, create_charge, new_order


def test_control_replans_without_oncegate_are_four_charges(stack: Stack) -> None:
    """The drifting re-plans of the timeout test, sent straight to the provider with one
    and the same key: four charges, since the sandbox honours no key for charges."""
    order = new_order("control")
    replans: list[tuple[str | float, str]] = [("12.50", "a"), (12.5, "b"), ("12.50 USD", "c"), ("12.50", "d")]
    for amount, memo in replans:
        create_charge(
            stack.sandbox_url,
            order_id=order,
            amount=amount,
            memo=memo,
            idempotency_key="the-same-key-every-time",
        )
    charges = stack.charges(order)
    assert len(charges) == 4
    assert {c["amount_minor"] for c in charges} == {1250}


def test_control_sixteen_threads_without_oncegate_are_sixteen_charges(stack: Stack) -> None:
    """The 16 concurrent callers of the concurrency test, with no gateway: 16 charges."""
    order = new_order("control-threads")
    start = threading.Barrier(16)

    def caller(i: int) -> str:
        start.wait()
        charge = create_charge(
            stack.sandbox_url, order_id=order, amount="20.00", memo=f"thread {i}", idempotency_key="k"
        )
        return str(charge["id"])

    with ThreadPoolExecutor(max_workers=16) as pool:
        ids = set(pool.map(caller, range(16)))
    assert len(ids) == 16
    assert len(stack.charges(order)) == 16
