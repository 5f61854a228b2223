"""A stuck process holding the machine's budget record: how long other threads wait.

A child process takes the record's lock and is stopped (SIGSTOP, as a
debugger would), then 4 threads of this process send at once, with an
operation deadline of 300 s and of 2 s. Printed: when each send left (seconds
after the start) and the warnings logged. Offline, about 10 s.

    python bench/stall.py
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import heading, machine

from createos_sync._wire.budget import BudgetRecord, _LockedFile, record_path
from createos_sync._wire.deadline import Deadline
from createos_sync._wire.pacer import WINDOW_SECONDS, MachinePacer

FORK = multiprocessing.get_context("fork")
THREADS = 4


def _hold(path: str, held: Any) -> None:
    with _LockedFile(Path(path), patience=5.0):
        held.set()
        time.sleep(600)


def stalled_sends(deadline: float) -> tuple[list[float], list[str]]:
    """When each thread's send left, and what failed."""
    with tempfile.TemporaryDirectory() as directory:
        path = record_path(Path(directory), "https://api.example", WINDOW_SECONDS)
        path.parent.mkdir(parents=True)
        held = FORK.Event()
        holder = FORK.Process(target=_hold, args=(str(path), held))
        holder.start()
        try:
            assert held.wait(30)
            os.kill(holder.pid, signal.SIGSTOP)  # type: ignore[arg-type]
            pacer = MachinePacer(300, BudgetRecord(path, WINDOW_SECONDS))
            started = time.monotonic()
            left: list[float] = []
            failed: list[str] = []

            def send() -> None:
                try:
                    pacer.acquire(Deadline.after(deadline))
                    left.append(time.monotonic() - started)
                except Exception as exc:  # reported
                    failed.append(type(exc).__name__)

            threads = [threading.Thread(target=send) for _ in range(THREADS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            holder.kill()
            holder.join()
    return sorted(left), failed


def main() -> None:
    heading(f"{THREADS} threads sending while another process holds the budget record, stopped")
    print(machine())
    warnings: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("createos_sync").addHandler(handler)
    for deadline in (300.0, 2.0):
        warnings.clear()
        left, failed = stalled_sends(deadline)
        print(
            f"deadline {deadline:g} s: sends left after {', '.join(f'{s:.1f}' for s in left)} s; "
            f"failed: {failed or 'none'}; warnings: {len(warnings)}"
        )


if __name__ == "__main__":
    main()
