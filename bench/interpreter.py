"""The code interpreter: requests per cell, latency per cell, a cell's output throughput.

On one sandbox of one separate-process emulator (loopback):

- requests: counted in the emulator's log for the start of a context (its first
  cell), for steady-state cells, and for a cell that times out;
- latency: ``run_code("x + 1")`` in a warm context, beside ``run("true")`` (a
  managed process: 3 requests), in interleaved rounds; the ratio is per pair;
- throughput: one cell writing 100 MB to stdout, all streamed to ``on_output``
  while ``Execution.stdout`` keeps the last 4 MiB;
- over a network (``--rtt``, default 40 ms): the same cell and ``run("true")``
  over HTTPS through ``_wanproxy.DelayProxy`` (as ``bench/wan.py``), in RTTs.

    python bench/interpreter.py [--rounds 40] [--rtt 40]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

from _common import MB, EmulatorProcess, Stats, counted, heading, machine, paired_ratio
from _wanproxy import DelayProxy

import createos_sync as cs


def _operations(logged: list[dict[str, Any]], sandbox_id: str) -> Counter[str]:
    return Counter(
        str(r.get("operation") or r.get("path")) for r in logged if sandbox_id in r["path"]
    )


def measure(rounds: int) -> dict[str, Any]:
    heading("The code interpreter: requests and latency per cell, output throughput")
    results: dict[str, Any] = {}
    with EmulatorProcess() as emu, emu.client() as client, client.lease() as box:
        assert box.id is not None
        print(f"setup: {emu.setup}; client in this process; {machine()}")
        with counted(emu) as logged:
            started = time.perf_counter()
            assert box.run_code("x = 1").error is None
            first = time.perf_counter() - started
        start_ops = _operations(logged, box.id)
        cells = 20
        with counted(emu) as logged:
            for _ in range(cells):
                assert box.run_code("x + 1").text == "2"
        steady = _operations(logged, box.id)
        with counted(emu) as logged:
            timed = box.run_code("import time\ntime.sleep(5)", timeout=0.2)
            assert timed.timed_out
        timeout_ops = _operations(logged, box.id)
        per_cell = sum(steady.values()) / cells
        print(
            f"- first cell of a context (starts the interpreter): {sum(start_ops.values())} "
            f"requests {dict(start_ops)}, {first * 1000:.0f} ms"
        )
        print(f"- steady state: {per_cell:g} request(s) per cell over {cells} cells {dict(steady)}")
        print(
            f"- a cell that times out (interrupted there): {sum(timeout_ops.values())} request(s)"
        )
        results["requests"] = {
            "first": sum(start_ops.values()),
            "per_cell": per_cell,
            "timeout": sum(timeout_ops.values()),
        }

        cell_wall: list[float] = []
        run_wall: list[float] = []
        for i in range(rounds):
            order = ("cell", "run") if i % 2 == 0 else ("run", "cell")
            for kind in order:
                t0 = time.perf_counter()
                if kind == "cell":
                    assert box.run_code("x + 1").text == "2"
                    cell_wall.append(time.perf_counter() - t0)
                else:
                    assert box.run("true").exit_code == 0
                    run_wall.append(time.perf_counter() - t0)
        cell, run = Stats(cell_wall), Stats(run_wall)
        print(f"- run_code('x + 1'): {cell.describe('ms', 1000)}")
        print(f"- run('true'):       {run.describe('ms', 1000)}")
        ratio = paired_ratio(cell_wall, run_wall)
        print(
            f"- cell / run() per interleaved pair: median {ratio.median:.3f} "
            f"(IQR {ratio.q1:.3f}-{ratio.q3:.3f})"
        )
        results["latency_ms"] = {"cell": cell.median * 1000, "run": run.median * 1000}

        streamed = 0

        def count(stream: str, data: object) -> None:
            nonlocal streamed
            if stream == "stdout" and isinstance(data, str):
                streamed += len(data)

        code = (
            "import sys\nchunk = 'x' * 999 + '\\n'\n"
            "for _ in range(100 * 1000):\n    sys.stdout.write(chunk)"
        )
        t0 = time.perf_counter()
        big = box.run_code(code, on_output=count)
        wall = time.perf_counter() - t0
        assert streamed == 100 * MB and big.truncated and len(big.stdout) == 4 * 1024 * 1024
        print(
            f"- a cell printing 100 MB: {wall:.2f} s, {100 / wall:.0f} MB/s streamed to "
            f"on_output; Execution.stdout kept {len(big.stdout)} characters"
        )
        results["throughput_mb_s"] = 100 / wall
    return results


def over_a_network(rtt_ms: float, rounds: int) -> dict[str, float]:
    heading(f"The code interpreter over HTTPS through a delaying proxy: {rtt_ms:g} ms RTT")
    with EmulatorProcess(tls=True) as emu:
        parts = urlsplit(emu.url)
        assert parts.hostname is not None and parts.port is not None and emu.ca_path
        with DelayProxy((parts.hostname, parts.port), rtt_ms / 1000) as proxy:
            url = f"https://127.0.0.1:{proxy.port}"
            print(f"setup: {emu.setup}; proxy RTT {rtt_ms:g} ms; {machine()}")
            client = cs.Client(
                emu.api_key, url, ca_bundle=emu.ca_path, timeout=600, requests_per_minute=10**6
            )
            with client, client.lease() as box:
                t0 = time.perf_counter()
                box.run_code("x = 1")
                first = time.perf_counter() - t0
                box.run("true")  # warm: the connections a run uses
                walls: dict[str, list[float]] = {"cell": [], "run": []}
                for i in range(rounds):
                    for kind in ("cell", "run") if i % 2 == 0 else ("run", "cell"):
                        t0 = time.perf_counter()
                        if kind == "cell":
                            assert box.run_code("x + 1").text == "2"
                        else:
                            assert box.run("true").exit_code == 0
                        walls[kind].append(time.perf_counter() - t0)
    rtt = rtt_ms / 1000
    cell, run = Stats(walls["cell"]), Stats(walls["run"])
    print(f"- first cell (starts the interpreter): {first / rtt:.1f} RTT")
    print(f"- run_code('x + 1'): {cell.describe('RTT', 1 / rtt, 2)}")
    print(f"- run('true'):       {run.describe('RTT', 1 / rtt, 2)}")
    return {"cell_rtt": cell.median / rtt, "run_rtt": run.median / rtt}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--rtt", type=float, default=40.0, help="ms; 0 skips the network part")
    args = parser.parse_args()
    measure(args.rounds)
    if args.rtt:
        over_a_network(args.rtt, max(8, args.rounds // 3))


if __name__ == "__main__":
    main()
