"""The fault matrix: every operation of a lease's life under every kind of service failure.

Each cell scripts one fault on one operation (``Fault``) and drives the SDK
through a whole lease, as a user would (``with client.lease() as box``).
Whatever the outcome, every cell checks the same invariants:

- nothing is left alive on the emulator: no process, and no sandbox unless
  a ``CreateosCleanupError`` named it as possibly still running;
- a containment that could not be confirmed surfaces (``cs.is_cleanup_error``);
- when the call succeeds, its output or file arrives whole and once (checksums);
- creations are never repeated after anything but a 429;
- no exception text, note, repr or log record shows the key, an error body,
  a malformed body or a query string.

The expected outcome of each cell is written down in ``EXPECTED`` (and in
RELIABILITY.md), so a change of behaviour fails here. Tests of single faults
in depth live in tests/integration/test_faults.py; this is the systematic grid.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs
import pytest

import createos_sync as cs
from createos_sync.emulator import Emulator, Fault
from createos_sync.journal import Journal

from ..integration.helpers import (
    FAST,
    MIXED_OUTPUT_SCRIPT,
    StreamHasher,
    idle_session,
    mixed_output,
    sha256,
)
from ..waiting import wait_until
from .ledger import Ledger
from .support import (
    KEY,
    SHORT,
    SLOW,
    Nap,
    assert_no_secrets,
    check_no_leaks,
    exception_texts,
    record_texts,
    same_digest,
)

OPERATIONS = (
    "sandbox.create",
    "sandbox.get",
    "sandbox.delete",
    "process.create",
    "process.connect",
    "process.stdin_close",
    "process.input",
    "process.delete",
    "file.write",
    "file.read",
)
# 5xx: 502, whose request may have taken effect; 503 says it was not processed (no capacity).
FAULTS = ("5xx-once", "5xx-always", "503", "drop", "slow", "429", "malformed")
# A lost answer is worst when the request did take effect: these perform it first.
MUTATING = frozenset(
    {"sandbox.create", "sandbox.delete", "process.create", "process.stdin_close",
     "process.input", "process.delete", "file.write"}
)  # fmt: skip

# Outcomes: ok = the call succeeded, output verified; error = a CreateosError, nothing
# left and nothing to confirm; poisoned = the error carries a cleanup failure and the
# sandbox was destroyed instead; destroy-failed = CreateosCleanupError naming a sandbox
# that may still run (journaled for `createos-sync reap`); timed-out = RunResult with
# timed_out=True; served = a file download returns the bytes served (no envelope).
EXPECTED: dict[str, dict[str, str]] = {
    "sandbox.create": {"5xx-once": "error", "5xx-always": "error", "503": "ok",
                       "drop": "error", "slow": "error", "429": "ok", "malformed": "error"},
    "sandbox.get": {"5xx-once": "ok", "5xx-always": "error", "503": "ok",
                    "drop": "ok", "slow": "error", "429": "ok", "malformed": "error"},
    "sandbox.delete": {"5xx-once": "ok", "5xx-always": "destroy-failed", "503": "ok",
                       "drop": "ok", "slow": "destroy-failed", "429": "ok",
                       "malformed": "destroy-failed"},
    "process.create": {"5xx-once": "poisoned", "5xx-always": "poisoned", "503": "ok",
                       "drop": "poisoned", "slow": "poisoned", "429": "ok",
                       "malformed": "poisoned"},
    "process.connect": {"5xx-once": "ok", "5xx-always": "error", "503": "ok",
                        "drop": "ok", "slow": "timed-out", "429": "ok", "malformed": "error"},
    "process.stdin_close": {"5xx-once": "ok", "5xx-always": "error", "503": "ok",
                            "drop": "ok", "slow": "error", "429": "ok", "malformed": "error"},
    # The command of a lease's command session (its first run starts the session: the
    # process.create and process.connect rows above are the session's): a lost or failed
    # answer may have run the command, so it is ended (confirmed) and the error raised.
    "process.input": {"5xx-once": "error", "5xx-always": "error", "503": "ok",
                      "drop": "error", "slow": "error", "429": "ok", "malformed": "error"},
    # slow: the first termination hangs past its share of the cleanup time, the retry
    # (on a share of its own) reaches the service and confirms the end
    "process.delete": {"5xx-once": "ok", "5xx-always": "poisoned", "503": "ok",
                       "drop": "ok", "slow": "ok", "429": "ok", "malformed": "ok"},
    "file.write": {"5xx-once": "ok", "5xx-always": "error", "503": "ok",
                   "drop": "ok", "slow": "error", "429": "ok", "malformed": "error"},
    "file.read": {"5xx-once": "ok", "5xx-always": "error", "503": "ok",
                  "drop": "ok", "slow": "error", "429": "ok", "malformed": "served"},
}  # fmt: skip

MARKER = "BODY-MARKER-7f3a"  # in every malformed body: must never reach a message
QUERY_MARKER = "QUERY-MARKER-91c2"  # in every remote path (a query parameter)
REMOTE = f"/workspace/{QUERY_MARKER}.bin"
# Texts that may only ever live in a body, a header or a query string.
SECRETS = (KEY, MARKER, QUERY_MARKER, "scripted fault", "grace_ms=", "timeout_ms=", "?path=")
LINES = 300  # about 43 KB of mixed stdout/stderr with multi-byte characters
WORKLOAD = ["python3", "-c", MIXED_OUTPUT_SCRIPT, str(LINES)]
SLEEPER = "echo begun; exec sleep 1000"
BLOB = hashlib.sha256(b"reliability").digest() * 8192  # 256 KiB


def malformed_body(operation: str) -> bytes:
    """A 200 answer no client may accept, echoing the key and a query as real bodies do."""
    if operation == "process.connect":
        frame = {"type": "data", "seq": "one", "echo": KEY, "query": f"?after=0&{MARKER}"}
        return json.dumps(frame).encode() + b"\n"
    if operation in ("sandbox.get", "process.delete", "file.write"):
        return f"<html>{KEY} {MARKER} ?path=/x</html>".encode()
    return json.dumps({"status": "error", "echo": KEY, "request": f"?path={MARKER}"}).encode()


def make_fault(operation: str, kind: str) -> Fault:
    perform = operation in MUTATING
    if kind == "5xx-once":
        return Fault(operation, status=502, perform=perform)
    if kind == "5xx-always":
        return Fault(operation, status=502, times=1000)
    if kind == "503":
        return Fault(operation, status=503, times=2)  # never performed: 503 = not processed
    if kind == "drop":
        return Fault(operation, drop=True, perform=perform)
    if kind == "slow":
        return Fault(operation, delay=SLOW)
    if kind == "429":
        return Fault(operation, status=429, retry_after=1)
    return Fault(operation, body=malformed_body(operation))


@pytest.fixture(scope="module")
def expected_output() -> tuple[str, str]:
    out, err = mixed_output(LINES)
    return out.decode(), err.decode()


@attrs.define
class Cell:
    """One scenario being run: its emulator, client, what it saw and what it verified."""

    operation: str
    kind: str
    emu: Emulator
    client: cs.Client
    nap: Nap
    tmp: Path
    expected_output: tuple[str, str]
    sandbox_ids: set[str] = attrs.field(factory=set)
    result: cs.RunResult | None = None
    verified_bytes: int = 0
    runs: int = 0
    served: bytes | None = None
    texts: list[str] = attrs.field(factory=list)

    @property
    def slow(self) -> bool:
        return self.kind == "slow"

    def inject(self) -> None:
        self.emu.faults.add(make_fault(self.operation, self.kind))

    def lease(self, **options: Any) -> cs.Lease:
        # Opening and file transfers take the lease's timeout as their deadline.
        if self.slow and self.operation in ("sandbox.create", "sandbox.get", "file.write",
                                            "file.read"):  # fmt: skip
            options["timeout"] = SHORT
        # No ttl watchdog: a fault meant for a user's process creation would hit its
        # creation first, and a sandbox whose destroy failed would keep it running
        # (tests/integration/test_ttl.py covers the watchdog under faults).
        options.setdefault("ttl", None)
        lease = self.client.lease(**options)
        self.texts.append(repr(lease))
        return lease

    def opened(self, box: cs.Lease) -> None:
        assert box.id is not None
        self.sandbox_ids.add(box.id)

    def run_workload(self, box: cs.Lease, timeout: float = 20.0) -> cs.RunResult:
        hasher = StreamHasher()
        self.runs += 1
        # stdin as a file takes the managed-process path (a start gate released by
        # stdin/close); every other run takes the lease's command session.
        stdin = io.BytesIO(b"") if self.operation == "process.stdin_close" else None
        result = box.run(WORKLOAD, timeout=timeout, on_output=hasher, stdin=stdin)
        self.result = result
        self.texts.append(repr(result))
        if result.ok:
            out, err = self.expected_output
            # Whole and once, in the capture and in the live callback alike.
            same_digest(sha256(result.stdout), sha256(out), "captured stdout")
            same_digest(sha256(result.stderr), sha256(err), "captured stderr")
            same_digest(hasher.digest("stdout"), sha256(out), "live stdout")
            same_digest(hasher.digest("stderr"), sha256(err), "live stderr")
            self.verified_bytes += len(out.encode()) + len(err.encode())
        return result


# --- the workloads: one per operation, each a whole lease ---------------------------


def lease_workload(cell: Cell) -> None:
    """Open (create), run, close (destroy): faults on the sandbox."""
    if cell.operation == "sandbox.get":
        attach_workload(cell)
        return
    if cell.operation != "sandbox.delete":
        cell.inject()
    with cell.lease() as box:
        cell.opened(box)
        assert cell.run_workload(box).ok
        if cell.operation == "sandbox.delete":
            cell.inject()


def attach_workload(cell: Cell) -> None:
    """Attach (a read of the sandbox), run: a creation answers once the sandbox runs, so
    opening one reads nothing; attaching does, under the lease's deadline."""
    made = cell.lease().open()
    cell.opened(made)
    try:
        cell.inject()
        with cell.lease(sandbox_id=made.id) as box:
            assert cell.run_workload(box).ok
    finally:
        cell.emu.faults.clear()
        made.close()


