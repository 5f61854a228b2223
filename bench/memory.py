"""Memory: peak RSS of a client process running a 1 GB-output command and downloading 1 GB.

Each measurement runs the client in a fresh child process (the emulator in
another one) and reads the child's peak RSS (``VmHWM`` in
``/proc/self/status``) once its lease is open (the constant: interpreter,
imports, connections) and again after the operation. Two sizes per
operation show whether the peak grows with the output or stays flat.

- ``run``: the throughput workload (mixed stdout/stderr, multi-byte UTF-8)
  through ``run()`` with the default ``max_output`` (4 Mi characters per
  stream; a str of them takes up to 4 bytes per character in CPython).
- ``download``: a file of zeros made in the sandbox, ``Lease.download``
  to a local temporary file (streamed, then renamed into place).

    python bench/memory.py [--sizes 100,1000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import MB, EmulatorProcess, heading, machine


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(operation: str, mb: int, url: str, key: str, sandbox_id: str) -> dict[str, Any]:
    """Runs in the measured child process."""
    from _workloads import generator_argv

    import createos_sync as cs

    with (
        cs.Client(api_key=key, base_url=url, timeout=1800) as client,
        client.lease(sandbox_id=sandbox_id) as box,
    ):
        box.run("true")  # warm: connection pool, code paths
        before = peak_rss_mib()
        if operation == "run":
            argv, expected = generator_argv(mb * MB)
            result = box.run(argv)
            assert result.exit_code == 0 and result.truncated
            assert len(result.stdout) == min(expected["stdout"], 4 * 1024 * 1024)
        else:
            with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as scratch:
                target = Path(scratch) / "big"
                box.download(f"/workspace/zeros-{mb}", target)
                assert target.stat().st_size == mb * MB
        return {"before_mib": before, "peak_mib": peak_rss_mib()}


def measure(sizes: list[int]) -> dict[str, Any]:
    heading("4. Memory: peak RSS of the client process (VmHWM), flat in the output size?")
    results: dict[str, Any] = {}
    with EmulatorProcess() as emu, emu.client(timeout=1800) as client, client.lease() as box:
        print(f"setup: {emu.setup}; client in a child process; {machine()}")
        for mb in sizes:
            box.run(f"head -c {mb * MB} /dev/zero > /workspace/zeros-{mb}", timeout=600).check()
        for operation in ("run", "download"):
            for mb in sizes:
                done = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        operation,
                        str(mb),
                        emu.url,
                        emu.api_key,
                        str(box.id),
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                figures = json.loads(done.stdout.splitlines()[-1])
                results[f"{operation} {mb} MB"] = figures
                grew = figures["peak_mib"] - figures["before_mib"]
                print(
                    f"- {operation:8s} {mb:5d} MB: peak {figures['peak_mib']:6.1f} MiB "
                    f"(after open {figures['before_mib']:6.1f} MiB, +{grew:5.1f} MiB)"
                )
        box.run("rm -f /workspace/zeros-*").check()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000", help="MB, comma separated")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        operation, mb, url, key, sandbox_id = args.child
        print(json.dumps(child(operation, int(mb), url, key, sandbox_id)))
        return
    measure([int(x) for x in args.sizes.split(",")])


if __name__ == "__main__":
    main()
