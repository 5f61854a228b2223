"""Concurrency: many leases in threads on one client, with the emulator's rate limit on.

16 threads each open a lease on one shared ``Client`` and do 20 runs (the
full mode takes minutes by design: about 1,000 requests at 300 per minute).
The emulator runs in its own process with its rate limit on (300 requests
per minute per client address, 429 with Retry-After past it); the client's
pacer is left at its default (300 per minute). Reported: wall time, the
requests the emulator logged, the 429s it answered (retried by the SDK),
the 429s surfaced to the caller (target 0), other errors, and whether every
output was right.

    python bench/concurrency.py [--quick] [--leases 16] [--runs 20]
"""

from __future__ import annotations

import argparse
import collections
import threading
import time
from typing import Any

from _common import EmulatorProcess, Stats, heading, machine

import createos_sync as cs


def measure(leases: int, runs: int, mode: str) -> dict[str, Any]:
    heading(f"5. Concurrency: {leases} leases x {runs} runs in threads, one client ({mode} mode)")
    errors: collections.Counter[str] = collections.Counter()
    surfaced_429 = 0
    correct = 0
    durations: list[float] = []
    lock = threading.Lock()
    with EmulatorProcess(rate_limit=True) as emu, emu.client(timeout=900) as client:
        print(f"setup: {emu.setup}; client in this process, pacer at its default; {machine()}")
        before = len(emu.requests())

        def worker(index: int) -> None:
            nonlocal surfaced_429, correct
            try:
                with client.lease() as box:
                    for j in range(runs):
                        started = time.perf_counter()
                        result = box.run(f"echo {index}-{j}")
                        took = time.perf_counter() - started
                        with lock:
                            durations.append(took)
                            correct += result.ok and result.stdout == f"{index}-{j}\n"
            except Exception as exc:
                with lock:
                    if isinstance(exc, cs.CreateosApiError) and exc.status == 429:
                        surfaced_429 += 1
                    errors[type(exc).__name__] += 1

        started = time.perf_counter()
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(leases)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - started
        logged = emu.requests()[before:]
        leaked = emu.state()
    statuses = collections.Counter(r["status"] for r in logged)
    answered_429 = statuses.get(429, 0)
    per_minute = len(logged) / wall * 60
    print(f"- wall time          {wall:.1f} s")
    print(f"- requests logged    {len(logged)} ({per_minute:.0f} per minute; limit 300)")
    print(f"- 429 answered       {answered_429} (retried by the SDK after Retry-After)")
    print(f"- 429 surfaced       {surfaced_429} (target 0)")
    print(f"- other errors       {dict(errors) or 0}")
    print(f"- correct outputs    {correct} of {leases * runs}")
    print(f"- left on emulator   {len(leaked['sandboxes'])} sandboxes, "
          f"{len(leaked['processes'])} processes")  # fmt: skip
    if durations:
        print(f"- one run() took     {Stats(durations).describe('s')}")
    return {
        "mode": mode, "wall_s": wall, "requests": len(logged), "answered_429": answered_429,
        "surfaced_429": surfaced_429, "errors": dict(errors), "correct": correct,
        "expected": leases * runs,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 leases x 3 runs (development)")
    parser.add_argument("--leases", type=int, default=16)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    if args.quick:
        measure(4, 3, "quick")
    else:
        measure(args.leases, args.runs, "full")


if __name__ == "__main__":
    main()
