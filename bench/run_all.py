"""Every benchmark of issues 5 and 11 in one run, then a summary of the headline figures.

    bench/setup_venv.sh                       # once: bench/.venv with the official SDK
    bench/.venv/bin/python bench/run_all.py   # the published figures (takes ~15 minutes)
    bench/.venv/bin/python bench/run_all.py --quick   # a smaller run for development

Run with another interpreter, the official SDK's figures are left out and
the reason is printed. Each section says its setup and method.
"""

from __future__ import annotations

import argparse
import time

import budget
import concurrency
import hotpath
import latency
import memory
import throughput
import wan
from _common import heading, machine

RUN_TRUE = 'run("true")'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    args = parser.parse_args()
    quick = args.quick
    started = time.perf_counter()
    print(f"createos-sync benchmarks ({'quick' if quick else 'full'} mode); {machine()}")
    budgets = budget.measure(repeat=2 if quick else 5)
    lat = latency.measure(rounds=8 if quick else 40)
    stream = throughput.measure(mb=50 if quick else 200, repeat=2 if quick else 5)
    hot = hotpath.run(
        mb=10 if quick else 50,
        repeat=3 if quick else 7,
        with_callgrind=not quick,
        callgrind_mb=4,
        src=None,
    )
    mem = memory.measure([20, 100] if quick else [100, 1000])
    conc = concurrency.measure(4, 3, "quick") if quick else concurrency.measure(16, 20, "full")
    wan_rounds = 3 if quick else 15
    far = wan.measure(rtt_ms=40, rounds=wan_rounds)
    near = wan.measure(rtt_ms=0, rounds=wan_rounds)

    heading("Summary")
    over = [name for name, r in budgets.items() if not r["ok"]]
    run_requests = max(budgets[RUN_TRUE]["requests"])
    print(
        f"1. request budget: run('true') {run_requests} requests; "
        f"targets {'all met' if not over else 'missed: ' + ', '.join(over)}"
    )
    print(
        f"2. small run(): {lat['run()']['ratio']:.3f}x the floor (target <= 1.10x)"
        + (f"; official SDK {lat['official SDK']['ratio']:.3f}x" if "official SDK" in lat else "")
    )
    floor = stream["floor (raw requests + decode)"]
    capture_all = "run() capture, max_output=1 Gi"
    for name in ("run() capture", capture_all, "run(on_output=...)", "official SDK process stream"):
        if name in stream:
            s = stream[name]
            print(
                f"3. {name}: {s['mbps']:.0f} MB/s, {s['cpu_per_100mb']:.2f} CPU s/100 MB "
                f"(floor {floor['mbps']:.0f} MB/s, {floor['cpu_per_100mb']:.2f} CPU s/100 MB)"
            )
    print(
        f"3. capture with a large max_output vs callbacks: "
        f"{stream[capture_all]['mbps'] / stream['run(on_output=...)']['mbps']:.2f}x the speed "
        "(target >= 0.9x)"
    )
    for name, figures in hot.items():
        extra = (
            f", {figures['instructions_per_mb'] / 1e6:.1f} M instructions/MB"
            if "instructions_per_mb" in figures
            else ""
        )
        print(f"3b. hot path {name}: {figures['cpu_per_100mb']:.2f} CPU s/100 MB{extra}")
    for name, figures in mem.items():
        print(f"4. {name}: peak RSS {figures['peak_mib']:.0f} MiB")
    print(
        f"5. concurrency ({conc['mode']}): {conc['wall_s']:.0f} s, {conc['requests']} requests, "
        f"{conc['answered_429']} 429 answered, {conc['surfaced_429']} surfaced, "
        f"{conc['correct']}/{conc['expected']} correct"
    )
    for op, by_variant in far.items():
        cells = [
            f"{name} {f['wall']:.2f} RTT / {near[op][name]['wall']:.1f} ms, "
            f"{f['connections']:g} new conn, {f['requests']:g} req"
            for name, f in by_variant.items()
        ]
        print(f"6. {op} at 40 ms RTT over TLS / loopback: " + "; ".join(cells))
    print(f"total time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
