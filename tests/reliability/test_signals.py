"""Signals and interpreter exit, in real subprocesses, at the moments not tested elsewhere.

Already covered, and not repeated here: Ctrl-C (SIGINT) during ``run()`` and a
second Ctrl-C during its cleanup (tests/integration/test_lifecycle.py); the
CLI under SIGINT, SIGTERM and SIGHUP while its command runs, and under nohup
(tests/integration/test_cli.py); SIGKILL of a script, then ``reap``
(tests/integration/test_reap.py). Here:

- a script that ends (normally, or by an uncaught exception)
  with its lease still open: the exit hook closes it;
- SIGINT while a lease opens (the sandbox still starting), while its
  creation request waits for an answer, while ``Process.wait()`` blocks,
  and while a download streams;
- the CLI under SIGTERM and SIGHUP while the sandbox starts, during an
  upload and during a download;
- SIGTERM to a plain script, which Python does not turn into an exception:
  nothing runs, the sandbox is left, and ``ls`` / ``reap`` recover it.

Every scenario checks on the emulator that the processes and the sandbox are gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from createos_sync import reap
from createos_sync.emulator import Emulator, Fault
from createos_sync.journal import Journal

from ..integration.helpers import FAST, operations, processes_of
from ..integration.subprocesses import (
    CLI,
    emulator_env,
    finish,
    read_until,
    spawn,
)
from ..waiting import wait_until
from .ledger import Ledger
from .support import KEY

PYTHON = sys.executable
STALL = 600.0  # an answer that never comes within a test


@contextlib.contextmanager
def emulator(**options: Any) -> Iterator[Emulator]:
    """An emulator of the scenario's own (its stalled answers outlive the scenario)."""
    options.setdefault("rate_limit", None)
    with Emulator(api_key=KEY, **options) as emu:
        yield emu


def gone(emu: Emulator, sandbox_ids: set[str]) -> None:
    """Neither the sandboxes nor any of their processes are left on ``emu``."""
    assert not sandbox_ids & set(emu.live_sandboxes()), sandbox_ids
    for sandbox_id in sandbox_ids:
        assert processes_of(emu, sandbox_id) == []


def new_sandbox(emu: Emulator, before: set[str]) -> str:
    """The one sandbox created on ``emu`` since ``before``, once it exists."""
    wait_until(lambda: set(emu.live_sandboxes()) - before, "a sandbox to be created")
    (sandbox_id,) = set(emu.live_sandboxes()) - before
    return sandbox_id


# --- the exit hook -------------------------------------------------------------------------

FORGETFUL = """
import sys
import createos_sync as cs
box = cs.lease(on_exit={on_exit!r}).open()
box.start("sleep 1000")
assert box.run("echo ran").stdout == "ran\\n"
print(box.id, flush=True)
{ending}
"""
ENDINGS = {
    "end of script": ("destroy", "", 0),
    "uncaught exception": ("destroy", "raise RuntimeError('bye')", 1),
    "keep": ("keep", "", 0),
}


def test_the_exit_hook_closes_leases_a_script_left_open(tmp_path: Path) -> None:
    with emulator(transition_delay=0) as emu:
        env = emulator_env(emu)
        procs = {
            name: spawn([PYTHON, "-c", FORGETFUL.format(on_exit=on_exit, ending=ending)], env)
            for name, (on_exit, ending, _) in ENDINGS.items()
        }
        ids = {name: read_until(proc, b"\n").decode().strip() for name, proc in procs.items()}
        for name, proc in procs.items():
            status, _, err = finish(proc)
            assert status == ENDINGS[name][2], err
            assert "still open at interpreter exit: closing it" in err

        destroyed = {ids[n] for n in ENDINGS if n != "keep"}
        gone(emu, destroyed)
        for sandbox_id in destroyed:  # terminated, then destroyed
            assert operations(emu, sandbox_id)[-2:] == [
                ("process.delete", 200),
                ("sandbox.delete", 200),
            ]
        # Kept, as asked: its processes are terminated all the same.
        assert ids["keep"] in emu.live_sandboxes()
        assert processes_of(emu, ids["keep"]) == []
        assert Journal().entries() == []
        with emu.client(requests_per_minute=FAST) as client:
            client.destroy(ids["keep"])


