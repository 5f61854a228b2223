"""Deadlines: an operation's budget, measured on a monotonic clock."""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs

Clock = Callable[[], float]


@attrs.frozen
class Deadline:
    """The moment an operation must be finished by, and the budget it started with."""

    expires_at: float
    seconds: float
    clock: Clock = attrs.field(default=time.monotonic, repr=False, eq=False)

    @classmethod
    def after(cls, seconds: float, clock: Clock = time.monotonic) -> Deadline:
        """A deadline ``seconds`` from now."""
        return cls(clock() + seconds, seconds, clock)

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.expires_at - self.clock())

    def expired(self) -> bool:
        """True once no time is left."""
        return self.clock() >= self.expires_at
