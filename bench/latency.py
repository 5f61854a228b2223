"""Latency of a small ``run()`` as a ratio to the floor (and to the official SDK).

All variants do the same managed-process run of ``echo hello`` with the same
start-gated wrapper on one sandbox of one separate-process emulator, in
rounds, their order rotating every round:

- ``run()``: ``Lease.run("echo hello")``;
- floor: raw ``requests`` (create, connect, stdin/close, read to the exit frame);
- official: the official ``createos-sandbox`` SDK's ``processes.create /
  connect / close_standard_input`` (when installed).

The process start (bash, and bubblewrap when the emulator isolates) is in
every variant alike; the ratio shows what the SDK adds on top.

    python bench/latency.py [--rounds 40]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import _official
from _common import EmulatorProcess, Stats, cpu_and_wall, heading, machine, paired_ratio
from _workloads import Counter, RawFloor, gated_wrapper

COMMAND = "echo hello"


def measure(rounds: int) -> dict[str, Any]:
    heading(f'2. Latency of a small run() ("{COMMAND}") vs the floor')
    with EmulatorProcess() as emu, emu.client() as client, client.lease() as box:
        print(f"setup: {emu.setup}; client in this process; {machine()}")
        assert box.id is not None
        floor = RawFloor(emu.url, emu.api_key, box.id)
        official = (
            _official.OfficialRun(emu.url, emu.api_key, box.id) if _official.createos else None
        )
        wrapper = gated_wrapper(COMMAND)

        def sdk() -> None:
            assert box.run(COMMAND).stdout == "hello\n"

        def raw() -> None:
            counter = Counter()
            floor.run(wrapper, counter)
            assert counter.chars["stdout"] == 6

        def official_run() -> None:
            assert official is not None
            counter = Counter()
            official.run(wrapper, counter)
            assert counter.chars["stdout"] == 6

        variants: dict[str, Callable[[], None]] = {"floor (raw requests)": raw, "run()": sdk}
        if official is not None:
            variants["official SDK"] = official_run
        for action in variants.values():
            action()  # warm up: connections, imports
        wall: dict[str, list[float]] = {n: [] for n in variants}
        cpu: dict[str, list[float]] = {n: [] for n in variants}
        names = list(variants)
        for i in range(rounds):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                c, w, _ = cpu_and_wall(variants[name])
                wall[name].append(w)
                cpu[name].append(c)
        floor.close()
        if official is not None:
            official.close()
    print(
        f"method: {rounds} rounds, order rotating; wall time per run; ratios are of "
        "interleaved pairs (median and IQR)"
    )
    results: dict[str, Any] = {}
    base = "floor (raw requests)"
    for name in variants:
        w, c = Stats(wall[name]), Stats(cpu[name])
        print(f"- {name}")
        print(f"    wall            {w.describe('ms', 1000, 1)}")
        print(f"    client CPU      {c.describe('ms', 1000, 1)}")
        results[name] = {"wall_ms": w.median * 1000, "cpu_ms": c.median * 1000}
        if name != base:
            r = paired_ratio(wall[name], wall[base])
            print(
                f"    vs floor        {r.median:.3f}x (IQR {r.q1:.3f}-{r.q3:.3f}); target <= 1.10x"
            )
            results[name]["ratio"] = r.median
    if official is not None:
        r = paired_ratio(wall["run()"], wall["official SDK"])
        print(f"- run() vs official SDK: {r.median:.3f}x of its time (IQR {r.q1:.3f}-{r.q3:.3f})")
    else:
        print(f"- official SDK: not measured ({_official.IMPORT_ERROR})")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    measure(parser.parse_args().rounds)


if __name__ == "__main__":
    main()