def process_workload(cell: Cell) -> None:
    """A run whose creation, output stream or start-gate release is faulted, or, in a
    command session already started, its one request."""
    with cell.lease() as box:
        cell.opened(box)
        if cell.operation == "process.input":
            assert box.run("true").ok  # the session starts: its creation is not faulted
            cell.emu.clear_request_log()  # the faulted request is the first one logged
        cell.inject()
        result = cell.run_workload(box, timeout=SHORT if cell.slow else 20.0)
        if cell.kind == "slow" and cell.operation == "process.connect":
            assert result.timed_out and result.exit_code is None
            assert (result.stdout, result.stderr) == ("", "")  # the gate was never released
        else:
            assert result.ok


def terminate_workload(cell: Cell) -> None:
    """A background process still running at close: its termination is faulted."""
    with cell.lease() as box:
        cell.opened(box)
        process = box.start(SLEEPER)
        first = next(process.output())  # it runs: SIGTERM cannot race its start-up
        assert first == ("stdout", "begun\n")
        cell.inject()
    result = process.wait(timeout=30)
    assert result.stdout == "begun\n"
    assert not result.ok


def upload_workload(cell: Cell) -> None:
    source = cell.tmp / "blob.bin"
    source.write_bytes(BLOB)
    with cell.lease() as box:
        cell.opened(box)
        cell.inject()
        box.upload(source, REMOTE)
        cell.emu.faults.clear()
        assert box.id is not None
        stored = cell.emu.sandbox_path(box.id, REMOTE).read_bytes()
        same_digest(sha256(stored), sha256(BLOB), "the uploaded file as stored")
        same_digest(sha256(box.read_file(REMOTE)), sha256(BLOB), "the uploaded file read back")
        cell.verified_bytes += 2 * len(BLOB)


