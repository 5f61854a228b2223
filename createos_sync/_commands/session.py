"""A lease's command session: one request and about one round trip per ``run()``.

The first ``run()`` of a lease starts a supervisor (``supervisor.sh``) as one
managed process and attaches its output stream, which then stays attached;
every command after that is one ``input`` request to it, and its output, end
and exit status come back on that stream (``framing``). What it costs:

- first command: 3 requests (create the session, attach its stream, the
  command), as a start-gated process; every later one: 1;
- a timeout, Ctrl-C or a ``Cancel`` set by another thread (it cuts the stream
  the run reads): 1 more (the supervisor ends the command's processes, found
  by process group, by the env marker they inherit, as descendants of the
  command and as holders of its pipes, and says when none is left), plus 1 to
  reattach the stream the deadline broke; unconfirmed twice, the session is
  terminated (``DELETE``, ``tree_exited``), and if that is unconfirmed too the
  lease is poisoned and destroys its sandbox;
- a dropped stream: 1 reconnection from the last sequence number, as any
  managed process.

Terminals, ``start()``, stdin given as a file, commands too long for one
request line, and a second command while the session is busy keep the
managed-process path (``execution``); so does everything once
``CREATEOS_SYNC_SESSION=0`` is set.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from importlib import resources
from typing import Any

from .._sandboxes import sandbox as _sandbox
from .._sandboxes.box import Box
from .._sandboxes.containment import DEFAULT_GRACE, CleanupTime, terminate_confirmed
from .._wire import api as _api
from .._wire.deadline import Deadline
from ..cancel import Cancel
from ..errors import (
    CreateosApiError,
    CreateosError,
    LeaseClosed,
    may_have_taken_effect,
)
from ..result import RunResult, describe_args
from . import framing
from .command import SHELL, Command
from .execution import StdinData, gone_with_its_sandbox, never_sent, poison_after
from .follow import REFUSED_FOR_A_DEAD_SANDBOX, lost_output
from .inflight import InFlight
from .output import Output
from .session_stream import SUPERVISOR_COULD_NOT_START, SessionStream, SupervisorEnded

log = logging.getLogger("createos_sync.process")

WAITER_LOST = "L"  # the supervisor's record for a command whose watcher was killed
GONE = REFUSED_FOR_A_DEAD_SANDBOX  # 404, 409: the process (or its sandbox) has ended
SWITCH = "CREATEOS_SYNC_SESSION"  # "0": every command takes the managed-process path
MAX_REQUEST_BYTES = 32 * 1024  # the supervisor reads a request a byte at a time
SESSION_ARGV0 = "createos-sync-session"
SCRIPT = resources.files(__package__).joinpath("supervisor.sh").read_text("utf-8")


def enabled() -> bool:
    return os.environ.get(SWITCH, "1").strip() != "0"


def inline_stdin(stdin: StdinData | None) -> tuple[bool, bytes | None]:
    """``(fits, data)``: stdin as bytes for a request line, or ``fits=False`` (a file)."""
    if stdin is None:
        return True, None
    if isinstance(stdin, str):
        return True, stdin.encode("utf-8", "surrogateescape")
    if isinstance(stdin, (bytes, bytearray, memoryview)):
        return True, bytes(stdin)
    return False, None


class _Slot:
    """The session of one lease (at most one), and who is using it."""

    def __init__(self) -> None:
        self.busy = threading.Lock()
        self.session: CommandSession | None = None
        self.unavailable = False  # the supervisor could not start here: managed path only


_SLOTS: weakref.WeakKeyDictionary[Box, _Slot] = weakref.WeakKeyDictionary()
_SLOTS_LOCK = threading.Lock()


def _slot(box: Box) -> _Slot:
    with _SLOTS_LOCK:
        slot = _SLOTS.get(box)
        if slot is None:
            slot = _SLOTS[box] = _Slot()
        return slot


def try_run(
    box: Box,
    command: Command,
    *,
    stdin: StdinData | None,
    timeout: float,
    output: Output,
    escalate: Callable[[], None],
    cancel: Cancel | None = None,
) -> RunResult[Any] | None:
    """Run ``command`` in the lease's session; None when it must take the managed path.

    A ``cancel`` set meanwhile ends it as its timeout would: the result is timed out.
    """
    if not enabled():
        return None
    fits, data = inline_stdin(stdin)
    if not fits:
        return None
    try:
        request = framing.run_request(framing.new_token(), 0, command.cwd, data, command.script())
    except UnicodeEncodeError:  # only U+DC80..U+DCFF stand for bytes (surrogateescape)
        raise ValueError(
            "the command, its cwd or an env value holds a lone surrogate, which is no text "
            "and no byte: it cannot be sent"
        ) from None
    if len(request) > MAX_REQUEST_BYTES:
        return None
    slot = _slot(box)
    if slot.unavailable or not slot.busy.acquire(blocking=False):
        return None  # another thread's command runs in it: a managed process for this one
    try:
        if box.closing.is_set():
            return None  # the managed path says how closing met this command
        if cancel is not None and cancel.is_set():
            return never_sent(box, command, timeout, output)
        for replaced in (False, True):  # a session found ended is replaced once
            if slot.session is None or slot.session.ended:
                deadline = Deadline.after(timeout)
                try:
                    slot.session = CommandSession.start(box, deadline)
                except _AttachTimedOut:  # as a start gate never released
                    return never_sent(box, command, timeout, output, duration=timeout)
            if cancel is not None and cancel.is_set():
                return never_sent(box, command, timeout, output)
            try:
                result = slot.session.run(command, data, timeout, output, escalate, cancel)
                break
            except Refused as refused:
                if replaced:
                    raise refused.cause from None
                log.warning("command session %s had ended: starting another", slot.session.id)
        if result is None:  # the supervisor could not run at all (exit before any command)
            slot.unavailable = True
        return result
    finally:
        slot.busy.release()


def retire(box: Box, *, sandbox_ends: bool) -> None:
    """The lease is closing: end its idle session (a busy one is terminated with the rest).

    When the sandbox is destroyed, nothing is sent: the idle supervisor goes
    with it, as the lease's ttl watchdog does (and as what commands left in
    the background always did). Else its stdin is closed (1 request) and it
    exits, leaving what commands started in the background running in the
    kept sandbox, as a managed process would.
    """
    slot = _slot(box)
    if not slot.busy.acquire(blocking=False):
        return
    try:
        session, slot.session = slot.session, None
        if session is not None and not session.ended:
            session.retire(sandbox_ends)
    finally:
        slot.busy.release()


class Refused(Exception):
    """The session refused the command (it had ended): the command was never sent."""

    def __init__(self, cause: CreateosError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _AttachTimedOut(Exception):
    """The deadline passed while attaching a new session's stream (it was terminated)."""


