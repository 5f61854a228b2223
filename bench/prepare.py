"""Prepare once, start many: the time to a usable lease, three ways.

- fresh: a new sandbox, then the setup script (``python3 -m venv``, which
  installs pip into a new environment: a few seconds of real work);
- fork: a fork of a sandbox prepared once with the same script, then paused;
- template: a lease on a template whose ``RUN`` step ran the same script.

"Usable" means ``open()`` has returned and a probe command found the
installed environment. The three run in rounds, their order rotating; the
request log of the (separate-process) emulator gives each path's request
count, so that the fork path can be checked against "one creation plus polls".

    python bench/prepare.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from _common import EmulatorProcess, Stats, counted, heading, machine

import createos_sync as cs

SETUP = "python3 -m venv /workspace/env && /workspace/env/bin/python -m pip --version"
PROBE = "test -x /workspace/env/bin/pip"
DOCKERFILE = f"FROM ubuntu:24.04\nRUN {SETUP}\n"


def _timed(
    emu: EmulatorProcess, action: Callable[[], cs.Lease], setup: bool
) -> tuple[float, int, cs.Lease]:
    """Seconds to a usable lease, and the requests its opening cost."""
    started = time.perf_counter()
    with counted(emu) as logged:
        lease = action()
    if setup:
        lease.run(SETUP, check=True)
    lease.run(PROBE, check=True)
    return time.perf_counter() - started, len(logged), lease


def measure(rounds: int) -> dict[str, Any]:
    heading("Prepare once, start many: time to a usable lease")
    with EmulatorProcess() as emu, emu.client(requests_per_minute=10**6) as client:
        print(f"setup: {emu.setup}; client in this process; {machine()}")
        print(f"setup script: {SETUP}")
        started = time.perf_counter()
        template = client.build_template("bench-prepared", DOCKERFILE)
        build_seconds = time.perf_counter() - started
        prepared = client.lease().open()
        prepared.run(SETUP, check=True)
        prepared.pause()
        ways: dict[str, tuple[Callable[[], cs.Lease], bool]] = {
            "fresh + setup": (lambda: client.lease().open(), True),
            "fork of prepared": (lambda: prepared.fork(), False),
            "lease on template": (lambda: client.lease(rootfs=template.id).open(), False),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        requests: dict[str, int] = {}
        names = list(ways)
        for round_ in range(rounds):
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                action, setup = ways[name]
                seconds, opening, lease = _timed(emu, action, setup)
                times[name].append(seconds)
                requests[name] = max(requests.get(name, 0), opening)
                lease.close()
        prepared.close()
        client.delete_template(template.id)
    return _report(times, requests, build_seconds)


def _report(
    times: dict[str, list[float]], requests: dict[str, int], build_seconds: float
) -> dict[str, Any]:
    stats = {name: Stats(values) for name, values in times.items()}
    print(f"template build (once, not in the figures): {build_seconds:.2f} s")
    width = max(len(name) for name in stats)
    for name, s in stats.items():
        print(f"  {name:<{width}}  {s.describe('s')}  opening: {requests[name]} requests")
    fresh = stats["fresh + setup"].median
    for name in ("fork of prepared", "lease on template"):
        print(f"  fresh + setup / {name}: {fresh / stats[name].median:.1f}x")
    print("  (opening: at most, over the rounds: 1 creation or fork plus status polls;")
    print("   then each run() costs 3 requests: the setup script and the probe)")
    return {"stats": stats, "requests": requests, "build_seconds": build_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    measure(parser.parse_args().rounds)


if __name__ == "__main__":
    main()
