"""mypy --strict on the typing programs: protect() keeps a KeyContext-first function's
parameters and return type, and rejects a caller-supplied key."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent.parent / "typing"
SRC = Path(__file__).resolve().parents[2] / "src"


def mypy(program: str) -> tuple[int, str]:
    pytest.importorskip("mypy")
    env = {**os.environ, "MYPYPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", program],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stdout + done.stderr


def test_good_calls_pass_mypy_strict() -> None:
    code, output = mypy("good_calls.py")
    assert code == 0, output


def test_bad_calls_fail_mypy_strict_on_each_marked_line_and_no_other() -> None:
    code, output = mypy("bad_calls.py")
    assert code != 0, output
    lines = (HERE / "bad_calls.py").read_text().splitlines()
    marked = {n for n, line in enumerate(lines, 1) if re.search(r"#\s*E:", line)}
    assert len(marked) == 7
    reported = {int(m.group(1)) for m in re.finditer(r"^bad_calls\.py:(\d+): error:", output, re.M)}
    assert reported == marked, output