# --- SIGINT in a user's script -------------------------------------------------------------

# As in a terminal: a background job (`pytest &`, some CI runners) starts with SIGINT
# ignored, and Python then leaves it ignored.
INTERRUPTIBLE = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
OPENS = (
    INTERRUPTIBLE
    + """
import createos_sync as cs
print("opening", flush=True)
cs.lease().open()
"""
)
WAITS = (
    INTERRUPTIBLE
    + """
import createos_sync as cs
with cs.lease() as box:
    print(box.id, flush=True)
    process = box.start("echo started; exec sleep 1000", echo=True)
    process.wait()
"""
)
DOWNLOADS = (
    INTERRUPTIBLE
    + """
import sys
import createos_sync as cs
with cs.lease() as box:
    box.write_file("/workspace/big", b"x" * 1_000_000)
    print(box.id, flush=True)
    box.download("/workspace/big", sys.argv[1])
"""
)


def interrupted(status: int, err: str) -> None:
    assert status in (-signal.SIGINT, 128 + signal.SIGINT, 1), err
    assert "KeyboardInterrupt" in err


def test_sigint_while_opening_waiting_or_downloading_cleans_up(tmp_path: Path) -> None:
    """Four scripts, each on an emulator of its own, interrupted at once."""
    target = tmp_path / "big"
    with (
        emulator(transition_delay=STALL) as starting,
        emulator(transition_delay=0) as creating,
        emulator(transition_delay=0) as waiting,
        emulator(transition_delay=0) as reading,
    ):
        # The sandbox is created at once, its answer never comes; the file opens, its
        # answer never comes either.
        creating.faults.add(Fault("sandbox.create", delay=STALL))
        reading.faults.add(Fault("file.read", delay=STALL))
        procs = {
            starting: spawn([PYTHON, "-c", OPENS], emulator_env(starting)),
            creating: spawn([PYTHON, "-c", OPENS], emulator_env(creating)),
            waiting: spawn([PYTHON, "-c", WAITS], emulator_env(waiting)),
            reading: spawn([PYTHON, "-c", DOWNLOADS, str(target)], emulator_env(reading)),
        }
        ids = {emu: new_sandbox(emu, set()) for emu in procs}  # `starting`: its creation waits
        read_until(procs[waiting], b"started\n")  # running: SIGTERM cannot race its start-up
        wait_until(lambda: not reading.faults.pending(), "the download request")

        for proc in procs.values():
            proc.send_signal(signal.SIGINT)
        for emu, proc in procs.items():
            status, _, err = finish(proc)
            interrupted(status, err)
            gone(emu, {ids[emu]})

        # While starting (the creation answers once it runs): found by name, destroyed.
        assert operations(starting, ids[starting])[-1] == ("sandbox.delete", 200)
        # While the creation's answer was awaited: found by its unique name, destroyed.
        assert ("sandbox.list", 200) in operations(creating)
        assert operations(creating, ids[creating]) == [("sandbox.delete", 200)]
        # During Process.wait(): the process terminated, then the sandbox destroyed.
        assert operations(waiting, ids[waiting])[-2:] == [
            ("process.delete", 200),
            ("sandbox.delete", 200),
        ]
        # During a download: no target and no temporary file beside it.
        assert os.listdir(tmp_path) == []
        assert Journal().entries() == []


# --- two quick Ctrl-C during open() --------------------------------------------------------

