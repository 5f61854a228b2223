"""The containment rule under races and hangs: close() against runs being started in other
threads, and a termination that hangs while close() shares out its cleanup time."""

from __future__ import annotations

import re
import threading
import time

import pytest

import createos_sync as cs
from createos_sync.emulator import Emulator, Fault

from .helpers import FAST, own_emulator, processes_of

THREADS = 8


@pytest.mark.parametrize("delay_ms", [0, 10, 20, 30, 40])
def test_close_sees_every_process_whose_creation_was_sent_before_it(
    emulator: Emulator, client: cs.Client, delay_ms: int
) -> None:
    box = client.lease(on_exit="keep").open()
    sandbox_id = box.id
    go = threading.Barrier(THREADS + 1)
    outcomes: list[object] = []

    def runner() -> None:
        go.wait()
        try:
            outcomes.append(box.run("sleep 6", timeout=30))
        except BaseException as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=runner) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    go.wait()
    time.sleep(delay_ms / 1000)
    box.close()
    try:
        assert processes_of(emulator, sandbox_id) == []  # nothing runs once close() returned
        for thread in threads:
            thread.join(30)
        assert len(outcomes) == THREADS
        for outcome in outcomes:  # cut short, and said so: never "timed out"
            assert isinstance(outcome, cs.LeaseClosed), outcome
            # "closed" when close() ended it, "closing" when the run began after close() did
            assert re.search(r"\bclos(ed|ing)\b", str(outcome)), outcome
        assert processes_of(emulator, sandbox_id) == []
        assert sandbox_id in emulator.live_sandboxes()  # kept, as asked
    finally:
        client.destroy(sandbox_id)


def test_a_hanging_termination_leaves_its_retry_a_share_of_the_cleanup_time() -> None:
    with (
        own_emulator(transition_delay=0) as emu,
        # a termination's share of the cleanup time: 3 s; the first answers after 6
        emu.client(requests_per_minute=FAST, cleanup_timeout=3.0) as client,
    ):
        box = client.lease(on_exit="keep").open()
        sandbox_id = box.id
        servers = [box.start(f"sleep {1000 + n}") for n in range(3)]
        emu.faults.add(Fault("process.delete", delay=6.0))
        box.close()  # every end confirmed: no CreateosCleanupError, the sandbox is kept
        assert all(not server.running for server in servers)
        assert processes_of(emu, sandbox_id) == []
        assert sandbox_id in emu.live_sandboxes()
        client.destroy(sandbox_id)
