"""Issue 42: reattaching after a crash never loses the sandbox to the auto-reap.

The auto-reap (``reap.sweep_in_background``) destroys, when a lease opens, the
journaled sandboxes whose owner died. A lease attaching by id to such a
sandbox (a kernel restarted) claims its entries under the journal's lock
before any sweep acts; a sweep re-checks each entry under that lock before it
destroys. Reattaching to a sandbox whose holder is alive shares it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import createos_sync as cs
from createos_sync import reap
from createos_sync._sandboxes import reap as reap_module
from createos_sync.emulator import Emulator
from createos_sync.errors import SandboxUnavailable
from createos_sync.journal import Entry, Journal, Reaped

from .subprocesses import CLI, emulator_env, finish, read_until, spawn

DEAD_OWNER = {"pid": 2**22 + 1, "process_start": "0"}  # never a live process
# A notebook kernel: opens a lease (no ttl), starts a process, writes a file; then is killed.
KERNEL = """
import time
import createos_sync as cs
box = cs.lease(ttl=None).open()
box.write_file("/tmp/notes.txt", "still here")
process = box.start("sleep 600")
print(box.id, process.id, flush=True)
time.sleep(1000)
"""
# The next kernel: reattaches by id; the auto-reap that opening starts has run when it prints.
NEXT_KERNEL = """
import sys, threading, time
import createos_sync as cs
from createos_sync._sandboxes import reap as reap_module
swept, sweep = threading.Event(), reap_module._sweep
def watched(*args):
    try:
        sweep(*args)
    finally:
        swept.set()
reap_module._sweep = watched
sandbox_id, process_id = sys.argv[1:3]
on_exit = None if sys.argv[3] == "default" else sys.argv[3]
box = cs.lease(sandbox_id=sandbox_id, on_exit=on_exit).open()
assert swept.wait(60), "the auto-reap never ran"
print(box.process(process_id).running, box.read_file("/tmp/notes.txt").decode(), flush=True)
print(box.run("echo hi").stdout.strip(), flush=True)
if on_exit != "destroy":
    box.close()
    print("closed", flush=True)
    time.sleep(1000)  # lives on, as a kernel does, until the test kills it
else:
    box.close()
"""


@pytest.fixture
def sweeps(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """The auto-reap on, once more for this process; the event is set when a sweep ended."""
    monkeypatch.setenv(reap_module.AUTO_ENV, "on")
    monkeypatch.setattr(reap_module, "_swept", set())
    done, sweep = threading.Event(), reap_module._sweep

    def watched(*args: Any) -> None:
        try:
            sweep(*args)
        finally:
            done.set()

    monkeypatch.setattr(reap_module, "_sweep", watched)
    yield done


def _orphaned(client: cs.Client, text: str = "still here") -> str:
    """A sandbox holding a file, journaled for a lease whose owner died."""
    with client.lease(on_exit="keep", ttl=None, journal=False) as box:  # starts no sweep
        box.write_file("/tmp/notes.txt", text)
        sandbox_id = str(box.id)
    url = client.config.base_url
    Journal().add(Entry(name="crashed-lease", base_url=url, sandbox_id=sandbox_id, **DEAD_OWNER))
    return sandbox_id


def test_reattaching_in_process_survives_the_sweep_it_starts(
    emulator: Emulator,
    client: cs.Client,
    sweeps: threading.Event,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "createos_sync.reap")
    sandbox_id = _orphaned(client)
    box = client.lease(sandbox_id=sandbox_id).open()
    try:
        assert sweeps.wait(30)
        assert sandbox_id in emulator.live_sandboxes()
        assert box.read_file("/tmp/notes.txt").decode() == "still here"
        assert box.run("echo hi").stdout == "hi\n"
        assert f"left {sandbox_id}" in caplog.text  # the sweep says what it skipped
        (entry,) = Journal().entries()  # the entry passed to the lease that attached
        assert (entry.name, entry.pid, entry.owner_alive()) == ("crashed-lease", os.getpid(), True)
    finally:
        box.close(on_exit="destroy")
    assert sandbox_id not in emulator.live_sandboxes()
    assert Journal().entries() == []  # destroyed: its entry goes with it


def test_a_sweep_already_running_re_checks_each_entry_before_it_destroys(
    emulator: Emulator,
    client: cs.Client,
    sweeps: threading.Event,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sweep started first (by a fresh lease), read the journal, and is held just
    before it acts on the entry; the attach claims it meanwhile: the sweep leaves it."""
    sandbox_id = _orphaned(client)
    reached, go = threading.Event(), threading.Event()
    original = reap_module._reap_entry

    def held(*args: Any, **kwargs: Any) -> Reaped:
        reached.set()
        assert go.wait(30)
        return original(*args, **kwargs)

    monkeypatch.setattr(reap_module, "_reap_entry", held)
    with client.lease() as fresh:
        assert reached.wait(30)  # the fresh lease's sweep is about to act on the entry
        with client.lease(sandbox_id=sandbox_id) as attached:
            go.set()
            assert sweeps.wait(30)
            assert attached.run("cat /tmp/notes.txt").stdout == "still here"
            assert sandbox_id in emulator.live_sandboxes()
        fresh.run("true")
    assert sandbox_id in emulator.live_sandboxes()  # kept by the attach (its default)
    client.destroy(sandbox_id)