# Reports every note of the exception chain it dies of (Python 3.10 prints none), and
# ignores interrupts once open() has ended: the second may come after it.
TWICE = (
    INTERRUPTIBLE
    + """
import json, signal, sys
import createos_sync as cs

def report(kind, value, traceback):
    notes, seen = [], value
    while seen is not None:
        notes += [n for n in getattr(seen, "__notes__", ()) if isinstance(n, str)]
        seen = seen.__context__
    print(json.dumps({"raised": kind.__name__, "notes": notes}), flush=True)

sys.excepthook = report
print("opening", flush=True)
try:
    box = cs.lease(name=sys.argv[1]).open()
finally:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
print(json.dumps({"opened": box.id}), flush=True)
"""
)
PHASE = 0.25  # each slowed answer: long enough for an interrupt to land in it
# Where the interrupts land: the creation's answer and the search by name that follows
# it, or the wait until running and the destroy that follows it (each slowed), at offsets
# spread over those phases.
SCENARIOS = {
    "creating": (
        {"transition_delay": 0},
        [Fault(op, delay=PHASE) for op in ("sandbox.create", "sandbox.list", "sandbox.delete")],
    ),
    "starting": ({"transition_delay": PHASE}, [Fault("sandbox.delete", delay=PHASE)]),
}
TRIALS = [
    (kind, first / 1000, second / 1000)
    for kind in SCENARIOS
    for first in (0, 80, 160, 240)
    for second in (0, 90, 180)
]
BATCH = 12


def _interrupt_twice(emu: Emulator, name: str, first: float, second: float) -> dict[str, Any]:
    proc = spawn([PYTHON, "-c", TWICE, name], emulator_env(emu))
    read_until(proc, b"opening\n")
    time.sleep(first)
    proc.send_signal(signal.SIGINT)
    time.sleep(second)
    proc.send_signal(signal.SIGINT)
    status, out, err = finish(proc)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"no report ({status}): {err[-2000:]}"
    report: dict[str, Any] = json.loads(lines[-1])
    return report


def test_two_quick_interrupts_during_open_never_leave_an_unnamed_sandbox(
    ledger: Ledger,
) -> None:
    outcomes: dict[str, int] = {"nothing left": 0, "named in a note": 0, "opened": 0}
    for batch in range(0, len(TRIALS), BATCH):
        trials = TRIALS[batch : batch + BATCH]
        with contextlib.ExitStack() as stack:
            emus = []
            for kind, _, _ in trials:
                options, faults = SCENARIOS[kind]
                emus.append(stack.enter_context(emulator(**options)))
                for fault in faults:
                    emus[-1].faults.add(fault)
            with ThreadPoolExecutor(len(trials)) as pool:
                reports = list(
                    pool.map(
                        lambda args: _interrupt_twice(*args),
                        [(emu, f"t{batch + n}", d1, d2) for n, (emu, (_, d1, d2)) in
                         enumerate(zip(emus, trials, strict=True))],
                    )
                )  # fmt: skip
            journal = {e.name for e in Journal().entries()}
            for n, (emu, report) in enumerate(zip(emus, reports, strict=True)):
                with emu.client(requests_per_minute=FAST) as client:
                    left = [s for s in client.sandboxes() if s.status != "destroyed"]
                    notes = "\n".join(report.get("notes", ()))
                    for sandbox in left:  # whatever is left is named, and journaled
                        where = f"trial {TRIALS[batch + n]}: {report}"
                        assert sandbox.id in notes or str(sandbox.name) in notes, where
                        assert sandbox.name in journal, where
                    key = "opened" if "opened" in report else (
                        "named in a note" if left else "nothing left"
                    )  # fmt: skip
                    outcomes[key] += 1
                    reap(client)  # its owner is gone: what is left goes now
                    assert emu.live_sandboxes() == []
    ledger.add(scenarios=len(TRIALS))
    assert Journal().entries() == []
    print(f"two interrupts during open(), {len(TRIALS)} trials: {outcomes}")


# --- two Ctrl-C at once during close() -----------------------------------------------------

