"""The repository README's Python examples, run as written against a real gateway and sandbox.

Both blocks of "When your code makes the call" are taken from README.md as they stand
and run in a fresh interpreter of this virtualenv (where the client and stripe are
installed, as `pip install` would): the Stripe form first, with no STRIPE_API_KEY, as
a new user runs it, then the sandbox form. Stripe refuses before sending, the client
reports `not_sent`, and the sandbox form's claim of the same intent executes at once
(after the gateway's read found nothing): one charge, and the re-plan in the example
replays it.

Can fail: the sandbox charges every POST (keys ignored), so a second execution of the
example's intent would be a second charge; and a stripe error recorded `unknown`
(not reported as not sent) fails the state check.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from ogharness import AGENT_TOKEN, SANDBOX_API_KEY, Stack

README = Path(__file__).resolve().parents[4] / "README.md"


def readme_python_blocks() -> list[str]:
    """The ```python blocks of the README's "When your code makes the call" section."""
    text = README.read_text()
    start = text.index("## When your code makes the call")
    end = text.index("\n## ", start + 3)
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)


def run_example(stack: Stack, source: str, tmp: Path, name: str) -> subprocess.CompletedProcess[str]:
    path = tmp / name
    path.write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ONCEGATE_", "SANDBOX_", "STRIPE_"))}
    env.update(ONCEGATE_URL=stack.url, ONCEGATE_TOKEN=AGENT_TOKEN, SANDBOX_URL=stack.sandbox_url, SANDBOX_API_KEY=SANDBOX_API_KEY)
    return subprocess.run([sys.executable, str(path)], env=env, cwd=tmp, capture_output=True, text=True, timeout=120)


def test_the_readme_examples_run_as_written(stack: Stack, tmp_path: Path) -> None:
    blocks = readme_python_blocks()
    assert len(blocks) == 2, f"expected the sandbox form and the Stripe form, found {len(blocks)} blocks"
    sandbox_form, stripe_form = blocks
    assert "httpx.post" in sandbox_form and "stripe.PaymentIntent.create" in stripe_form

    stripe_run = run_example(stack, stripe_form, tmp_path, "stripe_form.py")
    assert stripe_run.returncode != 0, stripe_run.stdout
    assert "AuthenticationError: No API key provided" in stripe_run.stderr, stripe_run.stderr
    key = stack.intent_key({"order_id": "A-1001", "amount": "12.50"})
    record = stack.intent(key)
    # Reported not_sent (an `unknown` would say the charge may have happened): the
    # gateway checks the worker's word with the capability's reconciliation read (the
    # sweep, or the next claim) and, nothing found, the next claim executes at once.
    assert record["state"] == "not_applied" or (record["state"] == "unknown" and record["not_sent_reported"]), record
    assert stack.charges("A-1001") == []

    sandbox_run = run_example(stack, sandbox_form, tmp_path, "sandbox_form.py")
    assert sandbox_run.returncode == 0, sandbox_run.stderr
    charges = stack.charges("A-1001")
    assert len(charges) == 1, charges
    assert sandbox_run.stdout.strip() == f"charged once: {charges[0]['id']}"
    assert stack.intent(key)["state"] == "applied"