def test_an_attach_refuses_a_sandbox_a_sweep_is_already_destroying(
    emulator: Emulator,
    client: cs.Client,
    sweeps: threading.Event,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The other order: the sweep marked the entry first and is destroying the sandbox.
    The attach cannot save it, and must not pretend to: it says so, before any request."""
    sandbox_id = _orphaned(client)
    destroying, go = threading.Event(), threading.Event()
    original = client.destroy

    def slow_destroy(target: str) -> bool:
        destroying.set()
        assert go.wait(30)
        return original(target)

    monkeypatch.setattr(client, "destroy", slow_destroy)
    with client.lease() as fresh:
        assert destroying.wait(30)
        with pytest.raises(SandboxUnavailable, match=r"being destroyed by a reap \(process \d+"):
            client.lease(sandbox_id=sandbox_id).open()
        go.set()
        assert sweeps.wait(30)
        fresh.run("true")
    assert sandbox_id not in emulator.live_sandboxes()


def test_a_thread_attaching_while_another_opens_a_fresh_lease(
    emulator: Emulator, client: cs.Client, sweeps: threading.Event
) -> None:
    """Whichever goes first, the attach is never told it holds a sandbox the sweep destroys."""
    for _ in range(3):
        sweeps.clear()
        reap_module._swept.clear()
        _race_one_attach_with_a_fresh_lease(emulator, client, sweeps, _orphaned(client))


def _race_one_attach_with_a_fresh_lease(
    emulator: Emulator, client: cs.Client, sweeps: threading.Event, sandbox_id: str
) -> None:
    start = threading.Barrier(2)
    outcome: dict[str, Any] = {}

    def attach() -> None:
        start.wait()
        try:
            outcome["box"] = client.lease(sandbox_id=sandbox_id).open()
        except SandboxUnavailable as exc:
            outcome["refused"] = exc

    attacher = threading.Thread(target=attach)
    attacher.start()
    start.wait()
    with client.lease():
        attacher.join(30)
        assert sweeps.wait(30)
    if "box" in outcome:
        box = outcome["box"]
        assert box.run("cat /tmp/notes.txt").stdout == "still here"
        box.close(on_exit="destroy")
    else:
        assert "being destroyed by a reap" in str(outcome["refused"])
    assert sandbox_id not in emulator.live_sandboxes()


def _kernel(emulator: Emulator) -> tuple[Any, str, str]:
    kernel = spawn([sys.executable, "-c", KERNEL], emulator_env(emulator))
    sandbox_id, process_id = read_until(kernel, b"\n").decode().split()
    return kernel, sandbox_id, process_id


def test_the_notebook_story_a_killed_kernel_then_a_new_one_reattaching_by_id(
    emulator: Emulator, client: cs.Client
) -> None:
    """Across processes, with SIGKILL: the process and the files are still there."""
    kernel, sandbox_id, process_id = _kernel(emulator)
    kernel.send_signal(signal.SIGKILL)
    finish(kernel)
    env = emulator_env(emulator, CREATEOS_SYNC_AUTO_REAP="on")
    argv = [sys.executable, "-c", NEXT_KERNEL, sandbox_id, process_id, "destroy"]
    status, out, err = finish(spawn(argv, env))
    assert status == 0, err
    assert out.splitlines() == ["True still here", "hi"]
    assert sandbox_id not in emulator.live_sandboxes()  # the new kernel destroyed it, asked to
    assert Journal().entries() == []


def test_a_sweep_of_another_process_leaves_what_a_live_kernel_reattached_to(
    emulator: Emulator, client: cs.Client, sweeps: threading.Event
) -> None:
    """The new kernel attached (and closed with keep, an attach's default) and still runs: a
    fresh lease elsewhere, and ``reap`` by hand, leave its sandbox; once it dies, reap takes
    it. With ``on_exit="keep"`` given, the kernel keeps it for good: no reap takes it."""
    kernel, sandbox_id, process_id = _kernel(emulator)
    kernel.send_signal(signal.SIGKILL)
    finish(kernel)
    env = emulator_env(emulator, CREATEOS_SYNC_AUTO_REAP="on")
    argv = [sys.executable, "-c", NEXT_KERNEL, sandbox_id, process_id, "default"]
    second = spawn(argv, env)
    try:
        assert b"closed" in read_until(second, b"closed\n")
        with client.lease():
            assert sweeps.wait(30)
        assert sandbox_id in emulator.live_sandboxes()
        status, out, _ = finish(spawn([*CLI, "reap"], emulator_env(emulator)))
        assert status == 0 and f"skipped {sandbox_id}: its lease is still held by process " in out
    finally:
        second.kill()
        finish(second)
    (destroyed,) = reap(client)
    assert destroyed.action == "destroyed" and destroyed.sandbox_ids == (sandbox_id,)

    kernel, sandbox_id, process_id = _kernel(emulator)
    kernel.send_signal(signal.SIGKILL)
    finish(kernel)
    argv = [sys.executable, "-c", NEXT_KERNEL, sandbox_id, process_id, "keep"]
    second = spawn(argv, env)
    try:
        assert b"closed" in read_until(second, b"closed\n")
    finally:
        second.kill()
        finish(second)
    assert Journal().entries() == [] and reap(client) == []  # adopted: no reap takes it
    assert sandbox_id in emulator.live_sandboxes()
    client.destroy(sandbox_id)


def test_reattaching_to_a_sandbox_whose_holder_is_alive_shares_it(
    emulator: Emulator, client: cs.Client, sweeps: threading.Event
) -> None:
    """Shared, not refused (the CLI's commands on a running script's sandbox must work): the
    holder keeps its entry; while this lease is attached, neither a sweep nor ``reap`` takes
    the sandbox, even once its holder died; ``reap`` says why it leaves it."""
    holder, sandbox_id, process_id = _kernel(emulator)
    try:
        with client.lease(sandbox_id=sandbox_id) as shared:
            assert shared.process(process_id).running
            (entry,) = Journal().entries()
            assert entry.pid == holder.pid  # still the holder's
            assert sweeps.wait(30)  # this lease's own sweep: the holder was alive
            holder.send_signal(signal.SIGKILL)
            finish(holder)
            sweeps.clear()
            reap_module._swept.clear()
            with client.lease():  # a fresh lease's sweep: the holder is dead by now
                assert sweeps.wait(30)
            assert shared.run("cat /tmp/notes.txt").stdout == "still here"
            status, out, _ = finish(spawn([*CLI, "reap"], emulator_env(emulator)))
            assert status == 0, out
            assert f"skipped {sandbox_id}: a live lease of process " in out
            assert "is attached to it" in out
            assert sandbox_id in emulator.live_sandboxes()
        # closed (kept): the claim is gone, the dead holder's entry stays for reap
        (destroyed,) = reap(client)
        assert destroyed.action == "destroyed" and destroyed.sandbox_ids == (sandbox_id,)
    finally:
        holder.kill()
        finish(holder)


def test_the_cli_shell_naming_a_crashed_scripts_sandbox_keeps_it_from_its_own_sweep(
    emulator: Emulator, client: cs.Client
) -> None:
    """``createos-sync shell SANDBOX_ID`` attaches through a lease: it claims first."""
    from .test_shell import at_prompt, finished
    from .test_shell import spawn as on_a_terminal

    sandbox_id = _orphaned(client)
    env = emulator_env(emulator, TERM="xterm", CREATEOS_SYNC_AUTO_REAP="on")
    child = on_a_terminal(["shell", sandbox_id], env)
    at_prompt(child)
    child.send("sleep 2; cat /tmp/notes.txt; echo; exit\r")  # the sweep had 0.5 s in the issue
    child.expect_exact("still here")
    assert finished(child) == 0
    assert sandbox_id in emulator.live_sandboxes()
    client.destroy(sandbox_id)
