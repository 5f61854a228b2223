"""Templates: build a root file system from a Dockerfile, following its log live.

A build is submitted once (a lost answer is never repeated: a build may have
started), then its log is followed over ``GET /templates/{id}/logs?follow=true``,
NDJSON events ``{ts, level, line, attempt, final, status}``, until the event
marked ``final``. The connection may drop at any time; the follower then
reconnects, within the build's deadline, giving up after a few drops in a
row without a new line.

Each line reaches ``on_log`` exactly once. The events carry no sequence
number, and each connection replays the log from its first event
(PROTOCOL.md, inferred), so lines are de-duplicated by position: the
follower keeps a fingerprint ``(ts, level, line, attempt)`` of every event
it delivered, and on a new connection skips each event that matches the
fingerprint at the same position. The first event that does not match, and
every one after it, is new: so a service that does not replay (a new
connection starting with new lines) loses nothing either, and two equal
lines logged at different places are both delivered.
"""

from __future__ import annotations

import collections
import json
import sys
from collections.abc import Callable
from typing import Any

from .._wire import api as _api
from .._wire import retry as _retry
from .._wire.deadline import Deadline
from .._wire.http import Stream, Transport
from .._wire.ndjson import split_lines
from .._wire.server_text import REDACTED, TEMPLATE_STATUS, log_line, token
from ..errors import CreateosApiError, Operation, ProtocolError, TemplateBuildError
from ..models import Template

DEFAULT_BUILD_TIMEOUT = 1800.0
TAIL_LINES = 20
SHOWN_LINE = 500  # characters of one log line in an error message or on the terminal
MAX_NAME = 128
LogCallback = Callable[[str], None]


def check_build(
    name: object, dockerfile: object, base: object, on_log: object, echo: object
) -> None:
    """Raise ``ValueError``/``TypeError`` for arguments a build cannot take."""
    if not isinstance(name, str):
        raise TypeError("name must be a str")
    if not name.strip() or len(name) > MAX_NAME or not name.isprintable():
        raise ValueError(f"name must be 1..{MAX_NAME} printable characters")
    if not isinstance(dockerfile, str):
        raise TypeError(
            "dockerfile must be the Dockerfile's text (a str), e.g. Path('Dockerfile').read_text()"
        )
    if not dockerfile.strip() or "\0" in dockerfile:
        raise ValueError("dockerfile must be non-empty text without NUL")
    if base is not None and (not isinstance(base, str) or not base.strip()):
        raise ValueError("base must be a non-empty str or None")
    if on_log is not None and not callable(on_log):
        raise TypeError("on_log must be callable")
    if not isinstance(echo, bool):
        raise TypeError("echo must be True or False")


def build(
    transport: Transport,
    name: str,
    dockerfile: str,
    base: str | None,
    *,
    on_log: LogCallback | None,
    echo: bool,
    deadline: Deadline,
    sleep: _retry.Sleep,
) -> Template:
    """Submit, follow the log to its final event, and return the ready template."""
    submitted = Template.from_api(_api.create_template(transport, name, dockerfile, base, deadline))
    log = BuildLog(on_log, echo=echo, secret=transport.config.api_key)
    follower = _Follower(transport, submitted.id, log, deadline, sleep)
    status = follower.follow()
    if status == "ready":
        template = follower.ended or _settled(transport, submitted.id, deadline, sleep)
        status = template.status
        if status == "ready":
            return template
    if status == "failed":
        raise TemplateBuildError(submitted.id, name, log.tail())
    raise ProtocolError(f"template {submitted.id} ended its build as {status!r}")


class BuildLog:
    """The lines delivered so far: their fingerprints, the tail, and the callbacks."""

    def __init__(self, on_log: LogCallback | None, *, echo: bool, secret: str) -> None:
        self._on_log = on_log
        self._echo = echo
        self._secret = secret
        self._seen: list[int] = []
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)

    def delivered(self, position: int, event: dict[str, Any]) -> bool:
        """Whether the event at ``position`` of a replay is the one delivered there."""
        return position < len(self._seen) and self._seen[position] == _fingerprint(event)

    def deliver(self, event: dict[str, Any]) -> None:
        self._seen.append(_fingerprint(event))
        line = _line(event)
        if self._secret:
            line = line.replace(self._secret, REDACTED)
        shown = log_line(line, SHOWN_LINE, secret=self._secret)
        self._tail.append(shown)
        if self._on_log is not None:
            self._on_log(line)
        if self._echo:
            print(shown, file=sys.stdout, flush=True)

    def tail(self) -> list[str]:
        return list(self._tail)


def _line(event: dict[str, Any]) -> str:
    line = event.get("line")
    return line if isinstance(line, str) else ""


def _fingerprint(event: dict[str, Any]) -> int:
    return hash((str(event.get("ts")), str(event.get("level")), _line(event),
                 str(event.get("attempt"))))  # fmt: skip


class _Follower:
    """One build's log, followed across dropped connections."""

    def __init__(
        self,
        transport: Transport,
        template_id: str,
        log: BuildLog,
        deadline: Deadline,
        sleep: _retry.Sleep,
    ) -> None:
        self.transport = transport
        self.template_id = template_id
        self.log = log
        self.deadline = deadline
        self.sleep = sleep
        self.budget = _retry.ReconnectBudget()
        self.ended: Template | None = None  # read when the log ended early and the build was over

    def follow(self) -> str:
        """The final status the log announced (or the template's, read if it ended early)."""
        return self.budget.call(
            self._connection, _reconnectable, deadline=self.deadline, sleep=self.sleep
        )

    def _connection(self) -> str:
        stream = _api.follow_template_log(self.transport, self.template_id, self.deadline)
        try:
            final = self._read(stream)
        finally:
            stream.close()
        if final is not None:
            return final
        # The stream ended without its final event: the build may be over all the same.
        template = Template.from_api(
            _api.get_template(self.transport, self.template_id, self.deadline)
        )
        if template.status in ("ready", "failed"):
            self.ended = template  # no need to read it again
            return template.status
        raise CreateosApiError(Operation.TEMPLATE_LOG, None, detail="the log ended early")

    def _read(self, stream: Stream) -> str | None:
        replaying = True  # until an event differs from the one delivered at its place
        for position, raw in enumerate(split_lines(stream.chunks())):
            event = _event(raw)
            replaying = replaying and self.log.delivered(position, event)
            if not replaying:
                self.log.deliver(event)
                self.budget.progressed()
            if event.get("final") is True:
                return token(event.get("status"), TEMPLATE_STATUS) or "unknown"
        return None


def _event(raw: bytes) -> dict[str, Any]:
    try:
        event = json.loads(raw)
    except (ValueError, RecursionError):
        raise ProtocolError("a build log line is not JSON") from None
    if not isinstance(event, dict):
        raise ProtocolError("a build log line is not a JSON object")
    return event


def _reconnectable(exc: BaseException) -> bool:
    """A dropped connection or a 5xx is tried again; a 4xx or a malformed line is not."""
    if not isinstance(exc, CreateosApiError):
        return False
    return exc.status is None or exc.status >= 500


def _settled(
    transport: Transport, template_id: str, deadline: Deadline, sleep: _retry.Sleep
) -> Template:
    def read() -> Template:
        return Template.from_api(_api.get_template(transport, template_id, deadline))

    return _retry.poll(
        read,
        lambda t: t.status not in ("pending", "building"),
        deadline=deadline,
        operation=Operation.TEMPLATE_BUILD,
        sleep=sleep,
    )
