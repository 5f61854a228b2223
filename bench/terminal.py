"""What typing into a remote terminal costs: requests per minute, and keystroke round trip.

- Cost of a minute of typing (simulated, instant): keystrokes at a steady
  rate go through ``createos_sync.cli._keystrokes.Batcher``, the policy that
  ``createos-sync shell`` uses, with simulated time; each request is in
  flight for a given round-trip time, during which keys accumulate.
- The same check for real (``--real-seconds``, default 15): keystrokes at 5
  per second through the shell's ``Typist`` into a terminal process (``cat``)
  on a separate-process emulator; the emulator's request log counts the
  input requests.
- Keystroke round trip on the emulator: one key typed through the
  ``Typist`` after a pause, until its echo comes back on the output stream
  (the terminal echoes it); keys half a second apart, so pacing never holds
  one back.

    python bench/terminal.py [--keys 40] [--real-seconds 15]
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

from _common import EmulatorProcess, Stats, counted, heading, machine

from createos_sync.cli._keystrokes import BURST, RATE, Batcher, Typist

STEP = 0.001  # simulated clock resolution, seconds


def simulate(keys_per_second: float, seconds: float, round_trip: float) -> dict[str, float]:
    """Requests the batching sends for steady typing, and how long keys wait to leave."""
    batcher = Batcher(now=0.0)
    interval = 1 / keys_per_second
    next_key, busy_until, requests, typed = 0.0, 0.0, 0, 0
    waiting: list[float] = []  # when each key not yet sent was typed
    delays: list[float] = []
    now = 0.0
    while now < seconds:
        while next_key <= now and next_key < seconds:
            batcher.type(b"k")
            waiting.append(next_key)
            typed += 1
            next_key += interval
        if now >= busy_until and batcher.pending and batcher.delay(now) == 0.0:
            batcher.take(now)
            requests += 1
            delays += [now - t for t in waiting]
            waiting.clear()
            busy_until = now + round_trip
        now += STEP
    return {
        "keys": typed,
        "requests": requests,
        "median_wait_ms": Stats(delays).median * 1000,
        "max_wait_ms": max(delays) * 1000,
    }


def simulated_minute() -> dict[str, Any]:
    heading("Terminals 1. Requests for a minute of typing (simulated, same batching code)")
    print(f"policy: a burst of {BURST:g} requests, then at most {RATE:g} per second; keys that")
    print("arrive while a request is in flight or held back go together in the next one")
    print("| typing | round trip | keys | requests | keys per request | key wait median / max |")
    print("|---|---|---|---|---|---|")
    results = {}
    for rate in (5.0, 2.0, 10.0):
        for rtt in (0.005, 0.05, 0.15):
            r = simulate(rate, 60.0, rtt)
            results[(rate, rtt)] = r
            print(
                f"| {rate:g} keys/s | {rtt * 1000:g} ms | {r['keys']:g} | {r['requests']:g} | "
                f"{r['keys'] / r['requests']:.1f} | {r['median_wait_ms']:.0f} / "
                f"{r['max_wait_ms']:.0f} ms |"
            )
    return {"5/s 5ms": results[(5.0, 0.005)]["requests"]}


def real_typing(emu: EmulatorProcess, seconds: float) -> dict[str, Any]:
    heading(f"Terminals 2. {seconds:g} s of typing at 5 keys/s into `cat`, for real")
    with emu.client() as client, client.lease() as box:
        process = box.start("cat > /dev/null", pty=True, max_output=0)
        typist = Typist(process.send, process.resize)
        with counted(emu) as logged:
            started = time.monotonic()
            for i in range(int(seconds * 5)):
                time.sleep(max(0.0, started + i * 0.2 - time.monotonic()))
                typist.type(b"k")
            time.sleep(1.0)  # let the last batch leave
            typist.close(timeout=10)
        process.kill()
    inputs = [r for r in logged if r.get("operation") == "process.input"]
    expected = simulate(5.0, seconds, 0.005)["requests"]
    print(
        f"keys typed: {int(seconds * 5)}; input requests: {len(inputs)} "
        f"(simulation with a 5 ms round trip: {expected:g}); typist counted {typist.requests}"
    )
    return {"requests": len(inputs), "simulated": expected}


def round_trip(emu: EmulatorProcess, keys: int) -> dict[str, Any]:
    heading("Terminals 3. Keystroke round trip on the emulator (type -> echo)")
    echoed = threading.Event()
    seen: list[str] = []

    def on_output(stream: str, text: str) -> None:
        seen.append(text)
        echoed.set()

    times: list[float] = []
    with emu.client() as client, client.lease() as box:
        process = box.start("cat > /dev/null", pty=True, on_output=on_output, max_output=0)
        typist = Typist(process.send, process.resize)
        for i in range(keys + 1):
            time.sleep(0.5)  # a pause: the bucket is full, nothing holds the key back
            echoed.clear()
            begun = time.perf_counter()
            typist.type(b"abcdefghijklmnopqrstuvwxyz"[i % 26 : i % 26 + 1])
            if not echoed.wait(10):
                raise RuntimeError("no echo within 10 s")
            if i:  # the first one warms the connection up
                times.append(time.perf_counter() - begun)
        typist.close(timeout=10)
        process.kill()
    stats = Stats(times)
    print(f"setup: {emu.setup}; {machine()}")
    print(f"round trip, typed key to echo: {stats.describe('ms', 1000, 1)}")
    return {"median_ms": stats.median * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=40)
    parser.add_argument("--real-seconds", type=float, default=15.0)
    args = parser.parse_args()
    simulated_minute()
    with EmulatorProcess() as emu:
        real_typing(emu, args.real_seconds)
        round_trip(emu, args.keys)


if __name__ == "__main__":
    main()