# Closes the lease once a line comes on stdin; reports the notes of what it dies of.
CLOSING = (
    INTERRUPTIBLE
    + """
import json, signal, sys
import createos_sync as cs

def report(kind, value, traceback):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the second Ctrl-C must not cut the report
    notes, seen = [], value
    while seen is not None:
        notes += [n for n in getattr(seen, "__notes__", ()) if isinstance(n, str)]
        seen = seen.__context__
    print(json.dumps({"raised": kind.__name__, "notes": notes}), flush=True)

sys.excepthook = report
with cs.lease() as box:
    box.start("sleep 1000")
    print(box.id, flush=True)
    sys.stdin.readline()
signal.signal(signal.SIGINT, signal.SIG_IGN)
print(json.dumps({"closed": box.id}), flush=True)
"""
)
# Each close() terminates its process, then destroys its sandbox: the first destroy is
# refused (503) after DESTROY_STALL and sent again. The first SIGINT lands at one of
# these points of close() (which takes about 0.6 s here), the second this long after it.
DESTROY_STALL = 0.15
CLOSE_POINTS = tuple(n * 0.06 for n in range(9))
CLOSE_GAPS = (0.0, 0.001, 0.002, 0.005, 0.010)
CLOSE_TRIALS = [(point, gap) for point in CLOSE_POINTS for gap in CLOSE_GAPS]
CLOSE_BATCH = 5
HOG = "while True: pass"


