"""Waiting for a condition in tests: poll, never sleep a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_until(predicate: Callable[[], Any], what: str = "condition", timeout: float = 20.0) -> Any:
    """Poll ``predicate`` until it is truthy and return its value; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)