def download_workload(cell: Cell) -> None:
    target = cell.tmp / "down" / "blob.bin"
    target.parent.mkdir()
    try:
        with cell.lease() as box:
            cell.opened(box)
            box.write_file(REMOTE, BLOB)
            cell.inject()
            box.download(REMOTE, target)
    finally:
        # Atomic: the file is there whole, or nothing is (no partial file either).
        names = os.listdir(target.parent)
        assert names in ([], ["blob.bin"]), names
    data = target.read_bytes()
    if cell.kind == "malformed":
        cell.served = data
        return
    same_digest(sha256(data), sha256(BLOB), "the downloaded file")
    cell.verified_bytes += len(BLOB)


WORKLOADS: dict[str, Callable[[Cell], None]] = {
    "sandbox.create": lease_workload,
    "sandbox.get": lease_workload,
    "sandbox.delete": lease_workload,
    "process.create": process_workload,
    "process.connect": process_workload,
    "process.stdin_close": process_workload,
    "process.input": process_workload,
    "process.delete": terminate_workload,
    "file.write": upload_workload,
    "file.read": download_workload,
}


# --- the grid ---------------------------------------------------------------------------


@attrs.define
class Report:
    """What one cell did, collected while the grid ran, judged by ``test_fault_matrix``."""

    cell: Cell
    caught: BaseException | None  # the CreateosError the workload ended with, if any
    failure: BaseException | None  # anything else: a failed check inside the workload
    leaked: list[str]
    live_processes: list[Any]
    creation_statuses: list[int | None]
    first_status: int | None


