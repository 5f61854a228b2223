"""The ttl watchdog: a dead man's switch inside the sandbox, renewed from here.

When a lease with a ttl opens, it starts one managed process in its sandbox,
``SCRIPT`` (bash only: no other tool is assumed in the rootfs). Every few
seconds the watchdog reads a small renewal file; once the file's content has
stayed the same for ``ttl`` seconds by the sandbox's own clock, it asks the
guest agent to delete the sandbox (``POST /self/delete``; PROTOCOL.md). The
lease renews by writing a new counter into the file: one idempotent PUT, at
most once per ``ttl / 3``, from the process's one background scheduler. So the
client's clock and the sandbox's never meet: the client only changes the
content, and the watchdog times how long it stayed unchanged.

Contents of the file: a counter (armed: each new value restarts the count),
``hold`` (disarmed but kept: written before a pause), ``stop`` (the watchdog
exits). A file write is confirmed by the service and retried safely, so a
disarm is durable: once the PUT answered, the watchdog will read it before
it could ever fire. At close, when the sandbox is kept or paused, the
watchdog is terminated instead (confirmed by ``tree_exited``, so that a kept
sandbox runs nothing of ours), and only if that stays unconfirmed is
``stop`` written.

A watchdog that finds its clock jumped (it slept far longer than it asked,
as a process of a paused and resumed sandbox does, after an auto-pause say)
counts again from the jump: a pause never makes a sandbox look overdue.

Renewals that fail are retried within the window (1 s, then doubling, at
most ``ttl / 3``), logged, and a WARNING says when the deadline could pass
before the next attempt. A renewal answered 404 means the sandbox is gone:
the next call of the lease raises ``LeaseExpired`` (when the ttl could have
run out) and its close is quiet.

Request budget: starting costs 1 (the process creation; the watchdog counts
from its own start, so no first renewal is needed), renewing 1 per ``ttl /
3`` (12 an hour at the default ttl of 900 s); ``hold``, ``rearm`` and ``stop``
1 each (``stop`` up to 4 when the termination needs its retry, its read and
then the write). A creation whose answer was lost costs 1 more (the process list that
finds it by its file name).
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
from collections.abc import Callable

from .._wire import api as _api
from .._wire.deadline import Deadline
from .._wire.retry import Repeat
from .._wire.server_text import checked_id
from ..errors import (
    CreateosApiError,
    CreateosError,
    LeaseExpired,
    Operation,
    ProtocolError,
    SandboxUnavailable,
    may_have_taken_effect,
)
from . import background as _background
from .box import Box
from .containment import CleanupTime, terminate_confirmed

log = logging.getLogger("createos_sync.watchdog")

SHELL = "/bin/bash"
NAME = "createos-sync-ttl"  # the script's $0: how the watchdog shows in a process list
HOLD = b"hold\n"
STOP = b"stop\n"
RETRY_FIRST = 1.0  # seconds before the first retry of a failed renewal
BUSY_RETRY = 0.5  # a renewal that finds the watchdog busy (pause, close) looks again after this
ATTEMPT_MAX = 30.0  # the deadline of one renewal attempt, at most
# The watchdog counts whole seconds from when it read the content: it cannot
# fire before the renewal was sent plus the ttl, less one second of rounding.
SLACK = 1.5

SCRIPT = r"""# createos-sync ttl watchdog: deletes this sandbox when its lease stops renewing
name=$1 ttl=$2 every=$3
exec </dev/null >/dev/null
agent=${CREATEOS_AGENT_URL:-http://127.0.0.1:1029}
agent=${agent#http://}; agent=${agent%%/*}
host=${agent%:*} port=${agent##*:}
[ "$port" = "$agent" ] && port=80
fire() {
  exec {conn}<>"/dev/tcp/$host/$port" || return 1
  printf '%s\r\n' "POST /self/delete?reason=ttl HTTP/1.1" "Host: $host:$port" \
    "Content-Length: 0" "Connection: close" "" >&"$conn"
  IFS=' ' read -r -t 10 -u "$conn" _ code _
  exec {conn}>&-
  [ "$code" = 202 ]
}
exec {nap}<> <(:)
seen= last=$SECONDS before=$SECONDS
while :; do
  read -r -t "$every" -u "$nap" _
  now=$SECONDS
  f=/tmp/$name; [ -e "$f" ] || f=${TMPDIR:-/tmp}/$name
  v=; { IFS= read -r v < "$f"; } 2>/dev/null
  if (( now < before || now - before > 2 * every + 5 )); then last=$now; fi
  before=$now
  if [ "$v" != "$seen" ]; then seen=$v last=$now; fi
  case $v in stop) exit 0 ;; hold) continue ;; esac
  if (( now - last >= ttl )); then
    echo "createos-sync: no renewal for $ttl s: deleting this sandbox" >&2
    if fire; then last=$now
    else echo "createos-sync: the guest agent at $host:$port did not accept: retrying" >&2
    fi
  fi
done
"""


def check_interval(ttl: float) -> int:
    """How often the watchdog looks at its file: a tenth of the ttl, 1 to 10 seconds."""
    return max(1, min(10, int(ttl // 10)))


class Watchdog:
    """The ttl of one lease: its process in the sandbox and the renewals from here.

    States: ``off`` (no ttl), ``new``, ``armed`` (renewing), ``held``
    (paused), ``stopped`` (the lease let go of it), ``gone`` (the sandbox was
    found deleted). Renewals and state changes are serialized by one lock, so
    that a renewal can never land after the ``hold`` or ``stop`` it would undo.
    """

    def __init__(
        self,
        ttl: float | None,
        *,
        scheduler: Callable[[], _background.Scheduler] = _background.scheduler,
        clock: Callable[[], float] = _background.clock,
    ) -> None:
        self.ttl = ttl
        self.name = f".createos-sync-ttl-{secrets.token_hex(8)}"
        self.process_id: str | None = None
        self._scheduler = scheduler
        self._clock = clock
        self._lock = threading.Lock()
        self._state = "off" if ttl is None else "new"
        self._box: Box | None = None
        self._counter = 0
        self._confirmed = 0.0  # clock() when the last renewal that landed was sent
        self._failures = 0
        self._warned = False
        self._job: _background.Job | None = None
        self._generation = 0
        self._overdue_when_gone = False

    @property
    def path(self) -> str:
        """(inferred) The renewal file in the sandbox: its /tmp, as the watchdog looks first."""
        return f"/tmp/{self.name}"

    @property
    def period(self) -> float:
        return (self.ttl or 0.0) / 3

    @property
    def state(self) -> str:
        return self._state

    @property
    def gone(self) -> bool:
        """The sandbox was found deleted: nothing is left to clean up."""
        return self._state == "gone"

    # --- the lease's hooks --------------------------------------------------

    def arm(self, box: Box, deadline: Deadline) -> None:
        """Start the watchdog in the sandbox (1 request) and schedule renewals; no-op without ttl.

        A creation whose answer was lost is resolved by finding the process
        by its file name; if that fails, the renewal file is set to ``stop``
        (so that no watchdog it may have started can fire) and the error propagates.
        """
        if self.ttl is None:
            return
        self._box = box
        sent = self._clock()
        try:
            self.process_id = self._create(box, deadline)
        except BaseException:
            self._write_quietly(STOP)
            raise
        with self._lock:
            self._state, self._confirmed = "armed", sent
            self._schedule(self.period)
        log.info(
            "ttl watchdog %s armed in sandbox %s: %g s", self.process_id, box.sandbox_id, self.ttl
        )

    def verify(self) -> None:
        """Before a call: raise ``LeaseExpired`` if the watchdog deleted the sandbox.

        Free while renewals land; when the ttl could have run out since the
        last one (the program was frozen), renews at once (1 request) to find out.
        """
        if self.ttl is None:
            return
        with self._lock:
            if self._state == "armed" and self._overdue():
                self._renew_locked()
            if self._state == "gone":
                raise self._gone_error()

    def hold(self) -> None:
        """Disarm before a pause (1 request): the sandbox's clock jumps when it resumes.

        A sandbox that is not running (409: paused behind the lease's back,
        by auto-pause say) has its watchdog frozen with it: held as it is.
        """
        with self._lock:
            if self._state != "armed":
                return
            try:
                self._write(HOLD)
            except CreateosApiError as exc:
                if exc.status != 409:
                    raise
                log.info("ttl watchdog of sandbox %s held as it is: %s", self._sid(), exc)
            self._state = "held"
            self._cancel_job()

    def rearm(self) -> None:
        """Re-arm after a resume (1 request), whether it was held or paused behind our back."""
        with self._lock:
            if self._state not in ("armed", "held"):
                return
            sent = self._clock()
            self._state = "armed"
            try:
                self._write(f"{self._next_counter()}\n".encode())
            except CreateosError:
                self._schedule(RETRY_FIRST)  # keep trying in the background
                raise
            self._confirmed = sent
            self._schedule(self.period)

    def resumed(self, box: Box, deadline: Deadline) -> None:
        """After a resume (1 request): re-arm, or arm one never started (a fork made
        ``start_paused``, whose lease opened on it paused)."""
        if self._state == "new":
            self.arm(box, deadline)
        else:
            self.rearm()

    def explain(self, error: SandboxUnavailable) -> SandboxUnavailable:
        """What to raise for the sandbox found destroyed under a command (``Box.explain``):
        ``LeaseExpired`` when the ttl could have run out since the last renewal."""
        if error.status not in ("destroying", "destroyed"):
            return error
        with self._lock:
            if self._state == "armed":
                self._mark_gone()
            if self._state != "gone" or not self._overdue_when_gone:
                return error
            return self._gone_error()

    def stop(self, budget: CleanupTime | None = None) -> None:
        """Let go at close when the sandbox is kept or paused: terminate the watchdog (1 request).

        ``budget``: the close's cleanup time (a fresh one if None). An
        unconfirmed termination falls back on writing ``stop``; that write's
        error is raised. A held watchdog (its sandbox paused) can never fire:
        it only gets ``stop`` written, and a failure is no error. A sandbox
        found gone instead is recorded (``gone``).
        """
        with self._lock:
            if self._state == "armed" and self._overdue():
                self._renew_locked()  # frozen past the ttl? then the sandbox may be gone
            if self._state not in ("armed", "held"):
                return
            self._cancel_job()
            if self._state == "held":  # should anyone resume the sandbox, it exits
                self._state = "stopped"
                self._write_quietly(STOP)
                return
            box = self._box
            assert box is not None and self.process_id is not None
            budget = budget or CleanupTime.of(box.transport)
            if terminate_confirmed(box.transport, box.sandbox_id, self.process_id, budget=budget):
                self._state = "stopped"
                return
            try:
                self._write(STOP, deadline=budget.read())
            except CreateosApiError as exc:
                if exc.status == 404 and self._found_gone():
                    return
                raise
            self._state = "stopped"

    def cancel(self) -> None:
        """Stop renewing, without a request (the sandbox is being destroyed)."""
        with self._lock:
            if self._state in ("new", "armed", "held"):
                self._state = "stopped"
            self._cancel_job()

    # --- renewals -----------------------------------------------------------

    def _tick(self, generation: int) -> None:
        if not self._lock.acquire(blocking=False):  # a hold, stop or check is under way
            self._scheduler().call_later(
                BUSY_RETRY, lambda: self._tick(generation), name=f"ttl renewal of {self._sid()}"
            )
            return
        try:
            if generation == self._generation and self._state == "armed":
                self._renew_locked()
        finally:
            self._lock.release()

    def _renew_locked(self) -> None:
        sent = self._clock()
        try:
            self._write(f"{self._next_counter()}\n".encode(), attempt=True)
        except CreateosApiError as exc:
            if exc.status == 404 and self._found_gone():
                return
            if exc.status == 409:  # not running (auto-paused?): its watchdog is frozen too
                log.info("ttl renewal of sandbox %s skipped: %s", self._sid(), exc)
                self._schedule(self.period)
                return
            self._failed(exc)
        except CreateosError as exc:
            self._failed(exc)
        else:
            self._confirmed, self._failures, self._warned = sent, 0, False
            self._schedule(self.period)

    def _failed(self, exc: CreateosError) -> None:
        self._failures += 1
        delay = min(self.period, RETRY_FIRST * 2 ** (self._failures - 1))
        left = self._confirmed + (self.ttl or 0.0) - self._clock()
        if left <= delay + SLACK and not self._warned:
            self._warned = True
            log.warning(
                "ttl renewals of sandbox %s keep failing (%s): its watchdog may delete it "
                "in %.0f s; retrying in %.0f s",
                self._sid(),
                exc,
                max(0.0, left),
                delay,
            )
        else:
            log.info("ttl renewal of sandbox %s failed (%s): retrying in %.0f s", self._sid(), exc,
                     delay)  # fmt: skip
        self._schedule(delay)

    def _schedule(self, delay: float) -> None:
        self._cancel_job()
        generation = self._generation
        self._job = self._scheduler().call_later(
            delay, lambda: self._tick(generation), name=f"ttl renewal of {self._sid()}"
        )

    def _cancel_job(self) -> None:
        self._generation += 1  # a tick already on its way finds itself stale
        if self._job is not None:
            self._job.cancel()
            self._job = None

    # --- requests -----------------------------------------------------------

    def _create(self, box: Box, deadline: Deadline) -> str:
        ttl = self.ttl or 0.0
        args = ["-c", SCRIPT, NAME, self.name, str(math.ceil(ttl)), str(check_interval(ttl))]
        try:
            record = _api.create_process(
                box.transport, box.sandbox_id, SHELL, args, deadline, operation=Operation.TTL
            )
        except BaseException as exc:
            if not may_have_taken_effect(exc):
                raise
            found = self._find(box, deadline)
            if found is None:
                raise
            log.info("ttl watchdog %s was created although its answer was lost", found)
            return found
        return str(record["process_id"])

    def _find(self, box: Box, deadline: Deadline) -> str | None:
        """The watchdog among the sandbox's processes, by its unique file name (None: not
        found, or listed without a usable id)."""
        try:
            records = _api.list_processes(box.transport, box.sandbox_id, deadline)
        except CreateosError as exc:
            log.warning("could not look for the ttl watchdog after a lost answer: %s", exc)
            return None
        for record in records:
            args = record.get("args")
            if isinstance(args, list) and self.name in args:
                try:  # it goes into the path of its termination at close
                    return checked_id(record.get("process_id"), "process id in the process list")
                except ProtocolError as exc:
                    log.warning("the ttl watchdog was found after a lost answer, but %s", exc)
                    return None
        return None

    def _write(
        self, content: bytes, *, attempt: bool = False, deadline: Deadline | None = None
    ) -> None:
        box = self._box
        if box is None:
            raise RuntimeError("the ttl watchdog was never armed")
        if deadline is None:
            seconds = min(max(self.period / 2, 2.0), ATTEMPT_MAX) if attempt else None
            deadline = box.deadline(seconds)
        _api.write_file(
            box.transport,
            box.sandbox_id,
            self.path,
            content,
            deadline,
            repeat=Repeat.SAFE,  # the same content twice changes nothing
            operation=Operation.TTL,
        )

    def _write_quietly(self, content: bytes) -> None:
        try:
            self._write(content)
        except (CreateosError, RuntimeError) as exc:
            log.debug("could not write the ttl file: %s", exc)

    def _found_gone(self) -> bool:
        """After a 404: read the sandbox (1 request); True, and state ``gone``, if it is gone."""
        box = self._box
        assert box is not None
        try:
            status = _api.get_sandbox(box.transport, box.sandbox_id, box.deadline()).get("status")
        except CreateosApiError as exc:
            if exc.status != 404:
                return False
            status = "destroyed"
        except CreateosError:
            return False
        if status not in ("destroying", "destroyed"):
            return False
        self._mark_gone()
        return True

    def _mark_gone(self) -> None:
        self._state = "gone"
        self._overdue_when_gone = self._overdue()
        self._cancel_job()
        log.warning(
            "sandbox %s is gone%s", self._sid(),
            f": its ttl watchdog deleted it ({self.ttl:g} s without renewal)"
            if self._overdue_when_gone else " (destroyed outside this lease)",
        )  # fmt: skip

    # --- helpers ------------------------------------------------------------

    def _overdue(self) -> bool:
        """Whether the ttl could have run out since the last renewal that landed."""
        return self._clock() - self._confirmed >= (self.ttl or 0.0) - SLACK

    def _next_counter(self) -> int:
        self._counter += 1
        return self._counter

    def _sid(self) -> str:
        return self._box.sandbox_id if self._box is not None else "(none)"

    def _gone_error(self) -> SandboxUnavailable:
        if self._overdue_when_gone:
            return LeaseExpired(self._sid(), self.ttl or 0.0)
        return SandboxUnavailable(self._sid(), "destroyed", "it was destroyed outside this lease")
