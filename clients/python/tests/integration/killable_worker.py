"""A worker process for test_sigkill_after_the_provider_committed_is_reconciled_and_replayed.

It charges one order through the decorator, as an agent's tool process would. In mode
`hang` the function commits at the provider and then sleeps, waiting to be SIGKILLed
before anything is recorded; in mode `normal` it would commit and return. It prints
CALLED when the function body runs and RESULT <json> with what the decorated call
answered, so the test can tell a replay from an execution.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import oncegate  # noqa: E402

from ogharness import create_charge  # noqa: E402


def main() -> int:
    """Charges OG_ORDER 45.00 through the gateway at OG_URL."""
    mode = os.environ["OG_MODE"]
    sandbox = os.environ["OG_SANDBOX_URL"]
    with oncegate.Client(os.environ["OG_URL"], token=os.environ["OG_TOKEN"]) as gate:

        @gate.protect("charge_card")
        def charge_card(order_id: str, amount: str, memo: str, *, idempotency_key: str) -> dict[str, Any]:
            print("CALLED", flush=True)
            charge = create_charge(
                sandbox, order_id=order_id, amount=amount, memo=memo, idempotency_key=idempotency_key
            )
            print("COMMITTED", charge["id"], idempotency_key, flush=True)
            if mode == "hang":
                time.sleep(300)
            return charge

        result = charge_card(os.environ["OG_ORDER"], "45.00", memo=f"run in mode {mode}")
    print("RESULT", json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
