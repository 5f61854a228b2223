"""What a follower asks of the service when its stream cannot tell: ``follow.Recovery``.

- the process's end, by long poll (``wait?scope=tree``), when its stream
  keeps dropping: a 408 is "not yet", and the poll is sent again within the
  deadline;
- where its output journal starts now, after a 410 (to say how much was lost);
- whether the sandbox still serves, when a stream ends without an exit frame
  or a reconnection is refused.
"""

from __future__ import annotations

import logging

from .._sandboxes import sandbox as _sandbox
from .._sandboxes.box import Box
from .._wire import api as _api
from .._wire import retry as _retry
from .._wire.deadline import Deadline
from .._wire.ndjson import Exit
from ..errors import CreateosApiError, CreateosError, Operation, ProtocolError
from ..models import ProcessInfo
from .follow import REFUSED_FOR_A_DEAD_SANDBOX, Ended

log = logging.getLogger("createos_sync.process")

WAIT_POLL_MS = 30_000  # one long poll of a process's end; the service may answer 408 sooner
WAIT_MARGIN = 1.0  # seconds of the deadline kept for the long poll's answer to arrive


class ServiceRecovery:
    """The ``Recovery`` of one managed process, over the API."""

    def __init__(self, box: Box, process_id: str) -> None:
        self._transport = box.transport
        self._sandbox_id = box.sandbox_id
        self._process_id = process_id
        self._sleep = box.sleep
        self._explain = box.explain

    def wait_end(self, deadline: Deadline) -> Ended:
        """Poll until the tree has exited: one request per ``WAIT_POLL_MS`` at most."""
        record = _retry.poll(
            lambda: self._wait_once(deadline),
            lambda found: found is not None,
            deadline=deadline,
            operation=Operation.PROCESS_CONTROL,
            sleep=self._sleep,
        )
        assert record is not None
        info = ProcessInfo.from_api(record)
        if info.signal is not None:
            return Ended(Exit(None, info.signal), info.newest_seq)
        if info.exit_code is None:
            raise ProtocolError("the process record has neither exit_code nor signal")
        return Ended(Exit(info.exit_code, None), info.newest_seq)

    def _wait_once(self, deadline: Deadline) -> dict[str, object] | None:
        # The answer must come within the deadline, and within a read's timeout when the
        # deadline is infinite (a background process): the client's operation timeout.
        patience = min(deadline.remaining(), self._transport.config.timeout) - WAIT_MARGIN
        timeout_ms = min(WAIT_POLL_MS, max(0, int(patience * 1000)))
        try:
            return _api.wait_process(
                self._transport, self._sandbox_id, self._process_id, timeout_ms, deadline
            )
        except CreateosApiError as exc:
            if exc.status in REFUSED_FOR_A_DEAD_SANDBOX:
                self.check_sandbox(deadline)
            raise

    def oldest_seq(self, deadline: Deadline) -> int | None:
        try:
            record = _api.get_process(self._transport, self._sandbox_id, self._process_id, deadline)
        except CreateosError as exc:
            log.debug("could not read process %s: %s", self._process_id, exc)
            return None
        return None if record is None else ProcessInfo.from_api(record).oldest_seq

    def check_sandbox(self, deadline: Deadline) -> None:
        detail = f"it stopped serving while process {self._process_id} ran"
        _sandbox.raise_if_unavailable(
            self._transport, self._sandbox_id, deadline, detail, self._explain
        )
