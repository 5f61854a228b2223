"""The reliability ledger: what the suite proved, summed over every test process.

Tests add to ``LEDGER``; under pytest-xdist each worker sends its counts to
the controller when it ends (``tests/conftest.py``), which prints the sum.
"""

from __future__ import annotations

import threading

import attrs


@attrs.define
class Ledger:
    """What the suite checked, for RELIABILITY.md."""

    scenarios: int = 0
    runs: int = 0
    leases: int = 0
    bytes_checked: int = 0
    leaks: int = 0
    lost: int = 0
    texts_scanned: int = 0
    secrets_found: int = 0
    examples: int = 0
    throttled_answers: int = 0
    surfaced_429: int = 0
    lock: threading.Lock = attrs.field(factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def counts(self) -> dict[str, int]:
        with self.lock:
            return {k: v for k, v in attrs.asdict(self).items() if k != "lock"}

    def lines(self) -> list[str]:
        return [
            f"fault scenarios run: {self.scenarios}",
            f"leases opened: {self.leases}",
            f"commands run: {self.runs}",
            f"output and file bytes compared by checksum: {self.bytes_checked}",
            f"property-based examples on real processes: {self.examples}",
            f"messages, reprs, notes and log records scanned for secrets: {self.texts_scanned}",
            f"429 answers from the emulator under load: {self.throttled_answers}",
            f"429 surfaced to callers: {self.surfaced_429}",
            f"leaks found: {self.leaks}",
            f"outputs lost or duplicated: {self.lost}",
            f"secrets found: {self.secrets_found}",
        ]


LEDGER = Ledger()
