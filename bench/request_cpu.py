"""The client's CPU time per ``Lease.run("true")`` in an open lease (the command session).

On a real network the client's CPU time is on the critical path of every
command: one ``POST .../input`` request is built, sent and its answer parsed,
then the end records are read from the already attached stream. This script
runs ``run("true")`` over and over against the emulator in its own process
(so the figures are the client's alone: ``getrusage`` of this process; the
request budget is the machine's, as by default, but too large to wait on) and
prints the CPU time per run, user and kernel apart, in rounds; and the CPU
time of the calling thread alone (the critical path: the client's other
threads, such as the cutoff alarm, run beside it on another core).

CPU time is noisy on a shared machine; ``--callgrind`` also counts the
client's instructions per run under valgrind (the emulator is a child
process valgrind does not follow): the difference between a run of
``--calls`` and one of twice as many, so start-up cancels out.

    python bench/request_cpu.py [--rounds 7] [--calls 200] [--callgrind] [--src DIR]

``--src DIR`` measures another copy of ``createos_sync`` (for example the
previous commit, ``git archive HEAD~1 createos_sync | tar -x -C DIR``).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

WARM_UP = 20


def run_calls(calls: int, rounds: int) -> list[tuple[float, float, float, float]]:
    """Per round: (user s, kernel s, wall s, the calling thread's CPU s) per run."""
    from _common import EmulatorProcess

    results = []
    with (
        EmulatorProcess() as emu,
        emu.client(requests_per_minute=10**6) as client,
        client.lease() as box,
    ):
        for _ in range(WARM_UP):
            box.run("true")
        for _ in range(rounds):
            before, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            thread = time.thread_time()
            for _ in range(calls):
                box.run("true")
            thread = time.thread_time() - thread
            wall = time.perf_counter() - wall
            after = resource.getrusage(resource.RUSAGE_SELF)
            results.append(
                (
                    (after.ru_utime - before.ru_utime) / calls,
                    (after.ru_stime - before.ru_stime) / calls,
                    wall / calls,
                    thread / calls,
                )
            )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200, help="runs per round")
    parser.add_argument("--callgrind", action="store_true", help="also count instructions")
    parser.add_argument("--callgrind-calls", type=int, default=50)
    parser.add_argument("--src", help="import createos_sync from this directory")
    parser.add_argument("--once", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.src:
        sys.path.insert(0, os.path.abspath(args.src))
    if args.once is not None:
        run_calls(args.once, 1)
        return
    measure(args.rounds, args.calls, args.callgrind, args.callgrind_calls, args.src)


def measure(
    rounds: int, calls: int, with_callgrind: bool, callgrind_calls: int, src: str | None
) -> dict[str, Any]:
    from _common import Stats, callgrind, heading, machine

    import createos_sync

    heading('Client CPU per run("true") in an open lease (command session, emulator)')
    print(f"createos_sync from {Path(createos_sync.__file__).parent}; {machine()}")
    print(f"method: getrusage of this process over {calls} runs a round, {rounds} rounds")
    usage = run_calls(calls, rounds)
    cpu = Stats([user + kernel for user, kernel, _, _ in usage])
    user = Stats([u for u, _, _, _ in usage]).median
    kernel = Stats([k for _, k, _, _ in usage]).median
    wall = Stats([w for _, _, w, _ in usage])
    thread = Stats([t for _, _, _, t in usage])
    print(f"- CPU  {cpu.describe('ms / run', 1000, 3)}")
    print(f"    user {user * 1000:.3f} ms, kernel {kernel * 1000:.3f} ms")
    print(f"    of which the calling thread {thread.describe('ms / run', 1000, 3)}")
    print(f"- wall {wall.describe('ms / run', 1000, 3)}")
    print(f"- load average after: {os.getloadavg()[0]:.2f}")
    results: dict[str, Any] = {
        "cpu_ms": cpu.median * 1000,
        "thread_cpu_ms": thread.median * 1000,
        "wall_ms": wall.median * 1000,
    }
    if with_callgrind:
        once = callgrind(__file__, ["--once", str(callgrind_calls)], src)
        twice = callgrind(__file__, ["--once", str(2 * callgrind_calls)], src)
        per_run = (twice - once) / callgrind_calls
        results["instructions_per_run"] = per_run
        print(
            f"- {per_run / 1e6:.2f} M instructions / run (callgrind, "
            f"{2 * callgrind_calls} runs minus {callgrind_calls})"
        )
    return results


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