class CommandSession:
    """One supervisor process of a lease, followed over its one output stream."""

    def __init__(self, box: Box, process_id: str) -> None:
        self.box = box
        self.id = process_id
        self.stream = SessionStream(box, process_id)
        self.ended = False
        self._count = 0
        self._ran = False

    @classmethod
    def start(cls, box: Box, deadline: Deadline) -> CommandSession:
        """Create the supervisor (1 request) and attach its stream (1, reconnected as any
        stream): journaled as any creation (an unknown outcome poisons the lease)."""
        args = ["-c", SCRIPT, SESSION_ARGV0, box.sandbox_id, "/workspace"]  # see the script
        with box.table.creating():
            try:
                record = _api.create_process(box.transport, box.sandbox_id, SHELL, args, deadline)
            except BaseException as exc:
                if isinstance(exc, CreateosApiError) and exc.status in REFUSED_FOR_A_DEAD_SANDBOX:
                    _sandbox.raise_if_unavailable(
                        box.transport, box.sandbox_id, deadline,
                        "it can no longer start processes", box.explain,
                    )  # fmt: skip
                if not may_have_taken_effect(exc):
                    raise
                poison_after(box, exc)
            process_id: str = record["process_id"]
            box.table.started(process_id)
        log.info("started command session %s in sandbox %s", process_id, box.sandbox_id)
        session = cls(box, process_id)
        try:
            session.stream.attach_retrying(deadline)
        except BaseException as exc:
            session.abandon()
            if isinstance(exc, CreateosError) and deadline.expired():
                raise _AttachTimedOut() from exc
            raise
        return session

    def run(
        self,
        command: Command,
        stdin: bytes | None,
        timeout: float,
        output: Output,
        escalate: Callable[[], None],
        cancel: Cancel | None = None,
    ) -> RunResult[Any] | None:
        """One command, to its end, its timeout or ``cancel``; None if the supervisor
        never ran."""
        started = time.monotonic()
        deadline = Deadline.after(timeout)
        self._count += 1
        current = InFlight(framing.new_token(), output)
        self.stream.listen(current)
        request = framing.run_request(
            current.token, self._count, command.cwd, stdin, command.script()
        )
        self.box.table.started(self.id)  # a command runs in it: closing terminates it
        try:
            try:
                self._send(request, deadline, command.secrets())
            except CreateosError as exc:
                if may_have_taken_effect(exc):
                    raise
                if not isinstance(exc, CreateosApiError) or exc.status not in GONE:
                    self.box.table.finished(self.id)  # refused, the session still idle
                    raise
                if not self._ran and self.stream.read_end(self.box.deadline(5.0)):
                    self._could_not_start()
                    return None
                self.abandon()
                self._check_sandbox(deadline)
                raise Refused(exc) from exc  # the session is gone, never the command
            self._ran = True
            ended = self.stream.until_done(current, deadline, cancel)
        except BaseException as exc:
            if gone_with_its_sandbox(exc):
                self.ended = True
                raise
            if self.box.closing.is_set() and isinstance(exc, CreateosError):
                self.ended = True  # closing terminates the session (and confirms it)
                return self._cut_short(command, current, started, timeout)
            self._stop(current, escalate)
            raise
        if isinstance(ended, SupervisorEnded):  # the supervisor itself ended under the command
            if ended.exit.exit_code == SUPERVISOR_COULD_NOT_START:
                self._could_not_start()
                return None
            if self.box.table.was_cut(self.id):
                self._note_end(ended)
                return self._cut_short(command, current, started, timeout)
            if not current.accepted:  # it ended before it read this command: never ran
                self._note_end(ended)
                self.abandon()
                raise Refused(CreateosError(f"command session {self.id} had ended"))
            return self._lost(command, current, ended, started, timeout)
        if current.stdout_end == WAITER_LOST:
            self._stop(current, escalate)
            return self._lost(command, current, None, started, timeout)
        timed_out = not current.done
        if not timed_out and self._killed_by_close(current):
            return self._cut_short(command, current, started, timeout)
        if timed_out:
            if cancel is not None and cancel.is_set():
                log.info("command %d of session %s was cancelled", self._count, self.id)
            else:
                log.info(
                    "command %d of session %s timed out after %g s", self._count, self.id, timeout
                )
            self._stop(current, escalate)
        current.flush()
        exit_code, signal = (None, None) if timed_out else current.status()
        if not self.ended:
            self.box.table.finished(self.id)  # idle again: what the command left is its own
        return RunResult(
            args=command.args,
            exit_code=exit_code,
            stdout=output.stdout,
            stderr=output.stderr,
            process_id=f"{self.id}.{self._count}",
            signal=signal,
            timed_out=timed_out,
            truncated=output.truncated,
            duration=time.monotonic() - started,
            timeout=timeout,
            sandbox_id=self.box.sandbox_id,
        )

    def _send(self, line: bytes, deadline: Deadline, secrets: tuple[str, ...] = ()) -> None:
        _api.send_input(
            self.box.transport, self.box.sandbox_id, self.id, line, deadline, secrets=secrets
        )

    def _stop(self, current: InFlight, escalate: Callable[[], None]) -> None:
        """End the command's processes and confirm it; else end the session; else poison."""
        try:
            if not self.ended and self._end_command(current):
                self.box.table.finished(self.id)  # idle again, the command's end confirmed
                return
            self.abandon()
        except KeyboardInterrupt:
            log.warning("interrupted while ending command %d: destroying the sandbox", self._count)
            escalate()
            raise

    def _end_command(self, current: InFlight) -> bool:
        """Ask the supervisor to end the command (1 request), twice at most; True once it
        says no process of it is left and the command's end records arrived."""
        budget = CleanupTime.of(self.box.transport)
        for attempt in (budget.terminate(), budget.retry()):
            report = framing.new_token()
            current.kill_token = report
            try:
                self._send(framing.kill_request(report, self._count, DEFAULT_GRACE), attempt)
                left = self.stream.until_killed(current, attempt)
            except CreateosError as exc:
                log.warning("could not end command %d of session %s: %s", self._count, self.id, exc)
                continue
            if isinstance(left, SupervisorEnded):
                self._note_end(left)
                return False  # the supervisor ended: its tree is confirmed by terminate
            if left == 0 and (current.done or current.never_ran):
                return True
        return False

    def abandon(self) -> None:
        """Terminate the whole session (``DELETE``, confirmed by ``tree_exited``)."""
        self.ended = True
        self.stream.close()
        confirmed = terminate_confirmed(
            self.box.transport,
            self.box.sandbox_id,
            self.id,
            budget=CleanupTime.of(self.box.transport),
        )
        self.box.table.settle(self.id, confirmed)
        if not confirmed:
            log.error("termination of command session %s could not be confirmed", self.id)

    def retire(self, sandbox_ends: bool) -> None:
        self.ended = True
        self.stream.close()
        if sandbox_ends:
            self.box.table.finished(self.id)  # idle: it goes with its sandbox
            return
        try:
            _api.close_stdin(self.box.transport, self.box.sandbox_id, self.id, self.box.deadline())
        except CreateosError as exc:
            log.warning("could not end command session %s: %s", self.id, exc)
            self.box.table.started(self.id)  # unfinished: closing terminates it
            return
        self.box.table.finished(self.id)

    def _could_not_start(self) -> None:
        """It exited before reading anything (no private directory, or the emulator's plain
        mode): the command never ran, and takes a managed process."""
        self.ended = True
        self.stream.close()
        self.box.table.finished(self.id)
        log.info("command session %s could not start: commands take managed processes", self.id)

    def _check_sandbox(self, deadline: Deadline) -> None:
        _sandbox.raise_if_unavailable(
            self.box.transport, self.box.sandbox_id, deadline,
            f"it stopped serving while command session {self.id} ran", self.box.explain,
        )  # fmt: skip

    def _note_end(self, ended: SupervisorEnded) -> None:
        self.ended = True
        self.box.table.finished(self.id)
        log.warning("command session %s ended (%s)", self.id, ended.exit)

    def _lost(
        self,
        command: Command,
        current: InFlight,
        ended: SupervisorEnded | None,
        started: float,
        timeout: float,
    ) -> RunResult[Any]:
        """The supervisor (``ended``), or the part of it that watched the command (None),
        ended while the command ran (``kill -9 -1``, ``kill $PPID``): what is left of the
        command is terminated (with the session, if that ended), and the loss is raised."""
        if ended is not None:
            self._note_end(ended)
            if not self.box.closing.is_set():  # the sandbox may have died under it
                self._check_sandbox(self.box.deadline())
            self.abandon()
        current.flush()
        result = RunResult(
            args=command.args,
            exit_code=None,
            stdout=current.output.stdout,
            stderr=current.output.stderr,
            process_id=f"{self.id}.{self._count}",
            truncated=current.output.truncated,
            duration=time.monotonic() - started,
            timeout=timeout,
            sandbox_id=self.box.sandbox_id,
        )
        lost = lost_output(
            self.stream.last_seq + 1,
            None,
            "the command killed the session's supervisor that watched it: its exit status "
            "and any later output are unknown, and what was left of it was terminated",
        )
        lost.result = result
        raise lost

    def _killed_by_close(self, current: InFlight) -> bool:
        """A signal ended the command after closing began terminating its session (as a
        managed process's ``cut_by_close``): closing's, not the command's own end."""
        _, signal = current.status()
        if signal is None or not self.box.table.was_cut(self.id):
            return False
        self.ended = True  # closing terminates the session (and confirms it)
        return True

    def _cut_short(
        self, command: Command, current: InFlight, started: float, timeout: float
    ) -> RunResult[Any]:
        """Closing the lease ended the session under the command: ``LeaseClosed``, or at the
        lease's ``max_lifetime`` a timed-out result with the output read so far."""
        if not self.box.table.expired:
            raise self._closed(command) from None
        current.flush()
        return RunResult(
            args=command.args, exit_code=None, stdout=current.output.stdout,
            stderr=current.output.stderr, process_id=f"{self.id}.{self._count}",
            timed_out=True, truncated=current.output.truncated,
            duration=time.monotonic() - started, timeout=timeout, sandbox_id=self.box.sandbox_id,
        )  # fmt: skip

    def _closed(self, command: Command) -> LeaseClosed:
        return LeaseClosed(
            f"the lease was closed while command {describe_args(command.args)} ran: closing it "
            f"terminated its session {self.id}"
        )
