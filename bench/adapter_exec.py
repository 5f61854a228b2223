"""The adapters' ``exec`` (Inspect, Harbor, OpenAI Agents): requests and latency per command.

Both variants run from an asyncio event loop through ``integrations._threads``,
on one open lease of a separate-process emulator, in rounds whose order
rotates:

- session: today's ``_threads.run``, ``Lease.run(..., cancel=...)`` in a worker
  thread (the lease's command session: one input request per command);
- managed: the previous ``_threads.run``, kept here to compare with: a
  managed process started shielded (stdin staged, create, output stream,
  start gate), then ``Process.wait`` in a worker thread.

Each is measured without stdin and with a small stdin, then cancelled
mid-command (a ``sleep`` with a ``setsid`` child): the seconds from the
cancellation to its propagation, the tree ended and confirmed first.

    python bench/adapter_exec.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from _common import EmulatorProcess, Stats, counted, heading, machine, paired_ratio

import createos_sync as cs
from createos_sync.integrations import _threads

Exec = Callable[..., Awaitable[cs.RunResult[str]]]


async def managed(
    lease: cs.Lease, argv: str, *, timeout: float, stdin: bytes = b""
) -> cs.RunResult[str]:
    """The adapters' exec before this change (``_threads.run`` as it was)."""
    process = await _threads.shielded(lease.start, argv, stdin=stdin)
    try:
        return await _threads.call(process.wait, timeout)
    except BaseException:
        await _threads.shielded(process.terminate)
        raise


VARIANTS: dict[str, Exec] = {"session": _threads.run, "managed": managed}
MARK = 987654  # a sleep no other program on the machine runs
CASES = {"echo hello": {}, "cat, stdin 1 KiB": {"stdin": b"x" * 1024}}


def sleepers() -> int:
    """Host processes still running ``sleep MARK`` (the emulator's sandboxes are local)."""
    count = 0
    for proc in Path("/proc").iterdir():
        try:
            count += (proc / "cmdline").read_bytes() == f"sleep\x00{MARK}\x00".encode()
        except OSError:
            continue
    return count


async def once(variant: Exec, box: cs.Lease, case: str) -> float:
    argv = "cat" if "stdin" in case else case
    started = time.perf_counter()
    result = await variant(box, argv, timeout=60, **CASES[case])
    took = time.perf_counter() - started
    assert result.exit_code == 0, result
    return took


async def cancelled(variant: Exec, box: cs.Lease) -> float:
    """Seconds from cancelling a running exec to the cancellation's propagation."""
    at: list[float] = []
    async with anyio.create_task_group() as group:

        async def running() -> None:
            try:
                await variant(box, f"setsid sleep {MARK} & sleep {MARK}", timeout=600)
            finally:
                at.append(time.perf_counter())

        group.start_soon(running)
        await anyio.sleep(0.5)
        cancel_at = time.perf_counter()
        group.cancel_scope.cancel()
    return at[0] - cancel_at


def measure(rounds: int) -> dict[str, Any]:
    heading("The adapters' exec: requests and loopback latency per command")
    results: dict[str, Any] = {}
    # No client-side budget: at the default 300 requests a minute the managed variant
    # (4 per exec) would wait for the budget about once every 75 execs, which is the
    # budget's cost, not the latency measured here.
    unpaced = {"requests_per_minute": 1_000_000, "rate_scope": "process"}
    with EmulatorProcess() as emu, emu.client(**unpaced) as client, client.lease() as box:
        print(f"setup: {emu.setup}; asyncio, client in this process, unpaced; {machine()}")
        anyio.run(once, _threads.run, box, "echo hello")  # the session's start

        for case in CASES:
            for name, variant in VARIANTS.items():
                with counted(emu) as logged:
                    anyio.run(once, variant, box, case)
                ops = [r["operation"] for r in logged]
                print(f"- requests, {case}, {name}: {len(ops)} ({', '.join(ops)})")
                results[f"requests {case} {name}"] = len(ops)

        for case in CASES:
            wall: dict[str, list[float]] = {name: [] for name in VARIANTS}
            names = list(VARIANTS)
            for i in range(rounds):
                for name in names[i % 2 :] + names[: i % 2]:
                    wall[name].append(anyio.run(once, VARIANTS[name], box, case))
            for name in VARIANTS:
                s = Stats(wall[name])
                print(f"- latency, {case}, {name}: {s.describe('ms', 1000, 2)}")
                results[f"ms {case} {name}"] = s.median * 1000
            r = paired_ratio(wall["session"], wall["managed"])
            print(f"  session / managed: {r.median:.3f}x (IQR {r.q1:.3f}-{r.q3:.3f})")

        for name, variant in VARIANTS.items():
            took, left = [], 0
            for _ in range(3):
                took.append(anyio.run(cancelled, variant, box))
                left += sleepers()  # at once: the tree was confirmed gone before
            print(
                f"- cancellation to propagation, {name}: "
                f"{', '.join(f'{t * 1000:.0f}' for t in took)} ms; sleeps left running: {left}"
            )
            results[f"cancel ms {name}"] = sorted(took)[1] * 1000
    print(f"method: {rounds} rounds per case, order rotating; medians (IQR)")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    measure(parser.parse_args().rounds)


if __name__ == "__main__":
    main()
