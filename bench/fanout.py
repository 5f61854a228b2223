"""Fan-out under the rate limit: ``cs.map`` over many items, and processes sharing one budget.

The emulator runs in its own process with its rate limit on (300 requests
per minute per client address, 429 with Retry-After past it, as the
service). Clients are left at their defaults: 300 per minute, machine-wide
budget, kept in a state directory of this run's own.

1. ``cs.map`` over ``--items`` items (each ``box.run("echo N")`` in a sandbox
   of its own, concurrency 8): total requests, requests per item, 429s the
   emulator answered (retried by the SDK) and 429s surfaced to the caller
   (goal 0), wall time against the limit's floor: (requests - 300) / 5 s,
   since a fresh window admits 300 at once and 5 per second after that.
2. ``--processes`` processes, each one lease doing ``--runs`` runs at once:
   more than a minute's budget together. With the machine-wide budget (the
   default) the emulator should answer no 429; the same with
   ``rate_scope="process"`` is shown for contrast (``--no-contrast`` skips it).

Takes minutes by design (the rate limit).

    python bench/fanout.py [--items 200] [--processes 3] [--runs 45] [--no-contrast]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from _common import EmulatorProcess, heading, machine

import createos_sync as cs

FRESH_WINDOW = 300
PER_SECOND = 5.0


def statuses(logged: list[dict[str, Any]]) -> collections.Counter[int | None]:
    return collections.Counter(r["status"] for r in logged)


def floor(requests: int) -> float:
    return max(0, requests - FRESH_WINDOW) / PER_SECOND


def fan_out(items: int) -> dict[str, Any]:
    heading(f"Fan-out: cs.map over {items} items, concurrency 8, emulator rate limit on")
    with EmulatorProcess(rate_limit=True) as emu, emu.client(timeout=1800) as client:
        print(f"setup: {emu.setup}; client at its defaults (300/min, machine-wide); {machine()}")
        before = len(emu.requests())
        started = time.perf_counter()
        results = cs.map(
            lambda box, n: box.run(f"echo {n}").stdout,
            range(items),
            client=client,
            return_exceptions=True,
            progress=False,
        )
        wall = time.perf_counter() - started
        logged = emu.requests()[before:]
    counted = statuses(logged)
    surfaced = sum(isinstance(r, cs.CreateosApiError) and r.status == 429 for r in results)
    other = collections.Counter(type(r).__name__ for r in results if isinstance(r, Exception))
    correct = sum(r == f"{n}\n" for n, r in enumerate(results))
    figures = {
        "requests": len(logged),
        "per item": len(logged) / items,
        "429 answered": counted[429],
        "429 surfaced": surfaced,
        "wall": wall,
        "floor": floor(len(logged)),
    }
    print(f"requests: {len(logged)} ({figures['per item']:.2f} per item); statuses {dict(counted)}")
    print(f"429 answered by the emulator: {counted[429]}; surfaced to the caller: {surfaced}")
    print(f"other errors: {dict(other) or 'none'}; correct results: {correct}/{items}")
    print(
        f"wall {wall:.1f} s; the limit's floor (requests - 300) / 5 = {figures['floor']:.1f} s "
        f"(all requests / 5 = {len(logged) / PER_SECOND:.1f} s); "
        f"ratio to the floor {wall / figures['floor']:.2f}"
        if figures["floor"]
        else f"wall {wall:.1f} s (under one window: no floor)"
    )
    return figures


CHILD = """
import json, sys, createos_sync as cs
url, key, runs, scope = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
surfaced = 0
with cs.Client(key, url, timeout=1800, rate_scope=scope) as client, client.lease() as box:
    print("ready", flush=True)
    sys.stdin.readline()  # all start together
    for i in range(runs):
        try:
            box.run(f"echo {i}").check()
        except cs.CreateosApiError as exc:
            surfaced += exc.status == 429
print(json.dumps({"surfaced": surfaced}))
"""


def processes(count: int, runs: int, scope: str) -> dict[str, Any]:
    heading(f"Shared budget: {count} processes x {runs} runs at once, rate_scope={scope!r}")
    with EmulatorProcess(rate_limit=True) as emu:
        print(f"setup: {emu.setup}; {count} client processes; {machine()}")
        before = len(emu.requests())
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD, emu.url, emu.api_key, str(runs), scope],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(count)
        ]
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        started = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = [proc.communicate(timeout=1800)[0] for proc in procs]
        wall = time.perf_counter() - started
        logged = emu.requests()[before:]
    surfaced = sum(json.loads(out.strip().splitlines()[-1])["surfaced"] for out in outputs)
    counted = statuses(logged)
    print(f"requests: {len(logged)}; statuses {dict(counted)}")
    print(f"429 answered by the emulator: {counted[429]}; surfaced: {surfaced}; wall {wall:.1f} s")
    return {"requests": len(logged), "429 answered": counted[429], "surfaced": surfaced}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--runs", type=int, default=45)
    parser.add_argument("--no-contrast", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        os.environ["CREATEOS_SYNC_STATE_DIR"] = state  # this run's own machine budget
        fan_out(args.items)  # each section has an emulator (a rate limiter) of its own
        processes(args.processes, args.runs, "machine")
        if not args.no_contrast:
            processes(args.processes, args.runs, "process")


if __name__ == "__main__":
    main()