def records(emu: Emulator, operation: str, sandbox_ids: set[str]) -> list[int | None]:
    """Statuses of the logged requests of ``operation`` (of the cell's sandboxes, if any)."""
    return [
        r.status
        for r in emu.request_log
        if r.operation == operation
        and (operation == "sandbox.create" or any(f"/{s}" in r.path for s in sandbox_ids))
    ]


def cleanup_time(operation: str, kind: str) -> float:
    """Deletes run under cleanup's own deadline: a slowed one must outlast it."""
    slowed_delete = kind == "slow" and operation in ("sandbox.delete", "process.delete")
    return SHORT if slowed_delete else 60.0


def run_cell(operation: str, kind: str, tmp: Path, expected_output: tuple[str, str]) -> Report:
    """One cell on an emulator of its own (so that cells can run side by side)."""
    with Emulator(rate_limit=None, transition_delay=0.0, api_key=KEY) as emu:
        nap = Nap()
        client = emu.client(
            requests_per_minute=FAST,
            sleep=nap,
            timeout=20,
            cleanup_timeout=cleanup_time(operation, kind),
        )
        cell = Cell(operation, kind, emu, client, nap, tmp, expected_output)
        caught: BaseException | None = None
        failure: BaseException | None = None
        try:
            WORKLOADS[operation](cell)
        except cs.CreateosError as exc:
            caught = exc
        except BaseException as exc:
            failure = exc
        finally:
            emu.faults.clear()
            client.close()
        cell.sandbox_ids |= set(emu.live_sandboxes()) | _named_sandboxes(caught)
        cell.texts.append(repr(client))
        # An idle command session is the lease's own (as its ttl watchdog): it goes with
        # its sandbox, and one whose destroy failed was named by the cleanup error.
        live = [p for p in emu.live_processes() if not idle_session(emu, p)]
        leaked = check_no_leaks(emu, set(), allowed=_named_alive(caught))
        if kind == "slow" and operation in ("sandbox.create", "process.create"):
            # The late answer is logged when it is finally sent: count it too.
            wait_until(lambda: records(emu, operation, cell.sandbox_ids), what="the late answer")
        statuses = records(emu, operation, cell.sandbox_ids)
        return Report(cell, caught, failure, leaked, live, statuses, (statuses or [None])[0])


class Recorder(logging.Handler):
    """Keeps every log record of every thread while the grid runs."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@attrs.define
class Grid:
    reports: dict[tuple[str, str], Report]
    records: list[logging.LogRecord]
    journal: list[Any]


@pytest.fixture(scope="module")
def grid(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    expected_output: tuple[str, str],
) -> Grid:
    """Run every selected cell: those slowed past a deadline side by side first (they mostly
    wait), then the others four at a time. Each has its own emulator, so a cell can neither
    take another's fault nor see its requests."""
    wanted = [
        (item.callspec.params["operation"], item.callspec.params["kind"])
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_fault_matrix"
    ]
    recorder = Recorder()
    root = logging.getLogger()
    level = root.level
    root.addHandler(recorder)
    root.setLevel(logging.DEBUG)
    reports: dict[tuple[str, str], Report] = {}

    def run(key: tuple[str, str]) -> Report:
        return run_cell(*key, tmp_path_factory.mktemp("-".join(key)), expected_output)

    try:
        slow = [key for key in wanted if key[1] == "slow"]
        for batch, workers in ((slow, len(slow)), ([k for k in wanted if k not in slow], 4)):
            if batch:
                with ThreadPoolExecutor(workers) as pool:
                    reports.update(zip(batch, pool.map(run, batch), strict=True))
    finally:
        root.removeHandler(recorder)
        root.setLevel(level)
    return Grid(reports, recorder.records, Journal().entries())


