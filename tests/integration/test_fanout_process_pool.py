"""``cs.map`` on a process pool: docs/how-to/map.md promises it; items run in other processes.

Each worker process builds a client of its own from the caller's configuration
(API key included), so the function, the items and the results must pickle.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import createos_sync as cs
from createos_sync import Client, Lease
from createos_sync.emulator import Emulator


def where(box: Lease, n: int) -> tuple[int, int, str]:
    return n, os.getpid(), box.run(f"echo {n}").stdout.strip()


def test_items_run_in_the_pool_s_processes_each_in_a_sandbox_of_its_own(
    emulator: Emulator, client: Client
) -> None:
    emulator.clear_request_log()  # the session's emulator: count this test's creations only
    before = set(emulator.live_sandboxes())
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = cs.map(where, range(4), client=client, executor=pool)
    assert [(n, echoed) for n, _, echoed in results] == [(0, "0"), (1, "1"), (2, "2"), (3, "3")]
    assert os.getpid() not in {pid for _, pid, _ in results}  # not run here
    created = [r for r in emulator.request_log if r.operation == "sandbox.create"]
    assert len(created) == 4 and set(emulator.live_sandboxes()) <= before  # all destroyed
