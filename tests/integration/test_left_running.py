"""What a command leaves running (issue 38): it outlives the command, as on the service.

A CreateOS sandbox is a VM: a server that a command starts with ``nohup ... &`` keeps
running after the command ends (the official TypeScript SDK's docs and examples rely on
it). ``run()`` returns when the command ends; what it left keeps running until the lease
closes and destroys the sandbox (or until a timeout or Ctrl-C terminates the whole tree).
"""

from __future__ import annotations

from createos_sync import Client
from createos_sync.emulator import Emulator

from ..waiting import wait_until

TICKER = "nohup bash -c 'while :; do echo t >> /tmp/ticks; sleep 0.05; done' >/dev/null 2>&1 &"


def test_what_run_leaves_running_lives_until_the_lease_closes(
    emulator: Emulator, client: Client
) -> None:
    with client.lease() as box:
        result = box.run(f"{TICKER} echo started")
        assert (result.exit_code, result.stdout) == (0, "started\n")

        def ticks() -> int:
            return int(box.run("wc -l < /tmp/ticks").stdout)

        after_run = ticks()
        wait_until(lambda: ticks() > after_run, what="ticking after run() returned")
        sandbox_id = box.id
    assert sandbox_id not in emulator.live_sandboxes()
    assert emulator.live_processes() == []  # gone with the sandbox


def test_a_timeout_ends_what_the_command_started(emulator: Emulator, client: Client) -> None:
    with client.lease() as box:
        box.run("true")  # the lease's command session runs from its first command on
        before = _live(emulator)  # the lease's own: its ttl watchdog, its command session
        result = box.run(f"{TICKER} sleep 60", timeout=1)
        assert result.timed_out
        stopped = int(box.run("wc -l < /tmp/ticks").stdout)
        assert int(box.run("sleep 0.3; wc -l < /tmp/ticks").stdout) == stopped
        wait_until(lambda: _live(emulator) == before, what="no process of the run left")


def _live(emulator: Emulator) -> set[str]:
    return {p.process_id for p in emulator.live_processes()}