@pytest.mark.parametrize("kind", FAULTS)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_fault_matrix(operation: str, kind: str, grid: Grid, ledger: Ledger) -> None:
    report = grid.reports[(operation, kind)]
    cell, caught = report.cell, report.caught
    if report.failure is not None:
        raise report.failure
    expected = EXPECTED[operation][kind]

    # 1. Containment: what is left alive is exactly what a cleanup error named.
    assert report.leaked == []
    assert report.live_processes == []

    # 2. The outcome, as written down in EXPECTED.
    assert _outcome(cell, caught) == expected, _describe(caught)
    assert cs.is_cleanup_error(caught) == (expected in ("poisoned", "destroy-failed"))
    if expected == "destroy-failed":
        assert isinstance(caught, cs.CreateosCleanupError)
        assert caught.sandbox_destroyed is False
        assert caught.sandbox_id in cell.sandbox_ids
    if expected == "served":
        assert cell.served == malformed_body(operation)

    # 3. Creations are sent once; only a 429 or a 503 (refused before any effect) is resent.
    if operation in ("sandbox.create", "process.create"):
        sent = [s for s in report.creation_statuses if s not in (429, 503)]
        assert len(sent) == 1, report.creation_statuses
    if kind == "503":
        assert report.first_status == 503
    if kind == "429":
        assert 1.0 in cell.nap.waits  # Retry-After honoured
        assert report.first_status == 429

    ledger.add(scenarios=1, runs=cell.runs, leases=1, bytes_checked=cell.verified_bytes)


def test_only_unconfirmed_destroys_stay_in_the_lease_journal(grid: Grid) -> None:
    """What could not be confirmed destroyed is journaled, so `createos-sync reap` finds it;
    everything else was forgotten once destroyed (or never created)."""
    unconfirmed = {
        r.caught.sandbox_id
        for r in grid.reports.values()
        if isinstance(r.caught, cs.CreateosCleanupError) and r.caught.sandbox_destroyed is False
    }
    assert {e.sandbox_id for e in grid.journal} == unconfirmed
    expected = sum(EXPECTED[op][kind] == "destroy-failed" for op, kind in grid.reports)
    assert len(unconfirmed) == expected


def test_no_secret_reaches_a_message_repr_note_or_log_record_of_the_matrix(grid: Grid) -> None:
    """The key, error and malformed bodies and query strings appear nowhere a user looks:
    exception messages and notes, tracebacks as printed, reprs, and every log record
    (DEBUG included) of every cell."""
    texts = record_texts(grid.records)
    for report in grid.reports.values():
        texts += report.cell.texts + exception_texts(report.caught)
    assert_no_secrets(texts, SECRETS)
    assert_no_secrets(record_texts(grid.records, ours=False), (KEY, MARKER))
    assert len(grid.records) > 10 * len(grid.reports)  # the records really were collected


def _named_sandboxes(exc: BaseException | None) -> set[str]:
    if isinstance(exc, cs.CreateosCleanupError) and exc.sandbox_id:
        return {exc.sandbox_id}
    return set()


def _named_alive(exc: BaseException | None) -> set[str]:
    """Sandboxes a cleanup error says may still be running (sandbox_destroyed False)."""
    if isinstance(exc, cs.CreateosCleanupError) and exc.sandbox_destroyed is False:
        return {exc.sandbox_id} if exc.sandbox_id else set()
    return set()


def _outcome(cell: Cell, caught: BaseException | None) -> str:
    if caught is None:
        if cell.served is not None:
            return "served"
        if cell.result is not None and cell.result.timed_out:
            return "timed-out"
        return "ok"
    if isinstance(caught, cs.CreateosCleanupError):
        return "destroy-failed" if caught.sandbox_destroyed is False else "poisoned"
    if cs.is_cleanup_error(caught):
        notes = " ".join(str(n) for n in getattr(caught, "__notes__", ()))
        return "poisoned" if "was destroyed instead" in notes else "destroy-failed"
    return "error"


def _describe(exc: BaseException | None) -> str:
    return "no exception" if exc is None else "".join(exception_texts(exc)[:1])[-3000:]
