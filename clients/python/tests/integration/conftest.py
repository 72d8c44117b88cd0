"""Fixtures of the integration tests: a real sandbox and gateway per test.

A test that fails prints both processes' log tails, since what the gateway decided is
usually the explanation.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ogharness import HarnessError, Stack, oncegate_bin, start_stack

# No binary, no run: a missing gateway is a broken setup, never a reason to skip. Checked
# when this directory is collected, so the whole session stops with the reason.
try:
    oncegate_bin()
except HarnessError as error:
    pytest.exit(f"integration tests: {error}", returncode=3)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """Keeps each phase's report on the item, so a fixture can tell that its test failed."""
    report = yield
    setattr(item, f"og_report_{call.when}", report)
    return report


@pytest.fixture
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    """A fresh sandbox and gateway, stopped after the test (logs shown if it failed)."""
    s = start_stack(tmp_path / "oncegate")
    try:
        yield s
    finally:
        s.stop()
        report = getattr(request.node, "og_report_call", None)
        if report is not None and report.failed:
            print(s.logs())
