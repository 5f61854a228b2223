"""The machine-wide request budget's cost: microseconds per request added by the shared record.

Offline (no HTTP): ``acquire()`` of the in-process pacer (``rate_scope="process"``)
against the machine-wide one (the default: open, lock, read, update, write
and close the record in the state directory), with a limit high enough that
nothing ever waits, so only the bookkeeping is timed. Then the same with
several processes taking from one record at once (contention for its lock).
Goal: well under a millisecond per request.

    python bench/pacer.py [--count 20000] [--processes 4]
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from pathlib import Path

from _common import Stats, heading, machine

from createos_sync._wire.budget import BudgetRecord, record_path
from createos_sync._wire.pacer import WINDOW_SECONDS, MachinePacer, Pacer

URL = "https://api.example"
LIMIT = 10**9


def _machine_pacer(directory: str) -> MachinePacer:
    path = record_path(Path(directory), URL, WINDOW_SECONDS)
    return MachinePacer(LIMIT, BudgetRecord(path, WINDOW_SECONDS))


def per_acquire(pacer: Pacer, count: int) -> float:
    """Seconds per ``acquire()``, over ``count`` calls."""
    started = time.perf_counter()
    for _ in range(count):
        pacer.acquire()
    return (time.perf_counter() - started) / count


def _contend(directory: str, count: int, out: multiprocessing.Queue[float]) -> None:
    out.put(per_acquire(_machine_pacer(directory), count))


def measure(count: int, processes: int) -> dict[str, Stats]:
    heading("Machine-wide request budget: overhead per request (offline)")
    print(f"method: {count} acquire() calls, limit {LIMIT} (never waits), 5 rounds; {machine()}")
    results: dict[str, Stats] = {}
    with tempfile.TemporaryDirectory() as directory:
        rounds: dict[str, list[float]] = {"process pacer": [], "machine pacer": []}
        for _ in range(5):
            rounds["process pacer"].append(per_acquire(Pacer(LIMIT), count))
            rounds["machine pacer"].append(per_acquire(_machine_pacer(directory), count))
        fork = multiprocessing.get_context("fork")
        out = fork.Queue()
        workers = [
            fork.Process(target=_contend, args=(directory, count, out)) for _ in range(processes)
        ]
        for worker in workers:
            worker.start()
        rounds[f"machine pacer, {processes} processes at once"] = [
            out.get(timeout=600) for _ in workers
        ]
        for worker in workers:
            worker.join()
    for name, values in rounds.items():
        results[name] = Stats(values)
        print(f"{name:<40} {results[name].describe('us', scale=1e6, digits=1)}")
    added = results["machine pacer"].median - results["process pacer"].median
    print(f"added by the shared record: {added * 1e6:.1f} us per request (goal: well under 1000)")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--processes", type=int, default=4)
    args = parser.parse_args()
    measure(args.count, args.processes)


if __name__ == "__main__":
    main()
