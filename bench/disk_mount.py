"""What mounting disks by descriptor before bubblewrap costs a command (issue 35's residual).

One sandbox of the in-process emulator (bubblewrap) with a disk at
``/mnt/data/x``, then ``true`` run ROUNDS times through the exec endpoint,
interleaved: with the disks mounted by ``diskmount`` (the default, race-free)
and with bubblewrap binding them (the fallback, which leaves the window).
Printed: the median and spread of each, and their ratio. About 30 s.

    python bench/disk_mount.py
"""

from __future__ import annotations

import time
from typing import Any

import requests
from _common import Stats, heading, machine, paired_ratio

from createos_sync.emulator import Emulator
from createos_sync.emulator._machine import isolation

ROUNDS = 60
DISK = {
    "name": "bench", "kind": "s3", "config": {"bucket": "bench", "endpoint": "https://s3.x"},
    "credentials": {"access_key": "AK", "secret_key": "SK"},
}  # fmt: skip


def main() -> None:
    heading("a command with a disk: mounted by descriptor (diskmount) vs bound by bubblewrap")
    print(machine())
    emu = Emulator(isolation="bwrap").start()
    try:
        session = requests.Session()
        session.headers["X-Api-Key"] = emu.api_key

        def data(method: str, path: str, **kwargs: Any) -> Any:
            answer = session.request(method, emu.url + path, timeout=60, **kwargs)
            answer.raise_for_status()
            return answer.json()["data"]

        disk = data("POST", "/v1/disks", json=DISK)["id"]
        mount = {"disk_id": disk, "mount_path": "/mnt/data/x"}
        body = {"shape": "s-1vcpu-1gb", "disks": [mount]}
        sandbox = data("POST", "/v1/sandboxes", json=body)["id"]
        while data("GET", f"/v1/sandboxes/{sandbox}")["status"] != "running":
            time.sleep(0.05)
        exec_path = f"/v1/sandboxes/{sandbox}/exec"

        def run_true() -> float:
            started = time.perf_counter()
            result = data("POST", exec_path, json={"cmd": "true", "args": []})["result"]
            assert result["exit_code"] == 0, result
            return time.perf_counter() - started

        mounted, bound = [], []
        works = isolation.mounter_works
        assert works(), "diskmount cannot work here: nothing to compare"
        for _ in range(3):
            run_true()  # warm up: the layer, the caches
        for _ in range(ROUNDS):
            mounted.append(run_true())
            isolation.mounter_works = lambda: False  # type: ignore[assignment]
            try:
                bound.append(run_true())
            finally:
                isolation.mounter_works = works
    finally:
        emu.close()
    print(f"diskmount + bubblewrap: {Stats(mounted).describe('ms', 1000)}")
    print(f"bubblewrap binds:       {Stats(bound).describe('ms', 1000)}")
    ratio = paired_ratio(mounted, bound)
    print(f"ratio (diskmount / bubblewrap binds), paired: {ratio.describe('x')}")


if __name__ == "__main__":
    main()
