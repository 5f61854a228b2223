"""Streaming throughput: a command writing ~200 MB (stdout and stderr, multi-byte UTF-8).

Compares, interleaved in one process against one emulator process:

- ``run()`` capturing (default ``max_output``),
- ``run()`` capturing everything (``max_output`` larger than the output),
- ``run()`` with an ``on_output`` callback (a cheap character counter),
- the floor: raw ``requests`` reading the same NDJSON and decoding it
  (json + base64 + incremental UTF-8), with the same counter,
- the official ``createos-sandbox`` SDK's process stream, when installed.

Figures: wall MB/s and client CPU seconds per 100 MB (``time.process_time``
of this process; the emulator and the command run in other processes).

    python bench/throughput.py [--mb 200] [--repeat 5] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from collections.abc import Callable
from typing import Any

import _official
from _common import MB, EmulatorProcess, Stats, cpu_and_wall, heading, machine, paired_ratio
from _workloads import Counter, RawFloor, gated_wrapper, generator_argv, output_bytes

CAPTURE_ALL = 1 << 30  # characters: more than any output measured here, so nothing is cut


def measure(mb: int, repeat: int, profile: bool = False) -> dict[str, Any]:
    heading(f"3. Streaming throughput: {mb} MB of mixed stdout/stderr UTF-8 through one run")
    total = mb * MB
    argv, expected = generator_argv(total)
    nbytes = output_bytes(total)
    with EmulatorProcess() as emu, emu.client(timeout=600) as client, client.lease() as box:
        print(f"setup: {emu.setup}; client in this process; {machine()}")
        assert box.id is not None
        floor = RawFloor(emu.url, emu.api_key, box.id)
        official = (
            _official.OfficialRun(emu.url, emu.api_key, box.id) if _official.createos else None
        )
        wrapper = gated_wrapper(argv)

        def sdk_capture() -> None:
            r = box.run(argv)
            assert r.exit_code == 0 and r.truncated, r
            assert len(r.stdout) == min(expected["stdout"], 4 * 1024 * 1024)

        def sdk_capture_all() -> None:
            r = box.run(argv, max_output=CAPTURE_ALL)
            assert r.exit_code == 0 and not r.truncated, r
            assert (len(r.stdout), len(r.stderr)) == (expected["stdout"], expected["stderr"])

        def sdk_callback() -> None:
            counter = Counter()
            r = box.run(argv, on_output=counter, max_output=1)
            assert r.exit_code == 0 and counter.chars == expected, (r, counter.chars)

        def floor_run() -> None:
            counter = Counter()
            floor.run(wrapper, counter)
            assert counter.chars == expected, counter.chars

        def official_run() -> None:
            assert official is not None
            counter = Counter()
            official.run(wrapper, counter)
            assert counter.chars == expected, counter.chars

        variants: dict[str, Callable[[], None]] = {
            "floor (raw requests + decode)": floor_run,
            "run() capture": sdk_capture,
            "run() capture, max_output=1 Gi": sdk_capture_all,
            "run(on_output=...)": sdk_callback,
        }
        if official is not None:
            variants["official SDK process stream"] = official_run
        if profile:
            _profile(variants["run(on_output=...)"])
            _profile(variants["floor (raw requests + decode)"])
        cpu: dict[str, list[float]] = {name: [] for name in variants}
        wall: dict[str, list[float]] = {name: [] for name in variants}
        server: dict[str, list[float]] = {name: [] for name in variants}
        for i in range(repeat):
            order = list(variants) if i % 2 == 0 else list(reversed(variants))
            for name in order:
                server_before = emu.cpu_seconds()
                c, w, _ = cpu_and_wall(variants[name])
                server[name].append(emu.cpu_seconds() - server_before)
                cpu[name].append(c)
                wall[name].append(w)
        floor.close()
        if official is not None:
            official.close()
    return _report(variants, cpu, wall, server, nbytes, official is not None)


def _report(
    variants: dict[str, Any],
    cpu: dict[str, list[float]],
    wall: dict[str, list[float]],
    server: dict[str, list[float]],
    nbytes: int,
    with_official: bool,
) -> dict[str, Any]:
    per100 = 100 * MB / nbytes
    floor_name = "floor (raw requests + decode)"
    print(f"output per run: {nbytes / MB:.1f} MB; order of variants alternates every round")
    results: dict[str, Any] = {}
    for name in variants:
        c, w = Stats(cpu[name]), Stats(wall[name])
        speed = Stats([nbytes / MB / x for x in wall[name]])
        cpu_ratio = paired_ratio(cpu[floor_name], cpu[name])
        wall_ratio = paired_ratio(wall[floor_name], wall[name])
        print(f"- {name}")
        print(f"    throughput      {speed.describe('MB/s', digits=1)}")
        client_cpu = Stats([x * per100 for x in cpu[name]])
        server_cpu = Stats([x * per100 for x in server[name]])
        print(f"    client CPU      {client_cpu.describe('s per 100 MB')}")
        print(f"    emulator CPU    {server_cpu.describe('s per 100 MB')}")
        if name != floor_name:
            print(
                f"    vs floor        speed {wall_ratio.median:.2f}x "
                f"(paired IQR {wall_ratio.q1:.2f}-{wall_ratio.q3:.2f}), "
                f"CPU efficiency {cpu_ratio.median:.2f}x "
                f"(IQR {cpu_ratio.q1:.2f}-{cpu_ratio.q3:.2f}); 1.00x = as fast as the floor"
            )
        results[name] = {"mbps": speed.median, "cpu_per_100mb": c.median * per100, "wall": w.median}
    everything, callback = "run() capture, max_output=1 Gi", "run(on_output=...)"
    speed = paired_ratio(wall[callback], wall[everything])
    cpu_ratio = paired_ratio(cpu[callback], cpu[everything])
    print(
        f"- capturing everything vs the callback path: speed {speed.median:.2f}x "
        f"(paired IQR {speed.q1:.2f}-{speed.q3:.2f}), CPU efficiency {cpu_ratio.median:.2f}x "
        f"(IQR {cpu_ratio.q1:.2f}-{cpu_ratio.q3:.2f}); target >= 0.9x"
    )
    results["capture_all_vs_callback"] = speed.median
    if not with_official:
        print(f"- official SDK: not measured ({_official.IMPORT_ERROR})")
    return results


def _profile(action: Callable[[], None]) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    action()
    profiler.disable()
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(14)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile one run of each first")
    args = parser.parse_args()
    measure(args.mb, args.repeat, args.profile)


if __name__ == "__main__":
    main()
