"""What the emulator's preview proxy costs: a sandbox's server fetched directly vs through it.

One sandbox of one separate-process emulator runs ``python3 -m http.server``
over a small file and a large one. Both are fetched with one
``requests.Session`` (keep-alive) from this process, directly on loopback
(the emulator's sandboxes share this machine's network) and through
``preview_url``, in alternating rounds. The proxy's cost is the ratio.

    python bench/ingress.py [--rounds 30] [--mb 100]
"""

from __future__ import annotations

import argparse
import re
import time
from typing import Any

import requests
from _common import MB, EmulatorProcess, Stats, heading, machine, paired_ratio


def _serve(box: Any, mb: int) -> int:
    box.write_file("/workspace/small.txt", b"x" * 100)
    box.run(f"head -c {mb * MB} /dev/zero > /workspace/large.bin", check=True)
    server = box.start(["python3", "-u", "-m", "http.server", "0", "--bind", "127.0.0.1"],
                       cwd="/workspace")  # fmt: skip
    for stream, text in server.output():
        found = re.search(r"port (\d+)", text)
        if stream == "stdout" and found:
            return int(found.group(1))
    raise RuntimeError("the server did not start")


def _fetch(session: requests.Session, url: str) -> float:
    started = time.perf_counter()
    with session.get(url, stream=True, timeout=60) as answer:
        answer.raise_for_status()
        for _ in answer.iter_content(1 << 20):
            pass
    return time.perf_counter() - started


def _pairs(
    session: requests.Session, direct: str, proxied: str, n: int
) -> tuple[list[float], list[float]]:
    """Alternating fetches: (direct times, proxied times), in the order they were paired."""
    pairs = [(_fetch(session, direct), _fetch(session, proxied)) for _ in range(n)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def measure(rounds: int, mb: int) -> dict[str, float]:
    heading("Preview proxy: a sandbox's server directly vs through preview_url")
    with EmulatorProcess() as emu, emu.client() as client, client.lease(ingress=True) as box:
        print(f"setup: {emu.setup}; client in this process; {machine()}")
        port = _serve(box, mb)
        box.wait_for_port(port)
        direct, proxied = f"http://127.0.0.1:{port}/", box.preview_url(port)
        with requests.Session() as session:
            small = _pairs(session, direct + "small.txt", proxied + "small.txt", rounds)
            large = _pairs(session, direct + "large.bin", proxied + "large.bin", 3)
    cost = paired_ratio(small[1], small[0])
    print(f"small GET direct:  {Stats(small[0]).describe('ms', 1000)}")
    print(f"small GET proxied: {Stats(small[1]).describe('ms', 1000)}")
    print(f"  proxied / direct: {cost.describe('x')}")
    rates = (mb / Stats(large[0]).median, mb / Stats(large[1]).median)
    print(f"{mb} MB GET: direct {rates[0]:.0f} MB/s, proxied {rates[1]:.0f} MB/s (medians of 3)")
    return {"small_ratio": cost.median, "direct_mb_s": rates[0], "proxied_mb_s": rates[1]}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--mb", type=int, default=100)
    args = parser.parse_args()
    measure(args.rounds, args.mb)