def _interrupt_close(emu: Emulator, point: float, gap: float) -> tuple[str, dict[str, Any]]:
    proc = subprocess.Popen(
        [PYTHON, "-c", CLOSING],
        env=emulator_env(emu),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    sandbox_id = read_until(proc, b"\n").decode().strip()
    proc.stdin.write(b"close\n")
    proc.stdin.flush()
    time.sleep(point)  # not an order of events: where in close() the interrupts land
    proc.send_signal(signal.SIGINT)
    if gap:
        time.sleep(gap)
    proc.send_signal(signal.SIGINT)
    status, out, err = finish(proc)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:  # the second landed before the report could start: the traceback says it
        notes = [line for line in err.splitlines() if line.startswith("CreateosCleanupError: ")]
        return sandbox_id, {"raised": f"unreported ({status})", "notes": notes}
    report: dict[str, Any] = json.loads(lines[-1])
    return sandbox_id, report


def test_two_interrupts_at_once_during_close_never_leave_an_unnamed_sandbox(
    ledger: Ledger,
) -> None:
    """Issue 28: the sandbox is gone, or the exception names it and the journal keeps it."""
    outcomes = {"nothing left": 0, "named in a note": 0}
    unnamed: list[str] = []  # every trial is run: the figure counts them all
    hog = spawn([PYTHON, "-c", HOG], os.environ.copy())  # under load, as the rare window needs
    try:
        with emulator(transition_delay=0) as emu:
            for batch in range(0, len(CLOSE_TRIALS), CLOSE_BATCH):
                trials = CLOSE_TRIALS[batch : batch + CLOSE_BATCH]
                emu.faults.clear()
                emu.faults.add(
                    Fault("sandbox.delete", status=503, delay=DESTROY_STALL, times=len(trials))
                )
                with ThreadPoolExecutor(len(trials)) as pool:
                    results = list(pool.map(lambda t: _interrupt_close(emu, *t), trials))
                journal = {e.sandbox_id for e in Journal().entries()}
                for (point, gap), (sandbox_id, report) in zip(trials, results, strict=True):
                    where = f"first SIGINT at {point * 1000:g} ms, second {gap * 1000:g} ms later"
                    if sandbox_id not in emu.live_sandboxes():
                        outcomes["nothing left"] += 1
                        continue
                    notes = "\n".join(report.get("notes", ()))
                    if f"sandbox {sandbox_id}" in notes and sandbox_id in journal:
                        outcomes["named in a note"] += 1
                    else:
                        unnamed.append(f"{where}: {report}, journaled: {sandbox_id in journal}")
                with emu.client(requests_per_minute=FAST) as client:
                    reap(client)  # the owners are gone: what is left goes now
                assert emu.live_sandboxes() == []
    finally:
        hog.kill()
        hog.wait()
    ledger.add(scenarios=len(CLOSE_TRIALS))
    print(f"two interrupts during close(), {len(CLOSE_TRIALS)} trials: {outcomes}, "
          f"{len(unnamed)} left a sandbox unnamed")  # fmt: skip
    assert unnamed == []
    assert Journal().entries() == []


# --- the CLI outside its command -------------------------------------------------------------


def test_cli_sigterm_and_sighup_before_and_around_the_command(tmp_path: Path) -> None:
    upload = tmp_path / "up.bin"
    upload.write_bytes(os.urandom(1 << 20))
    download = tmp_path / "down" / "out.bin"
    download.parent.mkdir()
    with (
        emulator(transition_delay=STALL) as starting,
        emulator(transition_delay=0) as writing,
        emulator(transition_delay=0) as reading,
    ):
        writing.faults.add(Fault("file.write", delay=STALL))
        reading.faults.add(Fault("file.read", delay=STALL))
        while_starting = spawn([*CLI, "run", "--", "true"], emulator_env(starting))
        while_uploading = spawn(
            [*CLI, "run", "--upload", f"{upload}:/workspace/up.bin", "--", "true"],
            emulator_env(writing),
        )
        while_downloading = spawn(
            [*CLI, "run", "--download", f"/workspace/out.bin:{download}", "--",
             "head -c 100000 /dev/zero > out.bin"],  # relative: /workspace needs bubblewrap
            emulator_env(reading),
        )  # fmt: skip
        cases = [
            (while_starting, starting, signal.SIGTERM),
            (while_uploading, writing, signal.SIGHUP),
            (while_downloading, reading, signal.SIGTERM),
        ]
        sandbox_ids = {emu: new_sandbox(emu, set()) for _, emu, _ in cases}  # starting: waits
        wait_until(lambda: not writing.faults.pending(), "the upload")
        wait_until(lambda: not reading.faults.pending(), "the download")

        for proc, _, signum in cases:
            proc.send_signal(signum)
        for proc, emu, signum in cases:
            status, _, err = finish(proc)
            assert status == 128 + signum, err
            assert f"interrupted: {signal.Signals(signum).name}" in err
            assert "Traceback" not in err
            gone(emu, {sandbox_ids[emu]})
        assert os.listdir(download.parent) == []
        assert Journal().entries() == []


# --- what cannot be saved, and how it is recovered --------------------------------------------

KILLERS = (signal.SIGTERM,)  # SIGKILL and `reap`: tests/integration/test_reap.py
SLEEPS = """
import time
import createos_sync as cs
box = cs.lease().open()
box.start("sleep 1000")
print(box.id, flush=True)
time.sleep(1000)
"""


def test_a_script_killed_by_sigterm_is_found_by_ls_and_reaped() -> None:
    with emulator(transition_delay=0) as emu:
        env = emulator_env(emu)
        procs = {signum: spawn([PYTHON, "-c", SLEEPS], env) for signum in KILLERS}
        ids = {signum: read_until(p, b"\n").decode().strip() for signum, p in procs.items()}

        for signum, proc in procs.items():
            proc.send_signal(signum)
            status, _, _ = finish(proc)
            # Python has no handler for SIGTERM: it ends as abruptly as under SIGKILL.
            assert status == -signum
        for sandbox_id in ids.values():
            assert sandbox_id in emu.live_sandboxes()  # nothing could run
            assert len(processes_of(emu, sandbox_id)) == 1
        assert {e.sandbox_id for e in Journal().entries()} == set(ids.values())

        status, out, err = finish(spawn([*CLI, "ls"], env))
        assert status == 0, err
        for sandbox_id in ids.values():
            (row,) = [line for line in out.splitlines() if line.startswith(sandbox_id)]
            assert row.endswith("orphaned: see `createos-sync reap`")

        status, out, err = finish(spawn([*CLI, "reap"], env))
        assert status == 0, err
        assert sorted(line.split()[1].rstrip(":") for line in out.splitlines()) == sorted(
            ids.values()
        )
        gone(emu, set(ids.values()))
        assert Journal().entries() == []
